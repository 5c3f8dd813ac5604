"""The framework-free training loop every engine shares: clocks, evaluation cadence, budgets, the result.

An engine (one per framework) supplies three things — a synchronised ``train_step`` returning the loss on
the host, ``predict`` over a split, and a peak-memory reading — and this loop does the bookkeeping the same way
for all of them, so no framework is measured differently from another.
"""

from __future__ import annotations

import math
import resource
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bakeoff.spec import Batch, Dataset, RunSpec, TrialResult, Workload


class Unsupported(RuntimeError):
    """This engine cannot run the spec's mode here (recorded as status ``unsupported``)."""


class Engine(ABC):
    """One framework's training machinery for one trial."""

    framework: str

    def __init__(self, spec: RunSpec, workload: Workload, config: Mapping[str, Any]) -> None:
        self.spec = spec
        self.workload = workload
        self.config = dict(config)

    @abstractmethod
    def setup(self, weights: Mapping[str, np.ndarray]) -> None:
        """Pick the device, pin threads and precision, build the model from canonical weights and the optimizer."""

    @abstractmethod
    def train_step(self, micro_batches: Sequence[Batch]) -> float:
        """One optimizer step over ``micro_batches`` (gradient accumulation when more than one); returns the mean
        loss, copied to the host (so the device is synchronised)."""

    @abstractmethod
    def gradients(self, micro_batches: Sequence[Batch]) -> list[np.ndarray]:
        """The accumulated mean-loss gradients, in ``trainable()`` order, without updating anything."""

    @abstractmethod
    def predict(self, split: Mapping[str, np.ndarray], batch_size: int) -> np.ndarray:
        """Model outputs over a whole split, inference mode, as numpy."""

    @abstractmethod
    def num_params(self) -> int:
        """Trainable scalars of the built model."""

    @abstractmethod
    def environment(self) -> dict[str, Any]:
        """Framework version, device, thread and precision settings in force."""

    def peak_memory(self) -> tuple[int, str]:
        """Peak memory so far and what was measured; CPU: the process's resident-set high-water mark."""
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "rss_high_water"

    def extras(self) -> dict[str, Any]:
        """Mode-specific measurements (retraces, compile counters) to keep with the result."""
        return {}


def _reached(value: float, target: float, higher_is_better: bool) -> bool:
    return value >= target if higher_is_better else value <= target


def _units(workload: Workload, micro_batches: Sequence[Batch]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for batch in micro_batches:
        for unit, count in workload.units_per_example(batch).items():
            totals[unit] = totals.get(unit, 0.0) + count
    return totals


def train(engine: Engine, data: Dataset, result: TrialResult, eval_batch_size: int = 256) -> TrialResult:
    """Run the training loop under the spec's budget, filling ``result`` in place.

    The training clock is the sum of ``train_step`` times: it includes the first step (graph build or
    compilation) and host→device copies, and excludes batch slicing in numpy (identical for every framework)
    and evaluation.
    """
    spec, workload = engine.spec, engine.workload
    higher = workload.higher_is_better
    target = workload.target(spec.preset)
    result.target, result.metric_name, result.higher_is_better = target, workload.metric_name, higher
    accum = spec.grad_accum
    steps_per_epoch = data.num_train // (spec.batch_size * accum)
    if steps_per_epoch == 0:
        raise ValueError(f"one step needs batch_size × grad_accum = {spec.batch_size * accum} examples; "
                         f"the training set has {data.num_train}")
    max_steps = spec.max_steps if spec.max_steps is not None else math.inf
    if spec.max_epochs is not None:
        max_steps = min(max_steps, math.ceil(spec.max_epochs * steps_per_epoch))
    max_seconds = spec.max_seconds if spec.max_seconds is not None else math.inf

    def evaluate(step: int, train_s: float) -> bool:
        value = workload.metric(engine.predict(data.test, eval_batch_size), data.test)
        result.curve.append({"step": step, "train_s": train_s, "metric": value})
        best = result.best_metric
        result.best_metric = value if best is None or (value > best) == higher else best
        result.final_metric = value
        if result.time_to_target_s is None and _reached(value, target, higher):
            result.time_to_target_s, result.steps_to_target = train_s, step
            return True
        return False

    step, train_s, epoch, done = 0, 0.0, 0, False
    units: dict[str, list[float]] = {}  # e.g. valid tokens in every step's batch
    while not done:
        micro: list[Batch] = []
        for batch in workload.batches(data.train, spec.batch_size, spec.seed, epoch):
            micro.append(batch)
            if len(micro) < accum:
                continue
            if step == 0:
                result.examples_per_step = sum(len(b[next(iter(b))]) for b in micro)
            for unit, count in _units(workload, micro).items():
                units.setdefault(unit, []).append(count)
            start = time.perf_counter()
            loss = engine.train_step(micro)
            elapsed = time.perf_counter() - start
            micro = []
            step += 1
            train_s += elapsed
            result.step_times_s.append(elapsed)
            result.losses.append(loss)
            if not math.isfinite(loss):
                raise FloatingPointError(f"training diverged: loss is {loss} at step {step}")
            stop = step >= max_steps or train_s >= max_seconds
            if step % spec.eval_every == 0 or stop:
                hit = evaluate(step, train_s)
                stop = stop or (hit and spec.stop_at_target)
            if stop:
                done = True
                break
        epoch += 1

    result.train_s = train_s
    result.first_step_s = result.step_times_s[0]
    steady = result.step_times_s[1 + spec.warmup_steps:]
    first_steady = 1 + spec.warmup_steps
    if steady:
        median = float(np.median(steady))
        result.steady_step_s = median
        result.throughput["examples_per_s"] = result.examples_per_step / median
        for unit, counts in units.items():
            # Units per batch vary (valid tokens): the median of per-step rates.
            rates = np.asarray(counts[first_steady:]) / np.asarray(steady)
            result.throughput[f"{unit}_per_s"] = float(np.median(rates))
    result.units_per_step = {unit: float(np.mean(counts)) for unit, counts in units.items()}
    result.extras["steady_steps"] = len(steady)
    result.extras["epochs"] = step / steps_per_epoch
    return result
