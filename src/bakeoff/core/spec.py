"""The spec of a trial, and the choices it is made of.

* :class:`RunSpec` — a frozen, hashable, JSON-serialisable description of one trial: its content key identifies
  the trial in the store.
* The choices (:class:`Framework`, :class:`Execution`, :class:`Precision`, :class:`Parallelism`,
  :class:`Device`) and a result's :class:`Status`; :class:`SpecError`, what bad input raises.

Nothing here imports a framework (nor anything else of bakeoff but the framework records, read on first use).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bakeoff.core.choices import (  # noqa: F401  (the choices are read from here too)
    RETIRED_VALUES,
    Device,
    Execution,
    Parallelism,
    Precision,
    SpecError,
    Status,
    _Choice,
)


def framework_choice() -> type[_Choice]:
    """:class:`Framework`: the choice of framework rows, one member per row the framework folders declare
    (:mod:`bakeoff.core.frameworks`), named by their values (``torch`` is ``Framework.TORCH``, ``keras-jax``
    ``Framework.KERAS_JAX``). Built on first use, from the discovered records: no framework is named here."""
    from bakeoff.core import frameworks  # read on first use: the records are discovered then

    return _choice_of(tuple(frameworks.names()))


@functools.cache
def _choice_of(names: tuple[str, ...]) -> type[_Choice]:
    """One class per set of rows, so ``Framework`` is the same class for as long as the rows are the same (a test
    that adds a framework folder and removes it again gets the first class back)."""
    members = {name.upper().replace("-", "_"): name for name in names}
    return _Choice("Framework", members, module=__name__, qualname="Framework")  # type: ignore[return-value]


if TYPE_CHECKING:  # for readers and type checkers; the value comes from __getattr__ below
    Framework = _Choice


def __getattr__(name: str) -> Any:
    if name == "Framework":  # ``from bakeoff.core.spec import Framework`` (framework_choice)
        return framework_choice()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


RETIRED = ("hosts",)
"""Spec fields an older bakeoff stored that this one reads past: ``hosts`` (multi_worker workers placed on machines
through ssh, replaced by the Slurm and Ray executors). A trial stored with hosts keeps its stored key."""


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One trial, completely described. Its :meth:`key` identifies the trial in the store.

    Training stops at the first of ``max_steps``, ``max_epochs`` and ``max_seconds`` that is set, or when the
    target is reached if ``stop_at_target``. Evaluation runs every ``eval_every`` steps, off the clock.

    ``batch_size`` is the *global* batch of one micro-step, whatever the parallelism: under synchronous data
    parallelism each of the ``workers`` replicas takes ``batch_size / workers`` consecutive examples of it
    (:func:`shard_batch`), so the union of the replicas' shards is exactly the single-device batch. Under
    ``parameter_server`` training is asynchronous: each step is one global batch, run by whichever worker is free.
    """

    workload: str  # its name (results are stored by it)
    framework: Framework
    preset: str = "tiny"
    execution: Execution = Execution.EAGER
    precision: Precision = Precision.FP32
    parallelism: Parallelism = Parallelism.NONE
    workers: int = 1
    batch_size: int = 32
    grad_accum: int = 1
    max_steps: int | None = None
    max_epochs: float | None = None
    max_seconds: float | None = None
    eval_every: int = 50
    warmup_steps: int = 3  # steady-state statistics skip the first step and these many more
    stop_at_target: bool = False
    checkpoint_every: int = 0  # steps between checkpoints (0: none); a trial resumes from its last one
    learning_rate: float | None = None  # None: the workload preset's
    seed: int = 0
    repeat: int = 0
    device: Device = Device.AUTO
    threads: int = 0  # CPU threads for the framework; 0: all cores the machine reports
    data: tuple[tuple[str, str], ...] = ()  # workload data options, e.g. (("train", "reviews.csv"),)
    config: tuple[tuple[str, str], ...] = ()  # overrides of preset fields, e.g. (("d_model", "512"),)
    target: float | None = None  # the quality target; None: the workload's (derived from the data for user data)
    # What the result depends on beyond these fields (see bakeoff.core.identity): content hashes of the data files the
    # data options name ("data:train"), of the resolved configuration, and the bakeoff and framework versions.
    # Filled in by the runner; a data option with a content hash counts in the key by its content, not its path.
    content: tuple[tuple[str, str], ...] = ()
    # A workload named by a module or file rather than found by name (bakeoff.core.discover): its class as
    # "module:Class", and the folder its module needs on sys.path ('' for none), so that a trial process resolves
    # it whatever its own folder. The key counts the class, not the folder (the content counts its code).
    workload_class: str = ""
    workload_path: str = ""

    def __post_init__(self) -> None:
        # Accept plain strings (from TOML, JSON or the CLI) and normalise them, so equal specs hash equally.
        set_ = object.__setattr__
        set_(self, "framework", framework_choice().parse(self.framework, "framework"))
        set_(self, "execution", Execution.parse(self.execution, "execution mode"))
        set_(self, "precision", Precision.parse(self.precision, "precision"))
        set_(self, "parallelism", Parallelism.parse(self.parallelism, "parallelism"))
        set_(self, "device", Device.parse(self.device, "device"))
        for name in ("data", "config", "content"):
            pairs = getattr(self, name)
            pairs = pairs.items() if isinstance(pairs, Mapping) else pairs
            set_(self, name, tuple(sorted((str(k), str(v)) for k, v in pairs)))
        if self.target is not None:
            set_(self, "target", float(self.target))
        for name in ("workers", "batch_size", "grad_accum", "eval_every"):
            if int(getattr(self, name)) < 1:
                raise SpecError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.parallelism is Parallelism.NONE and self.workers != 1:
            raise SpecError(f"workers = {self.workers} needs a parallelism (data_parallel, multi_worker "
                            "or parameter_server); without one a trial has 1 worker")
        if self.parallelism.synchronous and self.batch_size % self.workers:
            raise SpecError(f"batch_size {self.batch_size} is the global batch and must divide evenly over "
                            f"{self.workers} replicas: use a multiple of {self.workers}")
        if self.parallelism.synchronous and self.workers > 1 and self.max_seconds is not None:
            # Each rank would stop on its own clock: one leaves while another waits in a collective, until the
            # timeout. Agreeing would take a collective per step, which the step times would then include.
            raise SpecError(f"max_seconds {self.max_seconds:g} cannot stop {self.workers} synchronous replicas "
                            f"({self.parallelism.value}) at one step: each would stop on its own clock; give the "
                            "budget as max_steps or max_epochs")
        if min(self.warmup_steps, self.threads, self.repeat, self.checkpoint_every) < 0:
            raise SpecError("warmup_steps, threads, repeat and checkpoint_every must not be negative")
        if self.max_steps is None and self.max_epochs is None and self.max_seconds is None:
            raise SpecError("a trial needs a budget: set max_steps, max_epochs or max_seconds")

    @property
    def data_options(self) -> dict[str, str]:
        return dict(self.data)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, enum.Enum):
                value = value.value
            elif f.name in ("data", "config", "content"):
                value = dict(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RunSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        raw = {k: v for k, v in raw.items() if k not in RETIRED}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise SpecError(f"unknown spec field(s) {', '.join(unknown)}; accepted: {', '.join(sorted(known))}")
        return cls(**raw)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @property
    def config_overrides(self) -> dict[str, str]:
        return dict(self.config)

    def key(self) -> str:
        """A stable identifier: the hash of the canonical JSON form, in which a data option whose file content is
        hashed in ``content`` counts by that hash, not by its path (one file through two paths is one trial)."""
        raw = self.to_dict()
        content = raw["content"]
        raw["data"] = {k: v for k, v in raw["data"].items() if f"data:{k}" not in content}
        for name in ("workload_class",):
            if not raw[name]:
                del raw[name]  # a field added later counts only when set, so earlier keys stay valid
        del raw["workload_path"]  # where the module is on this machine: moving a project is the same trial
        return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:16]

    def preset_title(self) -> str:
        """The preset with the overrides of its fields: ``"tiny"``, ``"tiny (d_model=128, num_layers=2)"``."""
        overrides = ", ".join(f"{k}={v}" for k, v in self.config)
        return self.preset + (f" ({overrides})" if overrides else "")

    def model(self) -> str:
        """The model a trial trains: ``"text_classifier/tiny"``, ``"text_classifier/tiny (d_model=128)"``."""
        return f"{self.workload}/{self.preset_title()}"

    def title(self) -> str:
        """A trial as progress and listings name it: ``"text_classifier/tiny (d_model=128) torch/eager seed 0"``."""
        return f"{self.model()} {self.label()} seed {self.seed}"

    def label(self) -> str:
        """Short human name of the configuration (without seed and repeat)."""
        parts = [self.framework.value, self.execution.value]
        if self.precision is not Precision.FP32:
            parts.append(self.precision.value)
        if self.grad_accum > 1:
            parts.append(f"accum{self.grad_accum}")
        if self.parallelism is not Parallelism.NONE:
            parts.append(f"{self.parallelism.value}x{self.workers}")
        return "/".join(parts)
