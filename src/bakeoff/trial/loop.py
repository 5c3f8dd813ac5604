"""The framework-free training loop every engine shares: clocks, evaluation cadence, budgets, the result.

An engine (:class:`bakeoff.engines.base.Engine`, one per framework) supplies a synchronised ``train_step``
returning the loss on the host, ``predict`` over a split, and a memory probe; :func:`train` does the bookkeeping
the same way for all of them, so no framework is measured differently from another. Its pieces:

* :class:`Budget` — how many steps or seconds the spec allows, and when to stop;
* :class:`Evaluation` — the test split evaluated on the loop's cadence, off the clock: the quality curve, the
  best and final metric, time and steps to target (interpolated between evaluations);
* :class:`MemoryPhases` — the memory baseline, training's own peak (evaluation paused out of it), the trial's peak;
* :func:`steady_statistics` — the steady steps' time, throughput and units, and what building graphs cost;
* energy (:class:`bakeoff.measure.energy.EnergyMeter`) — the counters read at the step clock's points: per steady
  step and example, and cumulative on the quality curve (``train_j``), hence energy to target;
* checkpoints (:func:`_save_state`, :func:`_resume`) — the engine and the loop's state, resumed bit for bit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.core.contract import Placement
from bakeoff.core.result import Distributed, Energy, TrialResult
from bakeoff.core.spec import Parallelism, RunSpec
from bakeoff.core.workload import Batch, Dataset, Workload, shard_batch
from bakeoff.engines.base import Engine, SummaryWriter, weights_digest
from bakeoff.measure.energy import EnergyMeter
from bakeoff.measure.environment import CpuSharing, cuda_devices, local_rank
from bakeoff.measure.memory import MemoryProbe
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
            if state["step"] == 0:
                result.examples_per_step = sum(len(b[next(iter(b))]) for b in micro)
            for unit, count in _units(workload, micro).items():
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
            micro = []
            state["step"] += 1
            state["consumed"] = index + 1
            state["train_s"] += elapsed
            if on_curve and joules is not None:
                state["train_j"] += joules
            step, train_s = state["step"], state["train_s"]
            result.step_times_s.append(elapsed)
            result.losses.append(loss)
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
    return result


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


def _reached(value: float, target: float, higher_is_better: bool) -> bool:
    return value >= target if higher_is_better else value <= target


def _units(workload: Workload, micro_batches: Sequence[Batch]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for batch in micro_batches:
        for unit, count in workload.units_per_example(batch).items():
            totals[unit] = totals.get(unit, 0.0) + count
    return totals


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


def energy_to_target(curve: Sequence[Mapping[str, float]], target: float | None,
                     higher_is_better: bool) -> float | None:
    """Training joules at which the curve first reached ``target`` (after step 0), interpolated from the evaluation
    before as time to target is (:func:`_crossing`); None when it never did or a point has no energy."""
    if target is None:
        return None
    for i, point in enumerate(curve):
        if point["step"] > 0 and _reached(point["metric"], target, higher_is_better):
            before = curve[i - 1] if i > 0 else None
            if "train_j" not in point or (before is not None and "train_j" not in before):
                return None
            return _crossing(before, point, target, "train_j")[0]
    return None


def _on_gpu(environment: Mapping[str, Any]) -> bool:
    return any(m in str(environment.get("device", "")).lower() for m in ("cuda", "gpu"))


def energy_meter(spec: RunSpec, environment: Mapping[str, Any], environ: Mapping[str, str] | None = None,
                 dev: Path = Path("/dev")) -> EnergyMeter:
    """The counters this process reads: NVML on the GPUs it trains on (a rank of a group: its own, the GPU its
    local rank takes; one process over several replicas: the first ``workers``; else the first), RAPL on this
    machine's packages when it is the machine's local rank 0 (the packages are shared: read once per machine).
    Ranks that share a GPU round-robin (TensorFlow's multi-worker workers, more than the GPUs) leave its counter to
    the first of them, so that no counter is read twice."""
    environ = os.environ if environ is None else environ
    gpus: list[int] = []
    shared = {}
    if _on_gpu(environment):
        if Placement.read(environ).local_rank is not None or "LOCAL_RANK" in environ:
            rank, visible = local_rank(environ), cuda_devices(dev, environ)[0]
            gpus = [rank % visible if visible else rank]
            if visible and rank >= visible:
                gpus, shared = [], {"nvml": f"GPU {rank % visible} is read by local rank {rank % visible}, whose GPU "
                                            "this rank shares"}
        elif spec.parallelism is Parallelism.DATA_PARALLEL:
            gpus = list(range(spec.workers))
        else:
            gpus = [0]
    meter = EnergyMeter.for_trial(gpus, rapl=local_rank(environ) == 0, environ=environ)
    meter.not_read.update(shared)
    return meter


def energy_figures(meter: EnergyMeter, result: TrialResult, train_j: float | None) -> Energy:
    """The result's energy section from the meter: the steady steps' figures, the training energy over every step
    (``train_j``, resumes included; None where not on the curve) and energy to target."""
    figures = meter.figures(result.examples_per_step)
    if figures.get("missing") == "" or "train_j" in figures:
        figures["train_j"] = train_j
        figures["to_target_j"] = energy_to_target(result.curve, result.target, result.higher_is_better)
    return Energy(**figures)


_RESUMABLE = ("step_times_s", "losses", "curve", "examples_per_step", "best_metric", "final_metric",
              "time_to_target_s", "steps_to_target")


def _save_state(directory: Path, engine: Engine, state: dict[str, Any], result: TrialResult) -> None:
    """Checkpoint the engine, then the loop's own state; the state file is written last and atomically, so a
    kill at any moment leaves either the previous complete checkpoint or the new one."""
    engine.save_checkpoint(directory / "engine")
    tmp = directory / "loop.json.tmp"
    tmp.write_text(json.dumps({**state, "result": {k: getattr(result, k) for k in _RESUMABLE}}))
    os.replace(tmp, directory / "loop.json")


def _resume(checkpoint_dir: Path | None, engine: Engine, result: TrialResult) -> dict[str, Any]:
    """The loop's state: from the checkpoint in ``checkpoint_dir`` when there is one (the engine and the result's
    figures so far loaded back), else from the start. ``consumed``: micro-batches of the current epoch already
    trained on (where a resumed run picks up); ``units``: each unit's count in every step's batch."""
    if checkpoint_dir is None or not (checkpoint_dir / "loop.json").exists():
        return {"step": 0, "epoch": 0, "consumed": 0, "train_s": 0.0, "units": {}}
    saved = json.loads((checkpoint_dir / "loop.json").read_text())
    engine.load_checkpoint(checkpoint_dir / "engine")
    for key, value in saved.pop("result").items():
        setattr(result, key, value)
    result.training.resumed_at_steps.append(saved["step"])
    return saved


def _writer(engine: Engine, tensorboard_dir: Path | None, result: TrialResult) -> SummaryWriter | None:
    """The chief's TensorBoard writer; a convenience, whose absence never fails a trial (the reason is kept)."""
    if tensorboard_dir is None or not engine.is_chief():
        return None
    try:
        return engine.summary_writer(tensorboard_dir)
    except ImportError as exc:
        result.extras["tensorboard_error"] = f"no TensorBoard events written: {exc}"
        return None
