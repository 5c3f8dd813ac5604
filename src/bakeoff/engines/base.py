"""What an engine is: the contract every framework's engine implements (:class:`Engine`), and the helpers they share.

An engine (one per framework) supplies three things — a synchronised ``train_step`` returning the loss on
the host, ``predict`` over a split, and a peak-memory reading — and the framework-free training loop
(:mod:`bakeoff.trial.loop`) does the bookkeeping the same way for all of them, so no framework is measured
differently from another.
"""

from __future__ import annotations

import contextlib
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bakeoff.core.contract import Placement
from bakeoff.core.spec import RunSpec
from bakeoff.core.workload import Batch, Weights, Workload
from bakeoff.measure.environment import usable_cores
from bakeoff.measure.memory import MemoryProbe, RssProbe


class Unsupported(RuntimeError):
    """This engine cannot run the spec's mode here (recorded as status ``unsupported``)."""


def threads_for(spec: RunSpec) -> int:
    """CPU threads this trial process gives its framework: the spec's, else what the launcher allotted to each
    process of the group (its :class:`~bakeoff.core.contract.Placement`'s threads: the cores shared out among the
    processes on this host), else all the cores this process may run on."""
    return spec.threads or Placement.read().threads or usable_cores()


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
    # loop slices the shard (:func:`bakeoff.core.workload.shard_batch`) and passes the engine its local micro-batches.

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
        in the result's ``distributed`` section (:class:`bakeoff.core.result.Distributed`, whose fields the keys
        are). Empty when the trial is not distributed."""
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
