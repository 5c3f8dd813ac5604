"""The parent–child trial contract, written in one place: what the parent (:mod:`bakeoff.run`) hands a trial
process and what a launcher tells each process of the trial's group.

- :class:`TrialRequest` — what the parent asks of one trial: the spec, where its result goes, its checkpoint and
  TensorBoard folders, whether to keep the trained model (and where), to probe the matmul ceiling, to profile, to
  evaluate, and how often to say its progress. Written once, as one JSON file (:meth:`TrialRequest.write`; the
  local executor's ``request_file``, beside the trial's log), whose path is the trial process's one argument
  (``python -m bakeoff.trial REQUEST.json``); read once, by :func:`bakeoff.trial.main.main`. Every process of a
  group reads the same file.
- :class:`Placement` — what differs between the processes of one group, set by the launcher in each member's
  environment (:mod:`bakeoff.run.launchers`), since a launcher such as torchrun starts the ranks itself from one
  command line: the rank, the local rank (the GPU it takes), its threads and when the group was launched. Its
  variables are named here and nowhere else (:data:`RANK_ENV`, :data:`LOCAL_RANK_ENV`, :data:`THREADS_ENV`,
  :data:`LAUNCHED_AT_ENV`); :meth:`Placement.env` writes them and :meth:`Placement.read` reads them.

What travels back is the :class:`bakeoff.core.result.TrialResult` the process writes, whose sections are typed
(``setup``: what the trial process set up; ``execution``: how the parent ran it).

User settings that are no part of the contract stay environment variables read where they act, each in one module:
``BAKEOFF_HEARTBEAT_S`` (the console), ``BAKEOFF_MACHINE_LOCK`` (the run's lock), ``BAKEOFF_GEMM_RATES`` and
``BAKEOFF_SPEECH_CACHE`` (caches), ``BAKEOFF_POWERCAP_ROOT`` (where RAPL's counters are read). One user setting
feeds the request: ``BAKEOFF_PROGRESS_S`` (:func:`progress_every`), read by the parent and handed to the child.

Nothing here imports a framework or anything of bakeoff above :mod:`bakeoff.core`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bakeoff.core.spec import RunSpec, SpecError

RANK_ENV = "BAKEOFF_RANK"
"""A member's rank, set by bakeoff's own launchers (TensorFlow's workers, ``jax.distributed`` processes); torchrun
sets its own ``RANK``."""
LOCAL_RANK_ENV = "BAKEOFF_LOCAL_RANK"
"""A member that is one rank: its index among its trial's ranks on its machine (torchrun says ``LOCAL_RANK=0`` to
each one-process agent, so the launcher says the machine-wide one here)."""
THREADS_ENV = "BAKEOFF_THREADS"
"""The CPU threads each computing process of the group is given (the cores shared out among them)."""
LAUNCHED_AT_ENV = "BAKEOFF_LAUNCHED_AT"
"""The launcher's clock (``time.time()``) when it started the group."""

PROGRESS_ENV = "BAKEOFF_PROGRESS_S"
"""A user setting: seconds between a trial's progress lines (default :data:`PROGRESS_S`)."""
PROGRESS_S = 10.0


def progress_every(environ: Mapping[str, str] | None = None) -> float:
    """Seconds between a trial's progress lines: ``BAKEOFF_PROGRESS_S`` when set, else :data:`PROGRESS_S`."""
    environ = os.environ if environ is None else environ
    return float(environ.get(PROGRESS_ENV) or PROGRESS_S)


def _path(value: Any) -> Path | None:
    return Path(value) if value else None


@dataclasses.dataclass(frozen=True)
class TrialRequest:
    """What the parent asks of one trial process (and of every process of its group). None of it is part of the
    spec: the trial's key, and what it measures, are those of the same trial asked nothing more."""

    spec: RunSpec
    result: Path  # where rank 0 writes its result; rank N beside it (bakeoff.trial.main.rank_result_path)
    checkpoint_dir: Path | None = None  # resume from a checkpoint left here, and write them here
    tensorboard_dir: Path | None = None  # TensorBoard event files
    keep_dir: Path | None = None  # a trial that succeeds keeps its trained model here (bakeoff.results.model_dir)
    probe_ceiling: bool = False  # probe the matmul ceiling after the result (bakeoff.measure.ceiling.in_trial)
    profile_dir: Path | None = None  # profile a few more steps into this folder (bakeoff.trial.profile)
    profile_steps: int = 0  # how many
    evaluate: bool = True  # False: never evaluate the model (a suite about training time alone)
    progress_s: float = PROGRESS_S  # seconds between the progress lines the parent's heartbeat reads back

    def to_dict(self) -> dict[str, Any]:
        """The request as JSON-ready data: the spec as its dict, paths as strings (None as null)."""
        out: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            out[field.name] = (value.to_dict() if isinstance(value, RunSpec) else
                               str(value) if isinstance(value, Path) else value)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TrialRequest:
        """A request from :meth:`to_dict`'s data; a key this bakeoff does not know raises :class:`SpecError`."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise SpecError(f"trial request has unknown keys {unknown}; known: {sorted(known)}")
        if "spec" not in raw or "result" not in raw:
            raise SpecError("trial request needs 'spec' and 'result'")
        return cls(spec=RunSpec.from_dict(raw["spec"]), result=Path(raw["result"]),
                   checkpoint_dir=_path(raw.get("checkpoint_dir")), tensorboard_dir=_path(raw.get("tensorboard_dir")),
                   keep_dir=_path(raw.get("keep_dir")), probe_ceiling=bool(raw.get("probe_ceiling", False)),
                   profile_dir=_path(raw.get("profile_dir")), profile_steps=int(raw.get("profile_steps") or 0),
                   evaluate=bool(raw.get("evaluate", True)),
                   progress_s=float(raw.get("progress_s", PROGRESS_S)))

    def write(self, path: Path) -> Path:
        """Write the request to ``path`` (the trial's one argument) and return it."""
        path.write_text(json.dumps(self.to_dict(), indent=1))
        return path

    @classmethod
    def read(cls, path: Path) -> TrialRequest:
        """The request written at ``path``."""
        return cls.from_dict(json.loads(Path(path).read_text()))


def _int(value: str | None) -> int | None:
    return int(value) if value not in (None, "") else None


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one process of a trial's group stands, as its launcher set it in the process's environment (None:
    not set, a process outside a group or one whose launcher says it otherwise, as torchrun's ``RANK``)."""

    rank: int | None = None
    local_rank: int | None = None
    threads: int | None = None
    launched_at: float | None = None

    def env(self) -> dict[str, str]:
        """The environment variables that say this placement (only the fields set)."""
        values = {RANK_ENV: self.rank, LOCAL_RANK_ENV: self.local_rank, THREADS_ENV: self.threads,
                  LAUNCHED_AT_ENV: self.launched_at}
        return {name: repr(value) if isinstance(value, float) else str(value)
                for name, value in values.items() if value is not None}

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> Placement:
        """The placement this process's environment (or ``environ``) says."""
        environ = os.environ if environ is None else environ
        launched = environ.get(LAUNCHED_AT_ENV)
        return cls(rank=_int(environ.get(RANK_ENV)), local_rank=_int(environ.get(LOCAL_RANK_ENV)),
                   threads=_int(environ.get(THREADS_ENV)) or None,
                   launched_at=float(launched) if launched else None)
