"""How the Paddle engine distributes a trial: one device so far (``parallelism = "none"``).

A strategy is picked from ``spec.parallelism`` (:func:`strategy_for`) and composed into
:class:`bakeoff.frameworks.paddle.engine.PaddleEngine`, which calls the same hooks whatever the strategy — the ones
PyTorch's engine calls (:mod:`bakeoff.frameworks.torch.distributed`): which device and shard this process takes,
the layer the training forward goes through, whether a micro-batch's backward synchronises, the global loss totals
and what the synchronised gradients are divided by. A data-parallel strategy (``paddle.DataParallel`` under
``paddle.distributed.launch``) is one more class here and one more row of :data:`STRATEGIES`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import paddle

from bakeoff.core.spec import Parallelism, RunSpec
from bakeoff.engines.base import Unsupported


class Strategy(Protocol):
    """What the engine asks of a distribution strategy."""

    rank: int
    world: int

    def device(self, kind: str) -> str:
        """The device this process trains on (``paddle.set_device``'s name), given the kind the engine chose
        (``cpu`` or ``gpu``)."""

    def dropout_seed(self, seed: int) -> int:
        """The seed of this process's dropout masks."""

    def wrap(self, impl: Any) -> Any:
        """The model implementation whose ``loss`` the training step calls (``impl`` itself, or a view of it)."""

    def micro_step(self, last: bool) -> contextlib.AbstractContextManager[None]:
        """Around one micro-batch's forward and backward; ``last``: the step's final micro-batch."""

    def global_totals(self, total: paddle.Tensor, count: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        """The step's summed loss and count over the whole global batch (every rank's shard)."""

    def gradient_divisor(self, count: paddle.Tensor) -> paddle.Tensor:
        """What the synchronised gradients are divided by to become the mean-loss gradient of the global batch,
        given the global count."""

    def figures(self) -> dict[str, Any]:
        """The result's ``distributed`` figures: the strategy, its set-up and synchronisation ({} on one device)."""

    def environment(self) -> dict[str, Any]:
        """What the trial's environment records of the strategy."""


class SingleDevice:
    """``parallelism = "none"``: the whole global batch on one device, nothing to synchronise."""

    rank, world = 0, 1

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec

    def device(self, kind: str) -> str:
        return "gpu:0" if kind == "gpu" else "cpu"

    def dropout_seed(self, seed: int) -> int:
        return seed

    def wrap(self, impl: Any) -> Any:
        return impl

    def micro_step(self, last: bool) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def global_totals(self, total: paddle.Tensor, count: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        return total, count

    def gradient_divisor(self, count: paddle.Tensor) -> paddle.Tensor:
        return count

    def figures(self) -> dict[str, Any]:
        return {}

    def environment(self) -> dict[str, Any]:
        return {}


STRATEGIES: dict[Parallelism, type] = {Parallelism.NONE: SingleDevice}


def strategy_for(spec: RunSpec) -> Strategy:
    """The strategy ``spec.parallelism`` names; :class:`Unsupported` for one Paddle has none of here."""
    if spec.parallelism not in STRATEGIES:
        accepted = ", ".join(p.value for p in STRATEGIES)
        raise Unsupported(f"parallelism {spec.parallelism.value} is not implemented for paddle; accepted: {accepted}")
    return STRATEGIES[spec.parallelism](spec)
