"""PyTorch engine: eager or ``torch.compile`` (graph), on CPU or CUDA.

Graph mode compiles the whole training step, the scope ``tf.function`` compiles in TensorFlow: the forward pass
and loss (whose backward AOTAutograd compiles with it) and the update — the gradients' division by the example
count and the Adam step (PyTorch's "compiling the optimizer" recipe). What stays eager between the two graphs is
the autograd engine adding each micro-batch's gradients into ``.grad``.

Distribution is a strategy composed from ``spec.parallelism`` (:mod:`bakeoff.frameworks.torch.distributed`): one
device, or ``DistributedDataParallel`` under torchrun. The step calls the same strategy hooks either way; under
DDP in graph mode, Dynamo's DDPOptimizer splits the compiled forward at DDP's bucket boundaries so the
all-reduces still overlap the backward pass.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bakeoff.core.registry import model_class
from bakeoff.core.spec import Device, Execution, Parallelism, Precision
from bakeoff.core.workload import Batch
from bakeoff.engines.base import Engine, Unsupported, threads_for
from bakeoff.frameworks.torch import probes
from bakeoff.frameworks.torch.distributed import strategy_for
from bakeoff.measure.memory import MemoryProbe


def _pin_threads(threads: int) -> None:
    """``threads`` intra-op and inter-op threads, as TensorFlow is given (both frameworks' defaults: all cores).

    PyTorch sizes its inter-op pool once per process, before the pool starts; a second engine in one process (a
    bench) keeps the first one's, and :meth:`TorchEngine.environment` reports what is in force.
    """
    torch.set_num_threads(threads)
    if torch.get_num_interop_threads() != threads:
        try:
            torch.set_num_interop_threads(threads)
        except RuntimeError:
            pass


def matmul_rates(precision: str, n: int, repeats: int, threads: int) -> list[float]:
    """FLOP/s of ``repeats`` dense ``(n, n) @ (n, n)`` products (2·n³ FLOPs each) in ``precision`` on this
    process's device, after warm-up, with ``threads`` pinned as a trial pins them (0: as already set, in a trial
    process that has trained) (:mod:`bakeoff.measure.ceiling`)."""
    import time

    if threads:
        _pin_threads(threads)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as in every trial
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=gen).to(device, dtype) for _ in range(2))
    rates = []
    with torch.inference_mode():
        for i in range(repeats + 3):  # 3 untimed: allocation, kernel selection
            t0 = time.perf_counter()
            c = a @ b
            if device == "cuda":
                torch.cuda.synchronize()
            if i >= 3:
                rates.append(2 * n**3 / (time.perf_counter() - t0))
    del c
    return rates


def gemm_rates(precision: str, shapes: list[tuple[int, int, int, int]], repeats: list[int],
               threads: int) -> list[list[float]]:
    """FLOP/s of ``repeats[i]`` products of shape ``i`` ``(batch, m, n, k)`` (``batch`` independent ``(m, k) @ (k, n)``,
    2·batch·m·n·k FLOPs) in ``precision`` on this process's device, each after one untimed product: the rates of a
    plan's own GEMMs (:mod:`bakeoff.measure.gemm_rates`). bf16 multiplies bf16 tensors, as autocast's linear and
    matmul do."""
    from bakeoff.measure.gemm_rates import sample

    if threads:
        _pin_threads(threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
    gen = torch.Generator().manual_seed(0)
    out = []
    with torch.inference_mode():
        for (batch, m, n, k), times in zip(shapes, repeats, strict=True):
            lead = (batch,) if batch > 1 else ()
            a = torch.randn(*lead, m, k, generator=gen).to(device, dtype)
            b = torch.randn(*lead, k, n, generator=gen).to(device, dtype)

            def product(a: torch.Tensor = a, b: torch.Tensor = b) -> None:
                torch.matmul(a, b)
                if device == "cuda":
                    torch.cuda.synchronize()

            out.append(sample(product, 2 * batch * m * n * k, times))
            del a, b
    return out


class TorchEngine(Engine):
    framework = "torch"

    def setup(self, weights: Mapping[str, np.ndarray]) -> None:
        spec = self.spec
        if spec.execution is Execution.XLA:
            raise Unsupported("PyTorch has no XLA mode here (torch_xla targets TPUs); use eager or graph")
        self.strategy = strategy_for(spec)
        cuda = torch.cuda.is_available()
        if spec.device is Device.CUDA and not cuda:
            raise Unsupported("device cuda requested but torch sees no CUDA device")
        self.device = self.strategy.device("cuda" if cuda and spec.device is not Device.CPU else "cpu")
        if spec.precision is Precision.FP16 and self.device.type != "cuda":
            raise Unsupported("fp16 with loss scaling needs a CUDA device; on CPU use bf16")
        # Pin numerics: no TF32 (fp32 means fp32 in both frameworks), deterministic thread counts.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        _pin_threads(threads_for(spec))
        torch.manual_seed(self.strategy.dropout_seed(spec.seed))  # dropout masks

        self.impl = model_class(spec, "torch")(self.config, str(self.device))
        self.impl.build(dict(weights))
        # What the training forward goes through: the impl, or under DDP a view of it whose module is the DDP
        # wrapper. Prediction, weights and checkpoints use self.impl, the plain module.
        self._train_impl = self.strategy.wrap(self.impl)
        self.params = self.impl.trainable()
        self.optimizer = torch.optim.Adam(self.params, lr=self.config["learning_rate"], betas=(0.9, 0.999), eps=1e-8)
        # Adam's moments exist from the start, as Keras creates its slots in optimizer.build: in both frameworks
        # the memory baseline holds the optimizer state and the training increment is what the steps add. The
        # state is exactly what Adam's first step would create (zero moments, step 0 on the host).
        for p in self.params:
            self.optimizer.state[p] = {"step": torch.tensor(0.0, dtype=torch.get_default_dtype()),
                                       "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                       "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
        # Mixed precision, PyTorch's own way: autocast around the forward pass (weights stay fp32), and for fp16 a
        # GradScaler that scales the loss and skips steps whose gradients overflow.
        self._amp_dtype = {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}.get(spec.precision)
        self._loss_scaling = spec.precision is Precision.FP16  # a plain bool: Dynamo does not trace GradScaler
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self._loss_scaling)
        self.skipped_steps = 0  # fp16 steps the scaler skipped (their gradients overflowed)

        def forward(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
            with torch.autocast(self.device.type, dtype=self._amp_dtype or torch.float32,
                                enabled=self._amp_dtype is not None):
                summed, count = self._train_impl.loss(batch, True)
            return summed.float(), count

        self._forward, self._update = forward, self._apply_gradients
        if spec.execution is Execution.GRAPH:
            # One static graph per input shape, as tf.function traces one per shape: a new shape (variable-length
            # speech) compiles again and is counted as a graph build. Dynamic-shape graphs (dynamic=None) crash in
            # Inductor 2.13 on the speech model (ValueRangeError on a stride-2 convolution's symbolic length
            # feeding dropout); the remedy measured instead is fewer shapes: bucketing and ``pad_multiple``.
            # The recompile limit is lifted so that no shape silently falls back to eager after the 8th.
            if self.device.type == "cpu":
                # Dropout's random numbers from PyTorch's own kernel rather than Inductor's generated CPU code,
                # which took 1.2-1.4 s of a 2.9-3.05 s text_classifier/small step (bench/reference_efficiency.py:
                # 0.80x a plain torch.compile of transformers' BertEncoder before, about 1.07x after).
                import torch._inductor.config as inductor_config

                inductor_config.fallback_random = True
            self._graph_breaks = compile_settings()
            self._forward = torch.compile(forward, dynamic=False)
            # The update compiles once: its inputs (parameters, gradients, Adam state) never change shape.
            self._update = torch.compile(self._apply_gradients, dynamic=False)

    def _tensors(self, batch: Batch) -> dict[str, torch.Tensor]:
        return {k: torch.from_numpy(v).to(self.device, non_blocking=True) for k, v in batch.items()}

    def _accumulate(self, micro_batches: Sequence[Batch]) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradients of the *summed* loss over all micro-batches into ``.grad`` (synchronised over the replicas
        by the strategy, on the last micro-batch only); returns the global batch's (summed loss, count).

        Dividing the gradients once by the strategy's divisor of the total count (:meth:`_divide`) then makes k
        micro-batches of b give exactly the gradient of one batch of k·b, padding included.
        """
        self.optimizer.zero_grad(set_to_none=True)
        total, count = torch.zeros((), device=self.device), torch.zeros((), device=self.device)
        for i, batch in enumerate(micro_batches):
            with self.strategy.micro_step(last=i == len(micro_batches) - 1):
                summed, n = self._forward(self._tensors(batch))
                self.scaler.scale(summed).backward()
            total, count = total + summed.detach(), count + n
        return self.strategy.global_totals(total, count)

    def _divide(self, divisor: torch.Tensor) -> None:
        for p in self.params:
            if p.grad is not None:
                p.grad.div_(divisor)

    def _apply_gradients(self, divisor: torch.Tensor) -> None:
        """Summed-loss gradients → mean-loss gradients → one optimizer step (compiled in graph mode).

        Compiled, this is two graphs: the division, and Adam's update of every parameter (``Optimizer.step``
        breaks the graph on purpose, to run it without autograd). fp16's GradScaler, which Dynamo does not trace,
        runs eagerly around the compiled Adam step: it reads the overflow flag on the host to skip a step.
        """
        self._divide(divisor)
        if self._loss_scaling:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def train_step(self, micro_batches: Sequence[Batch]) -> float:
        total, count = self._accumulate(micro_batches)
        scale = self.scaler.get_scale() if self._loss_scaling else None
        self._update(self.strategy.gradient_divisor(count))
        if scale is not None:
            self.skipped_steps += skipped(scale, self.scaler)
        return (total / count).item()  # host copy: synchronises CUDA

    def gradients(self, micro_batches: Sequence[Batch]) -> list[np.ndarray]:
        _, count = self._accumulate(micro_batches)
        self._divide(self.strategy.gradient_divisor(count))
        grads = [p.grad.detach().cpu().numpy().copy() for p in self.params]
        self.optimizer.zero_grad(set_to_none=True)
        return grads

    def canonical_gradients(self, micro_batches: Sequence[Batch]) -> dict[str, np.ndarray]:
        """:meth:`gradients` under canonical names and layouts, for comparison across frameworks: the model's own
        weight mapping reads them (loaded into the parameters in place of the weights, which are then restored)."""
        grads, saved = self.gradients(micro_batches), [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for param, value in zip(self.params, grads, strict=True):
                param.copy_(torch.from_numpy(value))
            out = self.impl.get_weights()
            for param, value in zip(self.params, saved, strict=True):
                param.copy_(value)
        return out

    def predict(self, split: Mapping[str, np.ndarray], batch_size: int) -> np.ndarray:
        n = len(next(iter(split.values())))
        parts = []
        for start in range(0, n, batch_size):
            batch = self._tensors({k: v[start:start + batch_size] for k, v in split.items()})
            with torch.autocast(self.device.type, dtype=self._amp_dtype or torch.float32,
                                enabled=self._amp_dtype is not None):
                parts.append(self.impl.outputs(batch).float().cpu().numpy())
        return np.concatenate(parts)

    def num_params(self) -> int:
        return self.impl.num_params()

    def memory_probe(self) -> MemoryProbe:
        return _CudaProbe(self.device) if self.device.type == "cuda" else super().memory_probe()

    def environment(self) -> dict[str, Any]:
        env: dict[str, Any] = {
            "framework_version": torch.__version__,
            "device": str(self.device),
            "intra_op_threads": torch.get_num_threads(),
            "inter_op_threads": torch.get_num_interop_threads(),
            **probes.tf32(),  # as read, after setup turned it off
            "mixed_precision": f"torch.autocast({self._amp_dtype})" if self._amp_dtype else "off",
            "loss_scaling": "GradScaler" if self.scaler.is_enabled() else "off",
        }
        if self.spec.execution is Execution.GRAPH:
            import torch._inductor.config as inductor_config

            env["inductor_fallback_random"] = bool(inductor_config.fallback_random)
        if self.device.type == "cuda":
            env["device_name"] = torch.cuda.get_device_name(self.device)
        env.update(self.strategy.environment())
        return env

    def data_shard(self) -> tuple[int, int]:
        return self.strategy.rank, self.strategy.world

    def is_chief(self) -> bool:
        return self.strategy.rank == 0

    def distributed_figures(self) -> dict[str, Any]:
        return self.strategy.figures()

    def save_checkpoint(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        state = {"model": self.impl.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "scaler": self.scaler.state_dict(), "cpu_rng": torch.get_rng_state()}
        if self.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        tmp = directory / "state.pt.tmp"
        torch.save(state, tmp)
        tmp.replace(directory / "state.pt")

    def load_checkpoint(self, directory: Path) -> None:
        state = torch.load(directory / "state.pt", map_location=self.device, weights_only=False)
        self.impl.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        torch.set_rng_state(state["cpu_rng"])
        if "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"], self.device)

    def profiler(self, directory: Path) -> contextlib.AbstractContextManager[_StepTrace]:
        if self.spec.parallelism is not Parallelism.NONE:
            raise Unsupported("DDP's process group is destroyed once training's figures are taken "
                              "(distributed_figures), so no rank can take another step")
        return trace(directory, cuda=self.device.type == "cuda")

    def graph_builds(self) -> int:
        if self.spec.execution is not Execution.GRAPH:
            return 0
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    def extras(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if getattr(self, "_loss_scaling", False):  # (a set-up that failed early set no scaler)
            out["loss_scaling"] = {"skipped_steps": self.skipped_steps, "final_scale": self.scaler.get_scale()}
        if self.spec.execution is not Execution.GRAPH:
            return out
        from torch._dynamo.utils import counters

        return {**out, "dynamo_frames_compiled": int(counters["stats"]["unique_graphs"]),
                "dynamo_graph_breaks": int(sum(counters["graph_break"].values())),
                "dynamo_graph_breaks_at": self._graph_breaks.sites()}


class GraphBreaks:
    """Where ``torch.compile`` broke the graph, as Dynamo's graph-break log says it ("Graph break in user code at
    FILE:LINE", then the reason): each site with its reason's first line and how often. A filter on that log keeps
    the records and drops them, so the trial's stderr gets none of the stack traces."""

    LOGGER = "torch._dynamo.symbolic_convert.__graph_breaks"

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], int] = {}
        torch._logging.set_logs(graph_breaks=True)
        logging.getLogger(self.LOGGER).addFilter(self._keep)

    def _keep(self, record: logging.LogRecord) -> bool:
        lines = [line.strip() for line in record.getMessage().splitlines()]
        at = lines[0].removeprefix("Graph break in user code at ") if lines else "?"
        reason = next((line for line in lines[1:] if line and not line.startswith("Graph Break Reason")), "")
        self._seen[at, reason] = self._seen.get((at, reason), 0) + 1
        return False

    def sites(self) -> list[dict[str, Any]]:
        """``[{"at": "/…/torch_model.py:70", "reason": "…", "count": 2}]``, in the order first met."""
        return [{"at": at, "reason": reason, "count": n} for (at, reason), n in self._seen.items()]


def compile_settings() -> GraphBreaks:
    """What every ``torch.compile`` of a trial runs under (this engine's and Keras' on PyTorch): no frame silently
    falls back to eager after Dynamo's 8th recompilation; the graph breaks recorded where they happen."""
    import torch._dynamo as dynamo

    dynamo.config.recompile_limit = max(dynamo.config.recompile_limit, 100_000)
    dynamo.config.accumulated_recompile_limit = max(dynamo.config.accumulated_recompile_limit, 100_000)
    return GraphBreaks()


def skipped(scale_before: float, scaler: torch.amp.GradScaler) -> bool:
    """Whether the step just taken was skipped: ``GradScaler.update`` lowers the scale exactly when the step's
    gradients overflowed (and ``step`` then skipped the optimizer), and raises or keeps it otherwise.

    The scale is read on the host before and after the update (``get_scale``): ``GradScaler.step`` already waits
    for its overflow check on the host, so the step gains one more wait, before the update, and no other."""
    return scaler.get_scale() < scale_before


class _StepTrace:
    tool = "torch.profiler"

    def step(self, number: int) -> contextlib.AbstractContextManager:
        # PyTorch's own step marker (what profiler.step() records): HTA and the trace views split steps on it
        return torch.profiler.record_function(f"ProfilerStep#{number}")


@contextlib.contextmanager
def trace(directory: Path, cuda: bool) -> Iterator[_StepTrace]:
    """``torch.profiler`` over the block (CPU ops with their input shapes; CUDA kernels too with ``cuda``), written
    when it ends as a Chrome trace, ``<host>.pt.trace.json`` (the ending PyTorch's TensorBoard plugin reads), which
    Perfetto and chrome://tracing open (:mod:`bakeoff.trial.profile`). Also the Keras engine's on PyTorch."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        yield _StepTrace()
    prof.export_chrome_trace(str(directory / f"{socket.gethostname()}.pt.trace.json"))


class _CudaProbe:
    """PyTorch's CUDA caching allocator: bytes allocated to tensors now and at peak (not the cache it reserves)."""

    kind = "torch.cuda.max_memory_allocated"

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def current(self) -> int:
        return int(torch.cuda.memory_allocated(self.device))

    def peak(self) -> int:
        return int(torch.cuda.max_memory_allocated(self.device))

    def reset_peak(self) -> bool:
        torch.cuda.reset_peak_memory_stats(self.device)
        return True
