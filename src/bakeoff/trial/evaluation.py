"""The training loop's evaluation (:func:`bakeoff.trial.loop.train`): the test split evaluated on the loop's cadence,
off the clock: the quality curve, the best and final metric, time and steps to target (interpolated between
evaluations)."""

from __future__ import annotations

from collections.abc import Mapping

from bakeoff.core.result import TrialResult
from bakeoff.core.workload import Dataset
from bakeoff.engines.base import Engine, SummaryWriter
from bakeoff.trial.memory_phases import MemoryPhases


class Evaluation:
    """The test split evaluated off the clock (memory paused), each call one point of the quality curve.

    Step 0 is the untrained model: the curve's start, not a training result. Later points update the best and
    final metric; the first to reach the target sets time and steps to target, interpolated from the point
    before. Disabled (a batch-size probe), it evaluates nothing.
    """

    def __init__(self, engine: Engine, data: Dataset, result: TrialResult, memory: MemoryPhases,
                 writer: SummaryWriter | None, target: float, batch_size: int, enabled: bool = True) -> None:
        self.engine, self.data, self.result, self.memory, self.writer = engine, data, result, memory, writer
        self.target, self.batch_size, self.enabled = target, batch_size, enabled

    def __call__(self, step: int, train_s: float, train_j: float | None = None) -> bool:
        """Evaluate now (``train_j``: the training energy so far, where measured); True when this evaluation is the
        first to reach the target."""
        if not self.enabled:
            return False
        workload, result = self.engine.workload, self.result
        with self.memory.paused():  # evaluation stays out of the training memory figure
            values = workload.metrics(self.engine.predict(self.data.test, self.batch_size), self.data.test)
        value = values[workload.metric_name]
        others = {k: v for k, v in values.items() if k != workload.metric_name}
        previous = result.curve[-1] if result.curve else None
        energy = {} if train_j is None else {"train_j": train_j}
        result.curve.append({"step": step, "train_s": train_s, **energy, "metric": value, **others})
        if self.writer is not None:
            for name, v in values.items():
                self.writer.scalar(f"eval/{name}", v, step)
        if step == 0:
            return False  # the untrained model: the curve's start, not a training result
        higher, best = workload.higher_is_better, result.best_metric
        result.best_metric = value if best is None or (value > best) == higher else best
        result.final_metric = value
        if result.time_to_target_s is None and _reached(value, self.target, higher):
            result.time_to_target_s, result.steps_to_target = _crossing(previous, result.curve[-1], self.target)
            return True
        return False


def _reached(value: float, target: float, higher_is_better: bool) -> bool:
    return value >= target if higher_is_better else value <= target


def _crossing(before: Mapping[str, float] | None, after: Mapping[str, float], target: float,
              clock: str = "train_s") -> tuple[float, float]:
    """Training seconds (or the ``clock`` named: ``train_j``, joules) and steps at which the metric crossed
    ``target``, interpolated linearly between the evaluation ``before`` (short of the target) and ``after`` (the
    first to reach it)."""
    if before is None or before["metric"] == after["metric"]:
        return after[clock], after["step"]
    frac = min(1.0, max(0.0, (target - before["metric"]) / (after["metric"] - before["metric"])))
    return (before[clock] + frac * (after[clock] - before[clock]),
            before["step"] + frac * (after["step"] - before["step"]))
