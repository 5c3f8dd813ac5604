"""What a run will do before it does it: the trials in run order, which are already stored, and how long the rest
should take, estimated from stored results of the same configuration.

Framework-free and fast (``bakeoff run --dry-run`` answers in well under a second): specs are identified by
content (:func:`bakeoff.core.identity.identify` hashes files and reads package metadata; it imports no framework), the
store is read without decoding samples, and no data set is loaded.

Estimates (:class:`Durations`): the median ``wall_s`` (the trial's whole process) of the successful stored trials
of the same configuration — every spec field but seed, repeat and the bakeoff and framework versions — else of the
same (workload, preset, label); during a run, else of the trials of that configuration finished in this run, else
a trial's steady part plus its compile: the median of this run's trials' wall times less their compile time
(:func:`compile_seconds`), plus the compile time of this run's trials of the same framework and execution mode. A
first trial that compiles for a minute is not taken as the length of every other: an eager trial adds no compile
time, and one of a framework and mode not seen yet adds an unknown one (:meth:`Durations.compile_known`: the
estimate is then a lower bound).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bakeoff.core.identity import configuration
from bakeoff.core.spec import RunSpec, Status
from bakeoff.plan.order import measure_again, order, to_run
from bakeoff.results.store import Store

if TYPE_CHECKING:
    from bakeoff.core.result import TrialResult


def _label(spec: Mapping[str, Any] | RunSpec) -> tuple[str, str, str]:
    run_spec = spec if isinstance(spec, RunSpec) else RunSpec.from_dict(spec)
    return run_spec.workload, run_spec.preset, run_spec.label()


class Durations:
    """Expected seconds per trial (see the module docstring), learning from the trials of the current run."""

    def __init__(self, stored: Iterable[tuple[Mapping[str, Any], float]] = ()) -> None:
        self._by_config: dict[str, list[float]] = {}
        self._by_label: dict[tuple[str, str, str], list[float]] = {}
        for spec, wall_s in stored:
            self._by_config.setdefault(configuration(spec), []).append(wall_s)
            self._by_label.setdefault(_label(spec), []).append(wall_s)
        self._run: dict[str, list[float]] = {}
        self._steady: list[float] = []  # this run's trials' wall times less their compile time
        self._compile: dict[tuple[str, str], list[float]] = {}  # (framework, execution) -> this run's compile times

    @classmethod
    def from_store(cls, store: Store) -> Durations:
        """From the store's successful trials that recorded their wall time."""
        rows = store.trials(statuses=[Status.OK])
        return cls((row.spec, row.wall_s) for row in rows if row.wall_s is not None)

    def stored(self, spec: RunSpec) -> float | None:
        """Median stored wall time of ``spec``'s configuration, else of its (workload, preset, label)."""
        times = self._by_config.get(configuration(spec.to_dict())) or self._by_label.get(_label(spec))
        return statistics.median(times) if times else None

    def learn(self, spec: RunSpec, wall_s: float, compile_s: float | None = None) -> None:
        """Record a trial finished in this run, and how much of its wall time was compiling (None: not known)."""
        self._run.setdefault(configuration(spec.to_dict()), []).append(wall_s)
        self._steady.append(max(0.0, wall_s - (compile_s or 0.0)))
        if compile_s is not None:
            self._compile.setdefault(_mode(spec), []).append(compile_s)

    def estimate(self, spec: RunSpec) -> float | None:
        """Expected wall seconds of ``spec``; ``None`` when nothing stored or run so far says."""
        if (stored := self.stored(spec)) is not None:
            return stored
        if times := self._run.get(configuration(spec.to_dict())):
            return statistics.median(times)
        if not self._steady:
            return None
        compiles = self._compile.get(_mode(spec))
        return statistics.median(self._steady) + (statistics.median(compiles) if compiles else 0.0)

    def compile_known(self, spec: RunSpec) -> bool:
        """Whether :meth:`estimate` of ``spec`` counts its compile time: stored or run before, an eager trial (no
        compile), or one of a framework and execution mode this run has compiled; otherwise it is a lower bound."""
        return (spec.execution.value == "eager" or _mode(spec) in self._compile or self.stored(spec) is not None
                or configuration(spec.to_dict()) in self._run)


def _mode(spec: RunSpec) -> tuple[str, str]:
    return spec.framework.value, spec.execution.value


def compile_seconds(result: TrialResult) -> float | None:
    """What a finished trial spent compiling: the time its graph-building steps took beyond a steady step (first
    step included), else its first step's excess over a steady step; None when it did not measure both."""
    if result.training.graph_build_s is not None:
        return result.training.graph_build_s
    if result.first_step_s is None or result.steady_step_s is None:
        return None
    return max(0.0, result.first_step_s - result.steady_step_s)


@dataclasses.dataclass(frozen=True)
class Planned:
    """One trial of a planned run, at its place in the run order (1-based)."""

    position: int
    spec: RunSpec  # identified: its key is the store's
    stored: Status | None  # its recorded status, if any
    runs: bool  # whether the run would (re-)run it
    estimate_s: float | None  # expected wall seconds, when it runs and something stored says


def plan(specs: Sequence[RunSpec], store_path: Path, fresh: bool = False, retry_failed: bool = False,
         order_seed: int = 0, timeout_s: float | None = None, retry_busy: bool = False) -> list[Planned]:
    """The trials a ``bakeoff run`` of ``specs`` would go through, in its order, without running or writing anything
    (a missing store means nothing is stored yet; it is not created)."""
    from bakeoff.core.identity import identify

    identified = order(identify(specs), order_seed)
    recorded: dict[str, Status] = {}
    again: set[str] = set()
    durations = Durations()
    if store_path.exists():
        with Store(store_path, readonly=True) as store:
            recorded, durations = store.statuses(), Durations.from_store(store)
            again = measure_again(store, timeout_s, retry_busy)
    return [Planned(i, spec, recorded.get(spec.key()),
                    runs := to_run(spec, recorded, fresh, retry_failed, again),
                    durations.stored(spec) if runs else None)
            for i, spec in enumerate(identified, 1)]


def duration(seconds: float) -> str:
    """``"45 s"``, ``"3 min 20 s"``, ``"1 h 05 min"``."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def total(planned: Sequence[Planned]) -> tuple[float, int]:
    """The estimated seconds of the trials that run, and how many of them have no estimate."""
    running = [p for p in planned if p.runs]
    return sum(p.estimate_s or 0.0 for p in running), sum(p.estimate_s is None for p in running)
