"""The framework-free training loop every engine shares: clocks, evaluation cadence, budgets, the result.

An engine (:class:`bakeoff.engines.base.Engine`, one per framework) supplies a synchronised ``train_step``
returning the loss on the host, ``predict`` over a split, and a memory probe; :func:`train` does the bookkeeping
the same way for all of them, so no framework is measured differently from another. Its pieces:

* :class:`Budget` — how many steps or seconds the spec allows, and when to stop;
* :class:`bakeoff.trial.evaluation.Evaluation` — the test split evaluated on the loop's cadence, off the clock: the
  quality curve, the best and final metric, time and steps to target (interpolated between evaluations);
* :class:`bakeoff.trial.memory_phases.MemoryPhases` — the memory baseline, training's own peak (evaluation paused
  out of it), the trial's peak;
* :func:`steady_statistics` — the steady steps' time, throughput and units, and what building graphs cost;
* energy (:mod:`bakeoff.trial.loop_energy`, :class:`bakeoff.measure.energy.EnergyMeter`) — the counters read at the
  step clock's points: per steady step and example, and cumulative on the quality curve (``train_j``), hence energy
  to target;
* checkpoints (:mod:`bakeoff.trial.loop_checkpoint`) — the engine and the loop's state, resumed bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.core.result import Distributed, TrialResult
from bakeoff.core.spec import RunSpec
from bakeoff.core.workload import Batch, Dataset, Workload, shard_batch
from bakeoff.engines.base import Engine, SummaryWriter, weights_digest
from bakeoff.measure.energy import EnergyMeter
from bakeoff.measure.environment import CpuSharing
from bakeoff.trial.evaluation import Evaluation
from bakeoff.trial.loop_checkpoint import _resume, _save_state
from bakeoff.trial.loop_energy import energy_figures, energy_meter
from bakeoff.trial.memory_phases import MemoryPhases
from bakeoff.trial.progress import Reporter


@dataclasses.dataclass(frozen=True)
class Budget:
    """The spec's budget in steps: ``max_steps`` (its steps, or its epochs in steps, the smaller) and
    ``max_seconds`` of the training clock; either may be unlimited (``math.inf``)."""

    steps_per_epoch: int
    max_steps: float
    max_seconds: float

    @classmethod
    def of(cls, spec: RunSpec, data: Dataset) -> Budget:
        accum = spec.grad_accum
        steps_per_epoch = data.num_train // (spec.batch_size * accum)
        if steps_per_epoch == 0:
            raise ValueError(f"one step needs batch_size × grad_accum = {spec.batch_size * accum} examples; "
                             f"the training set has {data.num_train}")
        max_steps = spec.max_steps if spec.max_steps is not None else math.inf
        if spec.max_epochs is not None:
            max_steps = min(max_steps, math.ceil(spec.max_epochs * steps_per_epoch))
        max_seconds = spec.max_seconds if spec.max_seconds is not None else math.inf
        return cls(steps_per_epoch, max_steps, max_seconds)

    def spent(self, step: int, train_s: float) -> bool:
        return step >= self.max_steps or train_s >= self.max_seconds


def train(engine: Engine, data: Dataset, result: TrialResult, eval_batch_size: int = 256,
          checkpoint_dir: Path | None = None, tensorboard_dir: Path | None = None,
          evaluate_quality: bool = True, progress_s: float | None = None) -> TrialResult:
    """Run the training loop under the spec's budget, filling ``result`` in place.

    The training clock is the sum of ``train_step`` times: it includes the first step (graph build or
    compilation) and host→device copies, and excludes batch slicing in numpy (identical for every framework),
    evaluation, checkpoints and TensorBoard writes.

    With ``checkpoint_dir`` and ``spec.checkpoint_every``, the engine and the loop are checkpointed every that
    many steps, and a checkpoint found there at the start is resumed from: same batches, same RNG streams, so
    the losses after resuming equal those of an uninterrupted run.

    ``progress_s``: seconds between the progress lines the loop writes to the trial's log (default
    :data:`bakeoff.trial.progress.EVERY_S`).

    Without ``evaluate_quality`` (a batch-size probe, which asks only whether the steps fit in memory), the test
    split is never evaluated: the result has no curve and no quality, and ``training.evaluation`` says why.
    """
    spec, workload = engine.spec, engine.workload
    resolved = workload.resolve_target(spec.preset, spec, data)
    target = resolved.value
    result.training.target_rule, result.training.target_source = resolved.rule, resolved.source
    result.target, result.metric_name, result.higher_is_better = target, workload.metric_name, workload.higher_is_better
    budget = Budget.of(spec, data)
    # a line in the trial's log now and then (every progress_s, the request's): the parent's heartbeat reads it
    progress = Reporter(budget.max_steps, progress_s)
    accum = spec.grad_accum
    writer = _writer(engine, tensorboard_dir, result)
    shard = engine.data_shard()
    memory = MemoryPhases(engine.memory_probe(), result)
    if not evaluate_quality:
        result.training.evaluation = "none: a trial that measures only training (a batch-size probe)"
    evaluate = Evaluation(engine, data, result, memory, writer, target, eval_batch_size, evaluate_quality)
    state = _resume(checkpoint_dir, engine, result)
    units: dict[str, list[float]] = state["units"]  # e.g. valid tokens in every step's batch
    meter = energy_meter(spec, result.environment)  # before the baseline: NVML's start-up is no training memory
    on_curve = _start(memory, meter, state, evaluate)
    sharing, first_steady = CpuSharing(), 1 + spec.warmup_steps  # who else used our cores in the steady steps
    done = state["step"] >= budget.max_steps
    while not done:
        micro: list[Batch] = []
        # Global batches: examples and units count the whole step, each process trains on its shard of it.
        for index, batch in enumerate(workload.batches(data.train, spec.batch_size, spec.seed, state["epoch"])):
            if index < state["consumed"]:
                continue  # trained on before the checkpoint
            micro.append(batch)
            if len(micro) < accum:
                continue
            loss, elapsed = _step(engine, micro, shard, index, state, result, units, sharing, meter, first_steady,
                                  on_curve)
            micro = []
            step, train_s = state["step"], state["train_s"]
            progress.step(step)
            if writer is not None:
                writer.scalar("train/loss", loss, step)
                writer.scalar("train/examples_per_s", result.examples_per_step / elapsed, step)
            if not math.isfinite(loss):
                raise FloatingPointError(f"training diverged: loss is {loss} at step {step}")
            stop = budget.spent(step, train_s)
            if step % spec.eval_every == 0 or stop:
                hit = evaluate(step, train_s, state["train_j"] if on_curve else None)
                stop = stop or (hit and spec.stop_at_target)
            if checkpoint_dir is not None and spec.checkpoint_every and step % spec.checkpoint_every == 0:
                _save_state(checkpoint_dir, engine, state, result)
                if writer is not None:
                    writer.flush()  # events up to the checkpoint survive a crash, like the checkpoint itself
            if stop:
                done = True
                break
        else:
            state["epoch"], state["consumed"] = state["epoch"] + 1, 0

    memory.stop()
    _finish(engine, result, state, units, first_steady, sharing, meter, on_curve, budget, writer)
    return result


def _start(memory: MemoryPhases, meter: EnergyMeter, state: dict[str, Any], evaluate: Evaluation) -> bool:
    """Before the first step (of the trial, or since its resume): the memory baseline, whether training energy goes
    on the quality curve (returned), and the curve's start."""
    # The baseline is the built model, before any evaluation: what an evaluation leaves held (TensorFlow's oneDNN
    # caches, an allocator's kept pages) counts against training whether it ran at step 0 or mid-run. Taken after
    # the step-0 evaluation it did not, and TensorFlow's training increment at the text classifier's `small` read
    # 370 MiB against 1,180 MiB with no evaluation (JAX: 1,182 against 2,034; PyTorch 1,461 against 1,440): the
    # memory criterion favoured them up to 3x.
    memory.start()
    # Energy on the curve from the first step, or not at all: a checkpoint written without it cannot be resumed into
    # a cumulative figure (the energy before the resume is unknown).
    on_curve = meter.measuring and (state["step"] == 0 or "train_j" in state)
    if on_curve:
        state.setdefault("train_j", 0.0)
    if state["step"] == 0:
        # where the curve starts: time to target interpolates from it if the first evaluation hits
        evaluate(0, 0.0, 0.0 if on_curve else None)
    return on_curve


def _step(engine: Engine, micro: list[Batch], shard: tuple[int, int], index: int, state: dict[str, Any],
          result: TrialResult, units: dict[str, list[float]], sharing: CpuSharing, meter: EnergyMeter,
          first_steady: int, on_curve: bool) -> tuple[float, float]:
    """One training step over the global micro-batches ``micro`` (this process trains on its ``shard`` of them; the
    last is the epoch's ``index``-th batch), timed on the training clock: the loop's ``state`` and the result's
    figures moved on by it. Returns the step's loss and time."""
    if state["step"] == 0:
        result.examples_per_step = sum(len(b[next(iter(b))]) for b in micro)
    for unit, count in _units(engine.workload, micro).items():
        units.setdefault(unit, []).append(count)
    local = [shard_batch(b, *shard) for b in micro]
    builds = engine.graph_builds()
    steady_step = state["step"] >= first_steady
    if steady_step:
        sharing.begin()
    meter.begin()  # the counters, read outside the clock as close to it as can be
    start = time.perf_counter()
    loss = engine.train_step(local)
    elapsed = time.perf_counter() - start
    joules = meter.end(elapsed, steady_step)
    if steady_step:
        sharing.end()
    if engine.graph_builds() > builds:  # this step traced / compiled a graph (a new shape, say)
        result.training.graph_build_steps.append(state["step"] + 1)
    state["step"] += 1
    state["consumed"] = index + 1
    state["train_s"] += elapsed
    if on_curve and joules is not None:
        state["train_j"] += joules
    result.step_times_s.append(elapsed)
    result.losses.append(loss)
    return loss, elapsed


def _finish(engine: Engine, result: TrialResult, state: dict[str, Any], units: Mapping[str, Sequence[float]],
            first_steady: int, sharing: CpuSharing, meter: EnergyMeter, on_curve: bool, budget: Budget,
            writer: SummaryWriter | None) -> None:
    """After the last step: where training stopped, the distributed, steady, energy and epoch figures, and the
    TensorBoard summary."""
    engine.stopped_at = (state["epoch"], state["consumed"])
    figures = engine.distributed_figures()
    if figures:
        figures["replica_weights_sha256"] = [weights_digest(w) for w in engine.replica_weights()]
        result.distributed = Distributed(**figures)
    result.train_s = state["train_s"]
    result.first_step_s = result.step_times_s[0] if result.step_times_s else None
    result.environment["cpu_sharing"] = sharing.figures()  # a resumed trial: its steps since the resume
    steady_statistics(result, units, first_steady, bool(figures.get("asynchronous")), engine.graph_builds())
    result.energy = energy_figures(meter, result, state.get("train_j") if on_curve else None)
    result.training.epochs = state["step"] / budget.steps_per_epoch
    if writer is not None:
        for name, value in result.throughput.items():
            writer.scalar(f"summary/steady_{name}", value, state["step"])
        writer.close()


def steady_statistics(result: TrialResult, units: Mapping[str, Sequence[float]], first_steady: int,
                      asynchronous: bool, graph_builds: int) -> None:
    """The steady steps' figures, from ``result.step_times_s[first_steady:]``: the typical step, throughput in
    examples and in each unit per second, units per step, and what the steps that built graphs cost beyond a
    steady step (first step included).

    Asynchronous training (parameter servers) returns from a step when the oldest one in flight completes, and
    completions of independent workers bunch up: there the mean call time is the time per completed step, and
    the median of such calls is not. Every other trial's steady step is the median (robust to stragglers).
    """
    steady = result.step_times_s[first_steady:]
    if asynchronous:
        result.training.steady_statistic = "mean"
    if steady:
        typical = float(np.mean(steady) if asynchronous else np.median(steady))
        result.steady_step_s = typical
        result.throughput["examples_per_s"] = result.examples_per_step / typical
        for unit, counts in units.items():
            # Units per batch vary (valid tokens): the median of per-step rates (the overall rate, asynchronous).
            counted = np.asarray(counts[first_steady:])
            rates = counted / np.asarray(steady)
            rate = counted.sum() / np.sum(steady) if asynchronous else np.median(rates)
            result.throughput[f"{unit}_per_s"] = float(rate)
    result.units_per_step = {unit: float(np.mean(counts)) for unit, counts in units.items()}
    build_steps = result.training.graph_build_steps
    result.training.graph_builds = graph_builds
    if build_steps and result.steady_step_s is not None:
        # Time those steps took beyond a steady step: what building graphs cost, first step included.
        result.training.graph_build_s = float(sum(max(0.0, result.step_times_s[i - 1] - result.steady_step_s)
                                                   for i in build_steps))
    result.training.steady_steps = len(steady)


def next_steps(engine: Engine, data: Dataset) -> Iterator[list[Batch]]:
    """The steps a longer training run would take after :func:`train` stopped, epoch after epoch, without end:
    each step's micro-batches, this process's shard of them (as the loop feeds :meth:`Engine.train_step`)."""
    spec, workload = engine.spec, engine.workload
    epoch, consumed = engine.stopped_at
    shard = engine.data_shard()
    micro: list[Batch] = []
    while True:
        for index, batch in enumerate(workload.batches(data.train, spec.batch_size, spec.seed, epoch)):
            if index < consumed:
                continue
            micro.append(batch)
            if len(micro) == spec.grad_accum:
                yield [shard_batch(b, *shard) for b in micro]
                micro = []
        epoch, consumed = epoch + 1, 0


def _units(workload: Workload, micro_batches: Sequence[Batch]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for batch in micro_batches:
        for unit, count in workload.units_per_example(batch).items():
            totals[unit] = totals.get(unit, 0.0) + count
    return totals


def _writer(engine: Engine, tensorboard_dir: Path | None, result: TrialResult) -> SummaryWriter | None:
    """The chief's TensorBoard writer; a convenience, whose absence never fails a trial (the reason is kept)."""
    if tensorboard_dir is None or not engine.is_chief():
        return None
    try:
        return engine.summary_writer(tensorboard_dir)
    except ImportError as exc:
        result.extras["tensorboard_error"] = f"no TensorBoard events written: {exc}"
        return None
