"""How the Paddle engine distributes a trial: one device, or ``paddle.DataParallel`` under
``paddle.distributed.launch``.

A strategy is picked from ``spec.parallelism`` (:func:`strategy_for`) and composed into
:class:`bakeoff.frameworks.paddle.engine.PaddleEngine`, which calls the same hooks whatever the strategy — the ones
PyTorch's engine calls (:class:`bakeoff.engines.strategy.Strategy`): which device and shard this process takes,
the layer the training forward goes through, whether a micro-batch's backward synchronises, the global loss totals
and what the synchronised gradients are divided by.

``data_parallel`` (one ``paddle.distributed.launch`` of N ranks) and ``multi_worker`` (one launcher per node) differ
only in how the launcher starts the ranks (:mod:`bakeoff.frameworks.paddle.launch`); in each rank the strategy is
the same, :class:`DataParallel`.
"""

from __future__ import annotations

import contextlib
import copy
import os
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import paddle
import paddle.distributed as dist
from paddle.distributed.fleet.utils.hybrid_parallel_util import fused_allreduce_gradients
from paddle.distributed.parallel import sync_params_buffers

from bakeoff.core.spec import Execution, Parallelism, RunSpec
from bakeoff.engines import strategy
from bakeoff.engines.base import Unsupported
from bakeoff.measure import sync
from bakeoff.measure.environment import local_rank

Strategy = strategy.Strategy[str, paddle.Tensor]


class SingleDevice(strategy.OneDevice):
    """``parallelism = "none"``: the whole global batch on one device, nothing to synchronise."""

    def device(self, kind: str) -> str:
        return "gpu:0" if kind == "gpu" else "cpu"


def _env_int(name: str) -> int:
    return strategy.launcher_env_int(name, "paddle.distributed.launch")


class DataParallel:
    """``paddle.DataParallel``: every rank holds a replica, trains on its shard of each global batch, and Paddle's
    reducer all-reduces the gradients in buckets (``comm_buffer_size`` 25 MB, the last 1 MB) as the backward pass
    produces them.

    Graph mode. ``paddle.DataParallel.forward`` cannot run inside ``paddle.jit.to_static`` (Paddle 3.3.1 reads the
    dygraph tracer there, which a static program has not: ``'NoneType' object has no attribute '_has_grad'``), and
    the engine converts the whole forward and loss. So under ``graph`` the replica is set up as DataParallel sets
    it up (rank 0's parameters broadcast, ``sync_params_buffers``) and the gradients are averaged as its reducer
    averages them, by Paddle's own ``fused_allreduce_gradients`` (each scaled by 1/W, all-reduced in fused buffers)
    after the step's last backward: the same numbers, with no overlap of the all-reduce and the backward.

    The process group is ``paddle.distributed.init_parallel_env()`` from the launcher's environment
    (``PADDLE_TRAINER_ID``, ``PADDLE_TRAINERS_NUM``, ``PADDLE_MASTER``'s TCP store): gloo on CPU (the CPU wheel's
    only backend; ``PADDLE_DISTRI_BACKEND=gloo``, which Paddle's launcher sets only where it counts no GPU), NCCL on
    CUDA, where a rank takes the GPU at its local rank (:func:`bakeoff.measure.environment.local_rank`).

    Exactness, as under PyTorch's DDP (:class:`bakeoff.frameworks.torch.distributed.DataParallel`): each rank's
    loss is a *sum* over its shard, ``S_r``; Paddle's reducer averages the gradients over the world, so every rank
    ends the backward with ``(1/W) · Σ_r ∇S_r``, and the engine divides by ``N / W`` (:meth:`gradient_divisor`),
    ``N`` the global count from :meth:`global_totals`' all-reduce: ``Σ_r ∇S_r / N``, the single-device gradient of
    the global batch up to the order of the additions.

    Gradient accumulation: every micro-batch but the last runs under ``DataParallel.no_sync()`` (graph: without the
    all-reduce), so its gradients add up locally and the last backward all-reduces the sum once per optimizer step.
    """

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.rank, self.world = _env_int("PADDLE_TRAINER_ID"), _env_int("PADDLE_TRAINERS_NUM")
        self.local_rank = local_rank()
        if self.world != spec.workers:
            raise Unsupported(f"paddle.distributed.launch started {self.world} ranks but the spec asks for "
                              f"{spec.workers} workers")
        self.graph = spec.execution is Execution.GRAPH
        self.kind = "cpu"
        self.dp: paddle.DataParallel | None = None
        self.params: list[paddle.Tensor] = []
        self.setup_s = 0.0
        self.setup_parts: dict[str, float] = {}
        self.steps = 0  # optimizer steps (global_totals calls) so far
        self.totals_s: list[float] = []  # per optimizer step: the loss totals' blocking all-reduce
        self.gradients_s: list[float] = []  # graph, per optimizer step: the gradients' all-reduce

    @property
    def backend(self) -> str:
        return "nccl" if self.kind == "gpu" else "gloo"

    def device(self, kind: str) -> str:
        self.kind = kind
        if kind == "cpu":  # on a CUDA build Paddle would otherwise pick NCCL, whatever device the step runs on
            os.environ["PADDLE_DISTRI_BACKEND"] = "gloo"
            return "cpu"
        os.environ["FLAGS_selected_gpus"] = str(self.local_rank)  # the GPU init_parallel_env takes for NCCL
        return f"gpu:{self.local_rank}"

    def dropout_seed(self, seed: int) -> int:
        # Each replica draws its own masks; rank 0 keeps the spec's seed (as PyTorch's DataParallel does).
        return seed if self.rank == 0 else int(np.random.SeedSequence([seed, self.rank]).generate_state(1)[0])

    def wrap(self, impl: Any) -> Any:
        """Join the process group and set up the replica, timed together as ``setup_s``. Eager: wrap the layer in
        ``paddle.DataParallel`` (which broadcasts rank 0's parameters) and return a shallow copy of ``impl`` whose
        ``module`` is the wrapper, so every training forward goes through it (its reducer's hooks fire), while
        ``impl`` keeps the plain layer for prediction, weights and checkpoints. Graph: broadcast rank 0's parameters
        as DataParallel does and return ``impl`` itself (class docstring)."""
        start = time.perf_counter()
        dist.init_parallel_env()
        joined = time.perf_counter()
        self.params = [p for p in impl.module.parameters() if not p.stop_gradient]
        if self.graph:
            sync_params_buffers(impl.module, is_model_parallel=False)
            view = impl
        else:
            self.dp = paddle.DataParallel(impl.module)
            view = copy.copy(impl)
            view.module = self.dp
        self.setup_s = time.perf_counter() - start
        self.setup_parts = {"process_group_s": joined - start, "replica_s": self.setup_s - (joined - start)}
        return view

    def micro_step(self, last: bool) -> contextlib.AbstractContextManager[None]:
        if self.graph:
            return self._allreducing() if last else contextlib.nullcontext()
        assert self.dp is not None, "wrap() first"
        return contextlib.nullcontext() if last else self.dp.no_sync()

    @contextlib.contextmanager
    def _allreducing(self) -> Iterator[None]:
        """Graph: after the step's last backward, the gradients' mean over the ranks, as DataParallel's reducer
        computes it (each scaled by 1/W, all-reduced in fused buffers), timed: the step waits for all of it."""
        yield
        start = time.perf_counter()
        fused_allreduce_gradients(self.params, None)
        if self.kind == "gpu":
            paddle.device.synchronize()
        self.gradients_s.append(time.perf_counter() - start)

    def global_totals(self, total: paddle.Tensor, count: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        # One all-reduce of (loss sum, count): the count for the gradient divisor, the sum so every rank reports
        # the global batch's loss (the same number a single device reports, and the same on every rank).
        self.steps += 1
        both = paddle.stack([total.astype("float32"), count.astype("float32")])
        start = time.perf_counter()
        dist.all_reduce(both)  # blocking on CPU (gloo)
        self.totals_s.append(time.perf_counter() - start)
        return both[0], both[1]

    def gradient_divisor(self, count: paddle.Tensor) -> paddle.Tensor:
        return count / self.world  # see the class docstring: the reducer's mean over W, then N / W

    def environment(self) -> dict[str, Any]:
        return {"distributed": f"{self.backend}, rank {self.rank} of {self.world}"}

    def _sync_samples(self) -> tuple[list[float], int]:
        """Seconds one step's all-reduces take (:mod:`bakeoff.measure.sync`) and the gradient bytes: one buffer per
        gradient dtype holding every trainable parameter's elements (the reducer's buckets are internal to it),
        then the loss totals, blocking; each timed all-reduce started after a barrier."""
        sizes: dict[str, int] = {}
        for param in self.params:
            dtype = str(param.dtype).removeprefix("paddle.")
            sizes[dtype] = sizes.get(dtype, 0) + int(np.prod(param.shape))
        buffers = [paddle.zeros([n], dtype=dtype) for dtype, n in sizes.items()]
        buffers.append(paddle.zeros([2], dtype="float32"))  # global_totals' (sum, count)

        def settle() -> None:
            if self.kind == "gpu":
                paddle.device.synchronize()

        def reduce() -> None:
            for buffer in buffers:
                dist.all_reduce(buffer)
            settle()

        def barrier() -> None:
            dist.barrier()
            settle()

        gradient_bytes = sum(int(np.prod(b.shape)) * b.element_size() for b in buffers[:-1])
        return sync.time_reductions(reduce, barrier), gradient_bytes

    def _in_step(self) -> dict[str, Any]:
        """``in_step``: the synchronisation each optimizer step spent, timed in the training step, the median over the
        steady steps (after the first and the warm-up); or ``in_step_missing``, why not."""
        if self.kind != "cpu":
            return {"in_step_missing": "not timed in the step on CUDA: NCCL's all-reduces run on the GPU's stream"}
        if not self.graph:
            return {"in_step_missing": "the gradients' all-reduce runs inside paddle.DataParallel's reducer, "
                                       "overlapped with the backward, which offers no hook to time what the step "
                                       "waited for (sync_s, timed alone, is measured)"}
        per_step = [a + b for a, b in zip(self.gradients_s, self.totals_s, strict=False)]
        first = min(len(per_step) - 1, 1 + self.spec.warmup_steps) if per_step else 0
        if not per_step:
            return {"in_step_missing": "no optimizer step synchronised"}
        return {"in_step": {
            "definition": "per optimizer step, timed in the training step on rank 0: the gradients' fused "
                          "all-reduce after the last backward (not overlapped: the step waits for all of it), plus "
                          "the loss totals' blocking all-reduce; waiting for a slower rank included; median of the "
                          "steady steps",
            "per_step_s": statistics.median(per_step[first:]),
            "gradients_exposed_s": statistics.median(self.gradients_s[first:]),
            "loss_totals_s": statistics.median(self.totals_s[first:len(self.gradients_s)]),
            "steps": len(per_step) - first,
            "samples_s": per_step,
        }}

    def figures(self) -> dict[str, Any]:
        """Set-up and synchronisation figures."""
        samples, gradient_bytes = self._sync_samples()
        how = ("in training the gradients are all-reduced after the step's last backward in fused buffers "
               "(fused_allreduce_gradients, outside the to_static program)" if self.graph else
               "in training paddle.DataParallel's reducer all-reduces the gradients in buckets, overlapped with the "
               "backward pass")
        return {
            "strategy": f"{self.name} ({self.backend}), {self.world} ranks",
            "backend": self.backend,
            "setup_s": self.setup_s,
            "setup_parts_s": self.setup_parts,  # process group (rendezvous), then the replica's set-up
            "sync": sync.figures(
                samples, gradient_bytes,
                "paddle.distributed.all_reduce of one buffer per gradient dtype holding every trainable parameter's "
                f"elements, then of the loss totals; {how}",
                # graph: the fused all-reduces per optimizer step, counted (1: the last micro-batch's only); eager:
                # inside the reducer, not counted (no_sync keeps all but the last micro-batch's backward local)
                rounds_per_step=len(self.gradients_s) / max(self.steps, 1) if self.graph else None,
                loss_allreduces_per_step=1,  # global_totals: the loss sum and count, 8 bytes
                **self._in_step(),
            ),
        }

    @property
    def name(self) -> str:
        return "paddle.DataParallel's all-reduce outside to_static" if self.graph else "paddle.DataParallel"


STRATEGIES: dict[Parallelism, type] = {Parallelism.NONE: SingleDevice, Parallelism.DATA_PARALLEL: DataParallel,
                                       Parallelism.MULTI_WORKER: DataParallel}


def strategy_for(spec: RunSpec) -> Strategy:
    """The strategy ``spec.parallelism`` names; :class:`Unsupported` for one Paddle has none of here."""
    if spec.parallelism not in STRATEGIES:
        accepted = ", ".join(p.value for p in STRATEGIES)
        raise Unsupported(f"parallelism {spec.parallelism.value} is not implemented for paddle; accepted: {accepted}")
    return STRATEGIES[spec.parallelism](spec)
