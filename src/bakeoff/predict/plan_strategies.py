"""The strategies the capacity plan (:mod:`bakeoff.predict.capacity`) rows: each framework's APIs for each way of
spreading a step over the devices (data, sharded states, tensor, pipeline, parameter servers), from each framework's
record's ``capacity``."""

from __future__ import annotations

import dataclasses

from bakeoff.core import frameworks


@dataclasses.dataclass(frozen=True)
class Strategy:
    """One way a framework spreads a step over the devices: ``kind`` is data | zero1 | zero2 | zero3 | tensor |
    pipeline | parameter_server; ``api`` what the user calls, or ``''`` with ``missing`` saying why there is none."""

    framework: str
    kind: str
    api: str
    missing: str = ""


KINDS = {"data": "data parallel", "zero1": "optimizer state sharded (ZeRO-1)",
         "zero2": "gradients and optimizer state sharded (ZeRO-2)",
         "zero3": "weights, gradients and optimizer state sharded (ZeRO-3 / FSDP)",
         "tensor": "tensor parallel (Megatron-style layers)", "pipeline": "pipeline parallel (1F1B)",
         "parameter_server": "parameter servers"}

STRATEGIES: tuple[Strategy, ...] = tuple(
    Strategy(name, kind, info.capacity.strategies.get(kind, ""), info.capacity.missing.get(kind, ""))
    for name, info in frameworks.FRAMEWORKS.items() if info.capacity is not None
    for kind in KINDS if kind in info.capacity.strategies or kind in info.capacity.missing)
"""Every framework × strategy kind the plan rows: each framework's record's ``capacity`` (its folder)."""


def planned() -> list[str]:
    """The frameworks the capacity plan has rows for (a record with ``capacity``)."""
    return list(dict.fromkeys(s.framework for s in STRATEGIES))


REPLICATED = ("data", "zero1", "zero2", "zero3", "parameter_server")
"""The strategies whose devices each take a share of the batch (every one a whole model's step)."""
