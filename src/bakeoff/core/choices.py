"""The choices a trial's spec is made of (:class:`Execution`, :class:`Precision`, :class:`Parallelism`,
:class:`Device`) and a result's :class:`Status`; :class:`SpecError`, what bad input raises. Imports nothing: the
framework records (:mod:`bakeoff.core.frameworks`) and the spec (:mod:`bakeoff.core.spec`, which re-exports them and
adds the framework choice the records make) both read them from here."""

from __future__ import annotations

import enum
from typing import Any


class SpecError(ValueError):
    """A spec, suite or option that cannot be run; the message names the bad value and the accepted ones."""


RETIRED_VALUES = {"horovod": "bakeoff never had a horovodrun launcher, so every horovod trial was recorded "
                             "unsupported, with nothing measured; the mode was removed (#53)"}
"""Values an older bakeoff accepted that this one refuses, each with why (a stored trial of one is read past:
:meth:`bakeoff.results.store.Store.results`)."""


class _Choice(enum.StrEnum):
    @classmethod
    def parse(cls, value: str | enum.Enum, what: str) -> Any:
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value))
        except ValueError:
            accepted = ", ".join(m.value for m in cls)
            retired = f" ({RETIRED_VALUES[str(value)]})" if str(value) in RETIRED_VALUES else ""
            raise SpecError(f"unknown {what} {value!r}{retired}; accepted: {accepted}") from None



class Execution(_Choice):
    EAGER = "eager"  # op by op: PyTorch eager, TF eager
    GRAPH = "graph"  # compiled graph: torch.compile, tf.function
    XLA = "xla"  # tf.function(jit_compile=True)


class Precision(_Choice):
    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


class Parallelism(_Choice):
    NONE = "none"
    DATA_PARALLEL = "data_parallel"  # one machine, N replicas: DDP under torchrun, MirroredStrategy
    MULTI_WORKER = "multi_worker"  # N worker processes (hosts): torchrun rendezvous, MultiWorkerMirroredStrategy
    PARAMETER_SERVER = "parameter_server"  # TF ParameterServerStrategy: chief, workers, parameter servers

    @property
    def synchronous(self) -> bool:
        """Whether every replica takes a shard of each global batch and all apply the same update."""
        return self in (Parallelism.DATA_PARALLEL, Parallelism.MULTI_WORKER)


class Status(_Choice):
    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"
    UNSUPPORTED = "unsupported"


class Device(_Choice):
    AUTO = "auto"  # CUDA when the framework sees one, else CPU
    CPU = "cpu"
    CUDA = "cuda"
