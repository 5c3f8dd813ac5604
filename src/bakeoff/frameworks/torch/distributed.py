"""How the PyTorch engine distributes a trial: one device, or ``DistributedDataParallel`` under torchrun.

A strategy is picked from ``spec.parallelism`` (:func:`strategy_for`) and composed into
:class:`bakeoff.frameworks.torch.engine.TorchEngine`, which calls the same hooks whatever the strategy
(:class:`bakeoff.engines.strategy.Strategy`, Paddle's engine's too): which device and shard this process takes, the
module the forward pass goes through, whether a micro-batch's backward synchronises, the global loss totals and what
the synchronised gradients are divided by.

``data_parallel`` (one torchrun agent, N ranks) and ``multi_worker`` (one agent per node) differ only in how
torchrun starts the ranks; in each rank the strategy is the same: a process group from torchrun's environment
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``), gloo on CPU, NCCL on CUDA. On CUDA a
rank takes the GPU at its local rank on its machine (:func:`bakeoff.measure.environment.local_rank`: torchrun's
``LOCAL_RANK``, plus the launcher's ``BAKEOFF_LOCAL_RANK`` under one agent per node, whose ranks torchrun each calls
local rank 0).
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from bakeoff.core.spec import Parallelism, RunSpec
from bakeoff.engines import strategy
from bakeoff.engines.base import Unsupported
from bakeoff.measure import sync
from bakeoff.measure.environment import local_rank

Strategy = strategy.Strategy[torch.device, torch.Tensor]


class SingleDevice(strategy.OneDevice):
    """``parallelism = "none"``: the whole global batch on one device, nothing to synchronise."""

    def device(self, kind: str) -> torch.device:
        return torch.device(kind)


def _env_int(name: str) -> int:
    return strategy.launcher_env_int(name, "torch.distributed.run")


class DataParallel:
    """``DistributedDataParallel``: every rank holds a replica, trains on its shard of each global batch, and
    DDP all-reduces the gradients in buckets, overlapped with the backward pass.

    Exactness. Each rank's loss is a *sum* over its shard, ``S_r``, never a mean. DDP's all-reduce averages the
    gradients over the world: every rank ends the backward with ``g = (1/W) · Σ_r ∇S_r``. The gradient of the
    single-device step over the same global batch is ``Σ_r ∇S_r / N``, with ``N = Σ_r n_r`` the global count,
    which needs an all-reduce of its own (speech counts valid frames, which differ by shard). So the engine
    divides ``g`` by ``N / W`` (:meth:`gradient_divisor`): ``(1/W) · Σ_r ∇S_r / (N/W) = Σ_r ∇S_r / N``. For W a
    power of two both divisions by W are exact in binary floating point; what differs from one device is only
    the order of the additions (shard sums, then the all-reduce).

    Gradient accumulation: every micro-batch but the last runs forward and backward under ``ddp.no_sync()``, so
    its gradients accumulate locally in ``.grad`` and the last backward all-reduces the sum once — one round of
    bucket all-reduces per optimizer step whatever ``grad_accum`` is. A communication hook wrapping DDP's default
    all-reduce (:func:`default_hooks.allreduce_hook`, which DDP runs without a hook too) counts the rounds.

    Synchronisation in the step (``sync.in_step``, on CPU): each optimizer step, (1) the gradients' all-reduce as
    the step waited for it: from the hook's call for the step's last bucket (every gradient computed, the backward's
    compute done) to the synchronising backward's return (DDP waits there for every bucket's all-reduce and copies
    the averages into ``.grad``) — the part the backward pass did not hide; and (2) the loss totals' all-reduce,
    which blocks. Both include waiting for a slower rank: a step's synchronisation is what the step spent on it.
    """

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.rank, self.world = _env_int("RANK"), _env_int("WORLD_SIZE")
        _env_int("LOCAL_RANK")  # torchrun's, which must be there; with the launcher's, the GPU this rank takes
        self.local_rank = local_rank()
        if self.world != spec.workers:
            raise Unsupported(f"torchrun started {self.world} ranks but the spec asks for {spec.workers} workers")
        self._device = torch.device("cpu")  # until the engine picks one (device())
        self.ddp: DistributedDataParallel | None = None
        self.setup_s = 0.0
        self.setup_parts: dict[str, float] = {}
        self.steps = 0  # optimizer steps (global_totals calls) so far
        self.allreduces = 0  # bucket all-reduces DDP launched through the hook
        self.sync_rounds = 0  # backward passes that all-reduced every bucket (the hook saw the last one)
        self.bytes = 0
        self.last_round: list[tuple[int, torch.dtype]] = []  # (elements, dtype) of each bucket, latest round
        self._round: list[tuple[int, torch.dtype]] = []
        self._last_hook: float | None = None  # when the latest bucket was handed to the all-reduce (perf_counter)
        self.exposed_s: list[float] = []  # per optimizer step: the gradients' all-reduce the backward did not hide
        self.totals_s: list[float] = []  # per optimizer step: the loss totals' all-reduce

    @property
    def backend(self) -> str:
        return "nccl" if self._device.type == "cuda" else "gloo"

    def device(self, kind: str) -> torch.device:
        self._device = torch.device("cuda", self.local_rank) if kind == "cuda" else torch.device("cpu")
        if kind == "cuda":
            torch.cuda.set_device(self._device)
        return self._device

    def dropout_seed(self, seed: int) -> int:
        # Each replica draws its own masks (the same seed everywhere would give examples i and i + B/W the same
        # mask); rank 0 keeps the spec's seed. No rank's masks equal a single device's on the same examples, so
        # losses match one device exactly only without dropout.
        return seed if self.rank == 0 else int(np.random.SeedSequence([seed, self.rank]).generate_state(1)[0])

    def wrap(self, impl: Any) -> Any:
        """Join the process group (torchrun's rendezvous store) and wrap the module in DDP, timed together as
        ``setup_s``; returns a shallow copy of ``impl`` whose ``module`` is the DDP wrapper, so every training
        forward goes through it (its reducer hooks fire), while ``impl`` itself keeps the plain module for
        prediction and weights."""
        start = time.perf_counter()
        dist.init_process_group(self.backend, device_id=self._device if self._device.type == "cuda" else None)
        joined = time.perf_counter()
        ids = [self._device.index] if self._device.type == "cuda" else None
        # Broadcasts rank 0's weights; the first DDP of a process also imports torch._dynamo (~1.3 s on 2 CPUs).
        self.ddp = DistributedDataParallel(impl.module, device_ids=ids)
        self.ddp.register_comm_hook(None, self._counting_allreduce)
        self.setup_s = time.perf_counter() - start
        self.setup_parts = {"process_group_s": joined - start, "ddp_wrap_s": self.setup_s - (joined - start)}
        view = copy.copy(impl)
        view.module = self.ddp
        return view

    # Not annotated: register_comm_hook checks the hook's annotations are the very objects dist.GradBucket and
    # Future[Tensor], or absent, and under ``from __future__ import annotations`` they would be strings.
    def _counting_allreduce(self, state, bucket):  # noqa: ANN001, ANN202
        buffer = bucket.buffer()
        self.allreduces += 1
        self.bytes += buffer.numel() * buffer.element_size()
        self._round.append((buffer.numel(), buffer.dtype))
        if bucket.is_last():
            self.sync_rounds += 1
            self.last_round, self._round = self._round, []
        self._last_hook = time.perf_counter()  # the bucket is ready: its gradients are computed
        return default_hooks.allreduce_hook(state, bucket)

    def micro_step(self, last: bool) -> contextlib.AbstractContextManager[None]:
        assert self.ddp is not None, "wrap() first"
        return self._synchronising() if last else self.ddp.no_sync()

    @contextlib.contextmanager
    def _synchronising(self) -> Iterator[None]:
        """Around the micro-batch whose backward all-reduces: times what the step waited for it (class docstring)."""
        self._last_hook = None
        yield
        if self._last_hook is not None and self._device.type == "cpu":
            self.exposed_s.append(time.perf_counter() - self._last_hook)

    def global_totals(self, total: torch.Tensor, count: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # One all-reduce of (loss sum, count): the count for the gradient divisor, the sum so every rank reports
        # the global batch's loss (the same number a single device reports, and the same on every rank).
        self.steps += 1
        both = torch.stack([total.float(), count.float()])
        start = time.perf_counter()
        dist.all_reduce(both)  # blocking on CPU (gloo); on CUDA it only queues on the stream
        self.totals_s.append(time.perf_counter() - start)
        return both[0], both[1]

    def gradient_divisor(self, count: torch.Tensor) -> torch.Tensor:
        return count / self.world  # see the class docstring: DDP's mean over W, then N / W

    def environment(self) -> dict[str, Any]:
        return {"distributed": f"{self.backend}, rank {self.rank} of {self.world}"}

    def _sync_samples(self) -> list[float]:
        """Seconds one step's all-reduces take (:mod:`bakeoff.measure.sync`): buffers shaped as DDP's buckets were
        in the last step, all-reduced one after another, then the loss totals, blocking."""
        buffers = [torch.zeros(n, dtype=dtype, device=self._device) for n, dtype in self.last_round]
        buffers.append(torch.zeros(2, dtype=torch.float32, device=self._device))  # global_totals' (sum, count)

        def settle() -> None:
            if self._device.type == "cuda":
                torch.cuda.synchronize(self._device)

        def reduce() -> None:
            for buffer in buffers:
                dist.all_reduce(buffer)
            settle()

        def barrier() -> None:
            dist.barrier()
            settle()

        return sync.time_reductions(reduce, barrier)

    def _in_step(self) -> dict[str, Any]:
        """``in_step``: the synchronisation each optimizer step spent, timed in the training step (class docstring),
        the median over the steady steps (those after the first and the warm-up); or ``in_step_missing``, why not."""
        if self._device.type != "cpu":
            return {"in_step_missing": "not timed in the step on CUDA: NCCL's all-reduces run on the GPU's stream, "
                                       "apart from the host clock (sync_s, timed alone, is measured)"}
        steps = min(len(self.exposed_s), len(self.totals_s))
        per_step = [a + b for a, b in zip(self.exposed_s, self.totals_s, strict=False)]
        steady = per_step[1 + self.spec.warmup_steps:] or per_step
        if not steady:
            return {"in_step_missing": "no optimizer step synchronised"}
        first = len(per_step) - len(steady)
        return {"in_step": {
            "definition": "per optimizer step, timed in the training step on rank 0: the gradients' all-reduce from "
                          "the last bucket's hand-over (backward compute done) to the backward's return, plus the "
                          "loss totals' blocking all-reduce; waiting for a slower rank included; median of the "
                          "steady steps",
            "per_step_s": statistics.median(steady),
            "gradients_exposed_s": statistics.median(self.exposed_s[first:steps]),
            "loss_totals_s": statistics.median(self.totals_s[first:steps]),
            "steps": len(steady),
            "samples_s": per_step,
        }}

    def figures(self) -> dict[str, Any]:
        """Set-up and synchronisation figures, then the process group is destroyed (training is over)."""
        samples = self._sync_samples()
        steps = max(self.steps, 1)
        buckets = [n for n, _ in self.last_round]
        figures = {
            "strategy": f"DistributedDataParallel ({self.backend}), {self.world} ranks",
            "backend": self.backend,
            "setup_s": self.setup_s,
            "setup_parts_s": self.setup_parts,  # process group (rendezvous) and DDP wrap
            "sync": sync.figures(
                samples, round(self.bytes / steps),
                f"torch.distributed.all_reduce of buffers shaped as DDP's gradient bucket{'s' * (len(buckets) > 1)} "
                f"of the last step ({buckets} elements), one after another, then of the loss totals; in training "
                "DDP overlaps the buckets' all-reduces with the backward pass",
                allreduces_per_step=self.allreduces / steps,  # one per bucket per round
                buckets=len(buckets),
                rounds_per_step=self.sync_rounds / steps,  # 1 with accumulation too: no_sync
                loss_allreduces_per_step=1,  # global_totals: the loss sum and count, 8 bytes
                **self._in_step(),
            ),
        }
        dist.destroy_process_group()
        return figures


STRATEGIES = {Parallelism.NONE: SingleDevice, Parallelism.DATA_PARALLEL: DataParallel,
              Parallelism.MULTI_WORKER: DataParallel}


def strategy_for(spec: RunSpec) -> Strategy:
    """The strategy ``spec.parallelism`` names; :class:`Unsupported` for one PyTorch has none of here."""
    if spec.parallelism not in STRATEGIES:
        accepted = ", ".join(p.value for p in STRATEGIES)
        raise Unsupported(f"parallelism {spec.parallelism.value} is not implemented for torch; accepted: {accepted}")
    return STRATEGIES[spec.parallelism](spec)
