"""The memory phases of a trial's training loop (:func:`bakeoff.trial.loop.train`): the baseline, training's own
peak with evaluation paused out of it, and the whole trial's peak."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from bakeoff.core.result import TrialResult
from bakeoff.measure.memory import MemoryProbe


class MemoryPhases:
    """Fills the result's memory figures from a probe: the baseline when training starts (import and model build
    done, before the step-0 evaluation), the peak over training steps with each evaluation's own peak paused out of
    it (what an evaluation leaves held is not: training runs beside it), and the whole trial's peak.

    Resetting the probe's peak is what separates the phases (on Linux it also resets the process's ``ru_maxrss``,
    so the tracker keeps the whole-trial peak itself). A probe that cannot reset leaves the training figures
    missing, with the reason in ``extras``, rather than reporting the import as training memory.
    """

    def __init__(self, probe: MemoryProbe, result: TrialResult) -> None:
        self.probe, self.result = probe, result
        self.result.memory_kind = probe.kind
        self.total = 0
        self.train: int | None = None
        self.resettable = False

    def _see(self, peak: int | None) -> None:
        if peak is not None:
            self.total = max(self.total, peak)
            self.result.peak_memory_bytes = self.total

    def start(self) -> None:
        self._see(self.probe.peak())  # import and build
        self.result.memory_baseline_bytes = self.probe.current()
        self.resettable = self.probe.reset_peak()
        if not self.resettable:
            self.result.extras["memory_increment_missing"] = (f"the {self.probe.kind} probe cannot reset its peak "
                                                              "here, so training's own peak is unknown")

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Around evaluation: the training peak so far is kept, evaluation's own is left out of it."""
        if not self.resettable:
            yield
            return
        peak = self.probe.peak()
        self._see(peak)
        if peak is not None:
            self.train = max(self.train or 0, peak)
        yield
        self._see(self.probe.peak())
        self.probe.reset_peak()

    def stop(self) -> None:
        peak = self.probe.peak()
        self._see(peak)
        if not self.resettable or peak is None:
            return
        self.train = max(self.train or 0, peak)
        baseline = self.result.memory_baseline_bytes
        self.result.memory_train_peak_bytes = self.train
        if baseline is not None:
            self.result.memory_increment_bytes = max(0, self.train - baseline)
