"""What an engine that trains imperatively asks of its distribution strategy, framework-free.

PyTorch's and Paddle's engines (:mod:`bakeoff.frameworks.torch.engine`, :mod:`bakeoff.frameworks.paddle.engine`)
run their step the same way whatever the strategy and call the same hooks: which device and shard this process
takes, the module the forward pass goes through, whether a micro-batch's backward synchronises, the global loss
totals and what the synchronised gradients are divided by. :class:`Strategy` is that contract, generic in the
framework's device and tensor types; :class:`OneDevice` is the strategy of ``parallelism = "none"``, the same in
every such framework but for how it names a device. Each framework's ``distributed`` module adds its data parallel
strategy, which reads the rank and world size its launcher set (:func:`launcher_env_int`).
"""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from typing import Any, Protocol, TypeVar

from bakeoff.core.spec import RunSpec
from bakeoff.engines.base import Unsupported

DeviceT = TypeVar("DeviceT", covariant=True)
TensorT = TypeVar("TensorT")


class Strategy(Protocol[DeviceT, TensorT]):
    """What the engine asks of a distribution strategy."""

    rank: int
    world: int

    def device(self, kind: str) -> DeviceT:
        """The device this process trains on, given the kind the engine chose (``cpu``, or the framework's name for
        a GPU)."""

    def dropout_seed(self, seed: int) -> int:
        """The seed of this process's dropout masks."""

    def wrap(self, impl: Any) -> Any:
        """The model implementation whose ``loss`` the training step calls (``impl`` itself, or a view of it)."""

    def micro_step(self, last: bool) -> contextlib.AbstractContextManager[None]:
        """Around one micro-batch's forward and backward; ``last``: the step's final micro-batch."""

    def global_totals(self, total: TensorT, count: TensorT) -> tuple[TensorT, TensorT]:
        """The step's summed loss and count over the whole global batch (every rank's shard)."""

    def gradient_divisor(self, count: TensorT) -> TensorT:
        """What the synchronised gradients are divided by to become the mean-loss gradient of the global batch,
        given the global count."""

    def figures(self) -> dict[str, Any]:
        """The result's ``distributed`` figures: the strategy, its set-up and synchronisation ({} on one device)."""

    def environment(self) -> dict[str, Any]:
        """What the trial's environment records of the strategy."""


class OneDevice(ABC):
    """``parallelism = "none"``: the whole global batch on one device, nothing to synchronise. A framework's
    subclass says only how it names the device."""

    rank, world = 0, 1

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec

    @abstractmethod
    def device(self, kind: str) -> Any:
        """The framework's device for ``kind``."""

    def dropout_seed(self, seed: int) -> int:
        return seed

    def wrap(self, impl: Any) -> Any:
        return impl

    def micro_step(self, last: bool) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def global_totals(self, total: TensorT, count: TensorT) -> tuple[TensorT, TensorT]:
        return total, count

    def gradient_divisor(self, count: TensorT) -> TensorT:
        return count

    def figures(self) -> dict[str, Any]:
        return {}

    def environment(self) -> dict[str, Any]:
        return {}


def launcher_env_int(name: str, launcher: str) -> int:
    """The integer a framework's launcher (``launcher``: the module bakeoff's runner starts, e.g.
    ``torch.distributed.run``) sets in each rank's environment as ``name``; :class:`Unsupported` when it is not set,
    i.e. when the trial was started some other way."""
    value = os.environ.get(name)
    if value is None:
        raise Unsupported(f"distributed training needs {launcher}'s environment, and {name} is not set: start the "
                          f"trial through bakeoff's runner (it launches {launcher})")
    return int(value)
