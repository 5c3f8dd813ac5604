"""The framework-free training loop every engine shares: clocks, evaluation cadence, budgets, the result.

An engine (one per framework) supplies three things — a synchronised ``train_step`` returning the loss on
the host, ``predict`` over a split, and a peak-memory reading — and this loop does the bookkeeping the same way
for all of them, so no framework is measured differently from another.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bakeoff.core.spec import Batch, Dataset, RunSpec, TrialResult, Weights, Workload, shard_batch
from bakeoff.measure.environment import CpuSharing, usable_cores
from bakeoff.measure.memory import MemoryProbe, RssProbe


class Unsupported(RuntimeError):
    """This engine cannot run the spec's mode here (recorded as status ``unsupported``)."""


def threads_for(spec: RunSpec) -> int:
    """CPU threads this trial process gives its framework: the spec's, else what the launcher allotted to each
    process of the group (``BAKEOFF_THREADS``: the cores shared out among the processes on this host), else all
    the cores this process may run on."""
    return spec.threads or int(os.environ.get("BAKEOFF_THREADS") or 0) or usable_cores()


def weights_digest(weights: Weights) -> str:
    """A hash of canonical weights, bit for bit: equal digests mean identical replicas."""
    h = hashlib.sha256()
    for name in sorted(weights):
        array = np.ascontiguousarray(weights[name])
        h.update(f"{name}:{array.dtype}:{array.shape};".encode())
        h.update(array.tobytes())
    return h.hexdigest()[:16]


class Engine(ABC):
    """One framework's training machinery for one trial."""

    framework: str
    stopped_at: tuple[int, int] = (0, 0)
    """``(epoch, consumed)`` where :func:`train` stopped: the epoch it was in and how many of its micro-batches
    were trained on. A further step trains on what follows (:func:`next_steps`)."""

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

    def canonical_gradients(self, micro_batches: Sequence[Batch]) -> dict[str, np.ndarray]:
        """:meth:`gradients` under canonical weight names and layouts, to compare across frameworks (parity)."""
        raise NotImplementedError(f"{type(self).__name__} does not map its gradients to canonical names")

    @abstractmethod
    def predict(self, split: Mapping[str, np.ndarray], batch_size: int) -> np.ndarray:
        """Model outputs over a whole split, inference mode, as numpy."""

    @abstractmethod
    def num_params(self) -> int:
        """Trainable scalars of the built model."""

    @abstractmethod
    def environment(self) -> dict[str, Any]:
        """Framework version, device, thread and precision settings in force."""

    def memory_probe(self) -> MemoryProbe:
        """What measures this trial's memory: the process's resident set on CPU; engines on a GPU override this
        with their framework allocator's counters."""
        return RssProbe()

    def extras(self) -> dict[str, Any]:
        """Mode-specific measurements (retraces, compile counters) to keep with the result."""
        return {}

    def graph_builds(self) -> int:
        """Graphs traced or compiled so far for the training step (0 in eager mode)."""
        return 0

    # Distributed training. A process of a distributed trial trains on its shard of every global batch; the
    # loop slices the shard (:func:`bakeoff.core.spec.shard_batch`) and passes the engine its local micro-batches.

    def data_shard(self) -> tuple[int, int]:
        """``(rank, world)``: which share of each global batch this process feeds its replicas. ``(0, 1)`` when
        the process takes whole batches (one device; MirroredStrategy, which splits them over its replicas)."""
        return 0, 1

    def is_chief(self) -> bool:
        """Whether this process writes the trial's TensorBoard events (one process per trial does)."""
        return True

    def replica_weights(self) -> list[Weights]:
        """Canonical weights of every replica this process holds (one, unless it mirrors several)."""
        return [self.impl.get_weights()]  # type: ignore[attr-defined]

    def distributed_figures(self) -> dict[str, Any]:
        """Called once after training, on every process of the group together (collectives may run here, off
        the training clock): the strategy in words, its set-up time and gradient-synchronisation figures, kept in
        ``extras["distributed"]``. Empty when the trial is not distributed."""
        return {}

    @abstractmethod
    def save_checkpoint(self, directory: Path) -> None:
        """Write model, optimizer and RNG state in the framework's own checkpoint format."""

    @abstractmethod
    def load_checkpoint(self, directory: Path) -> None:
        """Restore what :meth:`save_checkpoint` wrote, so training continues exactly as if never stopped."""

    def summary_writer(self, logdir: Path) -> SummaryWriter:
        """A TensorBoard event writer that loads no other framework into the trial's process: by default
        bakeoff's own (:mod:`bakeoff.measure.events`); TensorFlow uses ``tf.summary``."""
        from bakeoff.measure.events import EventWriter

        return EventWriter(logdir)

    def profiler(self, directory: Path) -> contextlib.AbstractContextManager[StepTrace]:
        """The framework's own profiler, recording while the block runs and writing its trace into ``directory``
        when the block ends (:mod:`bakeoff.trial.profile` runs the steps). Raises :class:`Unsupported` when
        called, before the block, where this engine cannot profile (nor take more steps)."""
        raise Unsupported(f"{type(self).__name__} has no profiler")


class SummaryWriter(Protocol):
    def scalar(self, tag: str, value: float, step: int) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


class StepTrace(Protocol):
    """What an engine's :meth:`~Engine.profiler` yields: the profiler's name, and a marker around each profiled
    step (the step's span in the trace, and the step boundaries TensorBoard's step-time views read)."""

    tool: str

    def step(self, number: int) -> contextlib.AbstractContextManager[Any]: ...


def _reached(value: float, target: float, higher_is_better: bool) -> bool:
    return value >= target if higher_is_better else value <= target


def _units(workload: Workload, micro_batches: Sequence[Batch]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for batch in micro_batches:
        for unit, count in workload.units_per_example(batch).items():
            totals[unit] = totals.get(unit, 0.0) + count
    return totals


_RESUMABLE = ("step_times_s", "losses", "curve", "examples_per_step", "best_metric", "final_metric",
              "time_to_target_s", "steps_to_target")


def _crossing(before: Mapping[str, float] | None, after: Mapping[str, float], target: float) -> tuple[float, float]:
    """Training seconds and steps at which the metric crossed ``target``, interpolated linearly between the
    evaluation ``before`` (short of the target) and ``after`` (the first to reach it)."""
    if before is None or before["metric"] == after["metric"]:
        return after["train_s"], after["step"]
    frac = min(1.0, max(0.0, (target - before["metric"]) / (after["metric"] - before["metric"])))
    return (before["train_s"] + frac * (after["train_s"] - before["train_s"]),
            before["step"] + frac * (after["step"] - before["step"]))


class _MemoryTracker:
    """Fills the result's memory figures from a probe: the baseline when training starts (import and model build
    done), the peak over training steps with evaluation paused out of it, and the whole trial's peak.

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
        self._see(self.probe.peak())  # import, build and the step-0 evaluation
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


def _save_state(directory: Path, engine: Engine, state: dict[str, Any], result: TrialResult) -> None:
    """Checkpoint the engine, then the loop's own state; the state file is written last and atomically, so a
    kill at any moment leaves either the previous complete checkpoint or the new one."""
    engine.save_checkpoint(directory / "engine")
    tmp = directory / "loop.json.tmp"
    tmp.write_text(json.dumps({**state, "result": {k: getattr(result, k) for k in _RESUMABLE}}))
    os.replace(tmp, directory / "loop.json")


NO_EVALUATION_ENV = "BAKEOFF_NO_EVALUATION"
"""Set by the runner for a trial that measures only training (a batch-size probe): :func:`train` evaluates never."""


def train(engine: Engine, data: Dataset, result: TrialResult, eval_batch_size: int = 256,
          checkpoint_dir: Path | None = None, tensorboard_dir: Path | None = None,
          evaluate_quality: bool = True) -> TrialResult:
    """Run the training loop under the spec's budget, filling ``result`` in place.

    The training clock is the sum of ``train_step`` times: it includes the first step (graph build or
    compilation) and host→device copies, and excludes batch slicing in numpy (identical for every framework),
    evaluation, checkpoints and TensorBoard writes.

    With ``checkpoint_dir`` and ``spec.checkpoint_every``, the engine and the loop are checkpointed every that
    many steps, and a checkpoint found there at the start is resumed from: same batches, same RNG streams, so
    the losses after resuming equal those of an uninterrupted run.

    Without ``evaluate_quality`` (a batch-size probe, which asks only whether the steps fit in memory), the test
    split is never evaluated: the result has no curve and no quality, and ``extras["evaluation"]`` says why.
    """
    spec, workload = engine.spec, engine.workload
    higher = workload.higher_is_better
    target, target_rule = workload.target_and_rule(spec.preset, spec, data)
    result.extras["target_rule"] = target_rule
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
    writer = None
    shard = engine.data_shard()
    if tensorboard_dir is not None and engine.is_chief():
        try:
            writer = engine.summary_writer(tensorboard_dir)
        except ImportError as exc:  # TensorBoard logs are a convenience: their absence must not fail a trial
            result.extras["tensorboard_error"] = f"no TensorBoard events written: {exc}"

    memory = _MemoryTracker(engine.memory_probe(), result)
    if not evaluate_quality:
        result.extras["evaluation"] = "none: a trial that measures only training (a batch-size probe)"

    def evaluate(step: int, train_s: float) -> bool:
        if not evaluate_quality:
            return False
        with memory.paused():  # evaluation stays out of the training memory figure
            values = workload.metrics(engine.predict(data.test, eval_batch_size), data.test)
        value = values[workload.metric_name]
        others = {k: v for k, v in values.items() if k != workload.metric_name}
        previous = result.curve[-1] if result.curve else None
        result.curve.append({"step": step, "train_s": train_s, "metric": value, **others})
        if writer is not None:
            for name, v in values.items():
                writer.scalar(f"eval/{name}", v, step)
        if step == 0:
            return False  # the untrained model: the curve's start, not a training result
        best = result.best_metric
        result.best_metric = value if best is None or (value > best) == higher else best
        result.final_metric = value
        if result.time_to_target_s is None and _reached(value, target, higher):
            result.time_to_target_s, result.steps_to_target = _crossing(previous, result.curve[-1], target)
            return True
        return False

    # consumed: micro-batches of the current epoch already trained on (where a resumed run picks up)
    state: dict[str, Any] = {"step": 0, "epoch": 0, "consumed": 0, "train_s": 0.0, "units": {}}
    if checkpoint_dir is not None and (checkpoint_dir / "loop.json").exists():
        saved = json.loads((checkpoint_dir / "loop.json").read_text())
        engine.load_checkpoint(checkpoint_dir / "engine")
        for key, value in saved.pop("result").items():
            setattr(result, key, value)
        state = saved
        result.extras.setdefault("resumed_at_steps", []).append(state["step"])
    units: dict[str, list[float]] = state["units"]  # e.g. valid tokens in every step's batch
    if state["step"] == 0:
        evaluate(0, 0.0)  # where the curve starts: time to target interpolates from it if the first evaluation hits
    memory.start()
    sharing, first_steady = CpuSharing(), 1 + spec.warmup_steps  # who else used our cores in the steady steps
    done = state["step"] >= max_steps
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
            start = time.perf_counter()
            loss = engine.train_step(local)
            elapsed = time.perf_counter() - start
            if steady_step:
                sharing.end()
            if engine.graph_builds() > builds:  # this step traced / compiled a graph (a new shape, say)
                result.extras.setdefault("graph_build_steps", []).append(state["step"] + 1)
            micro = []
            state["step"] += 1
            state["consumed"] = index + 1
            state["train_s"] += elapsed
            step, train_s = state["step"], state["train_s"]
            result.step_times_s.append(elapsed)
            result.losses.append(loss)
            if writer is not None:
                writer.scalar("train/loss", loss, step)
                writer.scalar("train/examples_per_s", result.examples_per_step / elapsed, step)
            if not math.isfinite(loss):
                raise FloatingPointError(f"training diverged: loss is {loss} at step {step}")
            stop = step >= max_steps or train_s >= max_seconds
            if step % spec.eval_every == 0 or stop:
                hit = evaluate(step, train_s)
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
        result.extras["distributed"] = figures
    result.train_s = state["train_s"]
    result.first_step_s = result.step_times_s[0] if result.step_times_s else None
    steady = result.step_times_s[first_steady:]
    result.environment["cpu_sharing"] = sharing.figures()  # a resumed trial: its steps since the resume
    # Asynchronous training (parameter servers) returns from a step when the oldest one in flight completes, and
    # completions of independent workers bunch up: there the mean call time is the time per completed step, and
    # the median of such calls is not. Every other trial's steady step is the median (robust to stragglers).
    asynchronous = bool(figures.get("asynchronous"))
    if asynchronous:
        result.extras["steady_statistic"] = "mean"
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
    build_steps = result.extras.get("graph_build_steps", [])
    result.extras["graph_builds"] = engine.graph_builds()
    if build_steps and result.steady_step_s is not None:
        # Time those steps took beyond a steady step: what building graphs cost, first step included.
        result.extras["graph_build_s"] = float(sum(max(0.0, result.step_times_s[i - 1] - result.steady_step_s)
                                                   for i in build_steps))
    result.extras["steady_steps"] = len(steady)
    result.extras["epochs"] = state["step"] / steps_per_epoch
    if writer is not None:
        for name, value in result.throughput.items():
            writer.scalar(f"summary/steady_{name}", value, state["step"])
        writer.close()
    return result


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
