"""Profiles on request (``bakeoff run --profile``): a few steady training steps under the framework's own profiler,
off the training clock, written where TensorBoard or Perfetto opens them.

The runner asks a trial to profile in its request (:class:`bakeoff.core.contract.TrialRequest`: ``profile_dir``,
the trace's folder, and ``profile_steps``), as it asks one to keep its model; the request is no part of the spec,
so the trial's key, and what it measures, are those of the same trial without it. The trial profiles after its
result is complete — every step time, the memory figures (read before profiling: the profiler's buffers are no
training memory), the metric and curve, the kept model and the wall time — so profiling changes no recorded figure;
it adds the result's ``profile`` section (:class:`bakeoff.core.result.Profile`; with its ``error`` only when the
profiler failed, which leaves the trial as it was).

What is profiled: :data:`WARMUP_STEPS` step unprofiled (a batch of a new shape compiles there, not in the trace),
then the requested steps under the profiler, each marked as a step, on the training batches that follow the last
one trained on (:func:`bakeoff.trial.loop.next_steps`). The weights they change are never read again. In a
distributed trial every process takes the steps (their collectives need each other) and writes its own trace, into
``rank<N>`` of the folder; the result names rank 0's files.

What each framework writes (the engines' ``profiler``): PyTorch, ``torch.profiler`` (CPU, and CUDA on a GPU) to
``<host>.pt.trace.json``, a Chrome trace that Perfetto opens; TensorFlow, ``tf.profiler.experimental`` to
``plugins/profile/<time>/<host>.xplane.pb``, which TensorBoard's profile plugin (XProf) opens; JAX,
``jax.profiler`` to the same xplane file plus ``<host>.trace.json.gz`` and ``perfetto_trace.json.gz`` for
Perfetto. Keras uses its backend's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bakeoff.core.contract import TrialRequest
from bakeoff.core.result import Profile, TrialResult
from bakeoff.core.workload import Batch
from bakeoff.engines.base import Engine, Unsupported

DEFAULT_STEPS = 5
WARMUP_STEPS = 1

PERFETTO = "https://ui.perfetto.dev"
_VIEWERS = (  # (file name ending, how to open it); a trace written in several formats is told once per format
    (".pt.trace.json", f"open {{file}} in {PERFETTO} (or chrome://tracing)"),
    ("perfetto_trace.json.gz", f"open {{file}} in {PERFETTO}"),
    (".xplane.pb", "pip install xprof, then tensorboard --logdir {directory} (its Profile tab) or "
                   "xprof --logdir {directory} --port 6006"),
)


@dataclasses.dataclass(frozen=True)
class Request:
    """Profile ``steps`` steps into ``directory``."""

    directory: Path
    steps: int = DEFAULT_STEPS

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"profile steps must be a positive integer, got {self.steps}")

    def asked(self) -> dict[str, Any]:
        """This request as the trial request's fields (``profile_dir``, ``profile_steps``)."""
        return {"profile_dir": self.directory, "profile_steps": self.steps}

    @classmethod
    def from_trial(cls, request: TrialRequest) -> Request | None:
        """The profile the runner asked of this trial process (its request's ``profile_dir``, ``profile_steps``,
        default :data:`DEFAULT_STEPS`), or ``None``."""
        if request.profile_dir is None:
            return None
        return cls(request.profile_dir, request.profile_steps or DEFAULT_STEPS)


def _files(directory: Path) -> dict[Path, int]:
    """Every file under ``directory`` with its modification time (ns)."""
    return {p: p.stat().st_mtime_ns for p in directory.rglob("*") if p.is_file()} if directory.is_dir() else {}


def how_to_view(directory: Path, files: list[Path]) -> list[str]:
    """How to open the trace ``files`` written into ``directory``, one line per format found."""
    out = []
    for ending, how in _VIEWERS:
        found = [f for f in files if f.name.endswith(ending)]
        if found:
            out.append(how.format(file=found[0], directory=directory))
    return out


def profile(engine: Engine, steps: Iterator[list[Batch]], request: Request, result: TrialResult,
            first_step: int) -> None:
    """Run :data:`WARMUP_STEPS` then ``request.steps`` steps of ``steps`` (micro-batches as the loop feeds them),
    the latter under ``engine.profiler``, numbered from ``first_step``; record the trace in ``result.profile``,
    or the failure in its ``error``. Never raises for a profiler failure.

    The steps run even when the profiler cannot start (not where the engine has none: it says so before any step):
    in a distributed trial every process must take the same steps, or the others wait for it at their
    collectives."""
    directory = request.directory
    t0 = time.perf_counter()
    number = first_step
    try:
        profiler = engine.profiler(directory)  # Unsupported here, before any step: every rank alike
        for _ in range(WARMUP_STEPS):
            engine.train_step(next(steps))
            number += 1
        directory.mkdir(parents=True, exist_ok=True)
        before = _files(directory)
        step_s: list[float] = []
        with contextlib.ExitStack() as stack:
            try:
                trace = stack.enter_context(profiler)
            except Exception as exc:  # noqa: BLE001 - take the steps unprofiled (docstring), then say why
                result.profile = Profile(error=f"the profiler did not start: {type(exc).__name__}: {exc}")
                trace = None
            for _ in range(request.steps):
                batches = next(steps)
                start = time.perf_counter()
                with trace.step(number) if trace is not None else contextlib.nullcontext():
                    engine.train_step(batches)
                step_s.append(time.perf_counter() - start)
                number += 1
        if trace is None:
            return
        after = _files(directory)
        files = sorted(p for p, mtime in after.items() if before.get(p) != mtime)
        if not files:
            raise RuntimeError(f"{trace.tool} wrote no file into {directory}")
        result.profile = Profile(
            directory=str(directory), tool=trace.tool, steps=request.steps, warmup_steps=WARMUP_STEPS,
            first_step=first_step + WARMUP_STEPS,
            files={str(p.relative_to(directory)): p.stat().st_size for p in files},
            view=how_to_view(directory, files),
            # under the profiler, not measurements: its overhead is in them (the trial's step times are not)
            profiled_step_s=step_s,
            seconds=time.perf_counter() - t0,
        )
    except Exception as exc:  # noqa: BLE001 - a profile is a convenience: its failure must not fail the trial
        result.profile = Profile(error=f"no profile written into {directory}: {type(exc).__name__}: {exc}",
                                 traceback="" if isinstance(exc, Unsupported) else traceback.format_exc()[-3000:])


def describe(p: Profile | None) -> str | None:
    """One line saying where a trial's trace is and how to open it (or why there is none), for the console."""
    if p is None:
        return None
    if p.error:
        return p.error
    return f"{p.directory} ({p.tool}, {p.steps} steps, {p.seconds:.1f} s): {'; '.join(p.view)}"
