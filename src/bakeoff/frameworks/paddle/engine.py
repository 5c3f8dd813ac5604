"""PaddlePaddle engine: dygraph (eager) or ``paddle.jit.to_static`` (graph), on CPU or one GPU.

Graph mode converts the step's forward pass and loss into one static program (``to_static`` with
``full_graph=True``: the AST is translated and the whole function must become a program, or the build fails rather
than silently running pieces eagerly). Its backward is that program's own gradient program, which Paddle builds with
it and runs for ``loss.backward()``. The division of the gradients and the Adam update stay dygraph: Paddle 3.3's
``to_static`` cannot take ``Tensor.backward()`` into a program (a static ``Value`` has no ``backward``), so the
step cannot be one program as under ``jax.jit``, and the optimizer's update is Paddle's fused ``adam_`` kernel per
parameter, one op each, as in eager mode. This is the scope of ``torch.compile`` of the forward and loss (and what
``paddle.jit.save`` exports for deployment), without the optimizer.

Mixed precision is Paddle's AMP: ``paddle.amp.auto_cast(dtype="bfloat16", level="O1")`` around the forward pass —
white-listed ops (matmul, conv) run in bf16 while the parameters, gradients and Adam's moments stay fp32, as under
``torch.autocast``. fp16 adds ``paddle.amp.GradScaler`` (loss scaling), on a GPU only.

Adam is ``paddle.optimizer.Adam(beta1=0.9, beta2=0.999, epsilon=1e-8)``. Its kernel computes
``lr·√(1-β₂ᵗ)/(1-β₁ᵗ) · m / (√v + ε·√(1-β₂ᵗ))``, which is PyTorch's ``lr/(1-β₁ᵗ) · m / (√v/√(1-β₂ᵗ) + ε)`` with
numerator and denominator multiplied by ``√(1-β₂ᵗ)``: the same update (up to rounding), ε in the same place.

Distribution is a strategy composed from ``spec.parallelism`` (:mod:`bakeoff.frameworks.paddle.distributed`),
called through the same hooks as PyTorch's engine calls.
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import paddle

from bakeoff.core.registry import model_class, unsupported_on_cpu
from bakeoff.core.spec import Device, Execution, Parallelism, Precision
from bakeoff.core.workload import Batch
from bakeoff.engines.base import Engine, Unsupported, threads_for
from bakeoff.frameworks.paddle import probes
from bakeoff.frameworks.paddle.distributed import strategy_for
from bakeoff.measure.memory import MemoryProbe

AMP_DTYPES = {Precision.BF16: "bfloat16", Precision.FP16: "float16"}


def _pin_threads(threads: int) -> None:
    """``threads`` threads for Paddle's CPU math (``paddle.base.core.set_num_threads``: the oneDNN/MKL and OpenMP
    thread count of its kernels). Paddle has no separate inter-op pool in dygraph: ops run one after another on the
    calling thread."""
    paddle.base.core.set_num_threads(threads)


def _pin_numerics(gpu: bool) -> None:
    """fp32 means fp32: TF32 off in cuBLAS and cuDNN, which Paddle's CUDA builds allow by default."""
    if gpu:
        paddle.set_flags({name: False for name in probes.TF32_FLAGS if probes.flag(name) is not None})


def _gpu_seen() -> bool:
    return paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0


def _device_for(threads: int) -> str:
    """The device kind a measurement runs on (a GPU when Paddle sees one), set as Paddle's current device."""
    if threads:
        _pin_threads(threads)
    kind = "gpu" if _gpu_seen() else "cpu"
    _pin_numerics(kind == "gpu")
    paddle.set_device("gpu:0" if kind == "gpu" else "cpu")
    return kind


def _settle(kind: str) -> None:
    if kind == "gpu":
        paddle.device.synchronize()


def _bf16_matmul_program(a: paddle.Tensor, b: paddle.Tensor) -> paddle.Tensor:
    with paddle.amp.auto_cast(dtype="bfloat16", level="O1"):
        return paddle.matmul(a, b).astype("float32")  # (a program returning bf16 crashes Paddle 3.3.1 on a CPU)


def _multiplier(precision: str, kind: str) -> tuple[Any, str]:
    """``(product, input dtype)``: what multiplies two matrices in ``precision``, the way a trial does.

    fp32, and bf16 on a GPU: ``paddle.matmul`` of tensors of that dtype. bf16 on a CPU: Paddle registers no dygraph
    bf16 matmul kernel for CPUs (``NotFound``), and its dygraph AMP does not cast there; a trial's bf16 runs as a
    to_static program through the AMP pass (cast to bf16, oneDNN's bf16 matmul, cast back), so the ceiling is that
    program's, with fp32 inputs: its two casts are O(n²) beside the product's O(n³)."""
    if precision == "bf16" and kind == "cpu":
        return paddle.jit.to_static(_bf16_matmul_program, full_graph=True), "float32"
    return paddle.matmul, {"fp32": "float32", "bf16": "bfloat16"}[precision]


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> paddle.Tensor:
    return paddle.to_tensor(rng.standard_normal(shape, dtype=np.float32)).astype(dtype)


def matmul_rates(precision: str, n: int, repeats: int, threads: int) -> list[float]:
    """FLOP/s of ``repeats`` dense ``(n, n) @ (n, n)`` products (2·n³ FLOPs each) in ``precision`` on this
    process's device, after warm-up, with ``threads`` pinned as a trial pins them (0: as already set, in a trial
    process that has trained): Paddle's own matmul ceiling (:mod:`bakeoff.measure.ceiling`; bf16 on a CPU:
    :func:`_multiplier`)."""
    kind = _device_for(threads)
    product, dtype = _multiplier(precision, kind)
    rng = np.random.default_rng(0)
    a, b = _random(rng, (n, n), dtype), _random(rng, (n, n), dtype)
    rates = []
    with paddle.no_grad():
        for i in range(repeats + 3):  # 3 untimed: allocation, kernel selection (and the program's build)
            t0 = time.perf_counter()
            c = product(a, b)
            _settle(kind)
            if i >= 3:
                rates.append(2 * n**3 / (time.perf_counter() - t0))
    del c
    return rates


def gemm_rates(precision: str, shapes: list[tuple[int, int, int, int]], repeats: list[int],
               threads: int) -> list[list[float]]:
    """FLOP/s of ``repeats[i]`` products of shape ``i`` ``(batch, m, n, k)`` (``batch`` independent ``(m, k) @ (k, n)``,
    2·batch·m·n·k FLOPs) in ``precision`` on this process's device, each after one untimed product: the rates of a
    plan's own GEMMs (:mod:`bakeoff.measure.gemm_rates`). bf16 multiplies in bf16, as AMP O1's matmul does
    (:func:`_multiplier`)."""
    from bakeoff.measure.gemm_rates import sample

    kind = _device_for(threads)
    product, dtype = _multiplier(precision, kind)
    rng = np.random.default_rng(0)
    out = []
    with paddle.no_grad():
        for (batch, m, n, k), times in zip(shapes, repeats, strict=True):
            lead = (batch,) if batch > 1 else ()
            a, b = _random(rng, (*lead, m, k), dtype), _random(rng, (*lead, k, n), dtype)

            def one(a: paddle.Tensor = a, b: paddle.Tensor = b) -> None:
                product(a, b)
                _settle(kind)

            out.append(sample(one, 2 * batch * m * n * k, times))  # its untimed call builds a new shape's program
            del a, b
    return out


class PaddleEngine(Engine):
    framework = "paddle"

    def setup(self, weights: Mapping[str, np.ndarray]) -> None:
        spec = self.spec
        if spec.execution not in (Execution.EAGER, Execution.GRAPH):
            raise Unsupported(f"Paddle has no {spec.execution.value} mode here (its compiler, CINN, is to_static's "
                              "backend on GPUs); use eager or graph")
        self.strategy = strategy_for(spec)
        gpu = _gpu_seen()
        if spec.device is Device.CUDA and not gpu:
            raise Unsupported("device cuda requested but Paddle sees no CUDA device (the paddlepaddle wheel is CPU "
                              "only; paddlepaddle-gpu is the CUDA build)")
        self.kind = "gpu" if gpu and spec.device is not Device.CPU else "cpu"
        if spec.precision is Precision.FP16 and self.kind != "gpu":
            raise Unsupported("fp16 with loss scaling needs a CUDA device; on CPU use bf16")
        self.device = paddle.set_device(self.strategy.device(self.kind))  # a Place
        _pin_numerics(self.kind == "gpu")
        self.threads = threads_for(spec)
        _pin_threads(self.threads)
        paddle.seed(self.strategy.dropout_seed(spec.seed))  # dropout masks

        # Paddle names every parameter and optimizer accumulator from a process-wide counter (conv2d_4.w_0), and
        # its checkpoints are keyed by those names: a fresh counter per engine gives every engine the same names,
        # so a checkpoint loads into any engine built for the trial, in this process or another.
        with paddle.utils.unique_name.guard():
            self.impl = model_class(spec, "paddle")(self.config, paddle.device.get_device())
            self.impl.build(dict(weights))
            self.params = self.impl.trainable()
            self.optimizer = paddle.optimizer.Adam(learning_rate=self.config["learning_rate"], beta1=0.9,
                                                   beta2=0.999, epsilon=1e-8, parameters=self.params)
            # Adam's moments exist from the start, as Keras creates its slots in optimizer.build and the PyTorch
            # engine fills optimizer.state: the memory baseline holds the optimizer state. Paddle creates its
            # accumulators (moment1, moment2, beta1_pow_acc, beta2_pow_acc) on the first step; this is that very
            # call, made early.
            self.optimizer._create_accumulators(paddle.static.default_main_program().global_block(), self.params)
        # What the training forward goes through: the impl, or under DataParallel a view of it whose module is the
        # wrapper. Prediction, weights and checkpoints use self.impl, the plain layer.
        self._train_impl = self.strategy.wrap(self.impl)
        self._amp_dtype = AMP_DTYPES.get(spec.precision)
        if self.kind == "cpu" and (why := unsupported_on_cpu(spec)):
            raise Unsupported(why)  # eager bf16: dygraph AMP does nothing on a CPU (the record's cpu_missing)
        self._loss_scaling = spec.precision is Precision.FP16
        self.scaler = paddle.amp.GradScaler(enable=self._loss_scaling)
        self.skipped_steps = 0  # fp16 steps the scaler skipped (their gradients overflowed)

        def forward(batch: dict[str, paddle.Tensor]) -> tuple[paddle.Tensor, paddle.Tensor]:
            with self._autocast():
                summed, count = self._train_impl.loss(batch, True)
            return summed.astype("float32"), count

        def outputs(batch: dict[str, paddle.Tensor]) -> paddle.Tensor:
            with self._autocast():
                return self.impl.outputs(batch).astype("float32")

        self._forward, self._outputs = forward, outputs
        if spec.execution is Execution.GRAPH:
            # One program per input shape (the program cache's key is the inputs' shapes and dtypes), as
            # tf.function traces one per shape: a new shape (variable-length speech) builds again, counted.
            self._forward = paddle.jit.to_static(forward, full_graph=True)
            # Prediction is a program too: on a CPU, only to_static's AMP pass casts to bf16 (setup's refusal).
            self._outputs = paddle.jit.to_static(outputs, full_graph=True)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        """AMP O1 in the precision's dtype (weights stay fp32), or nothing in fp32."""
        if self._amp_dtype is None:
            return contextlib.nullcontext()
        return paddle.amp.auto_cast(dtype=self._amp_dtype, level="O1")

    def _tensors(self, batch: Batch) -> dict[str, paddle.Tensor]:
        return {k: paddle.to_tensor(v, place=self.device) for k, v in batch.items()}

    def _train_tensors(self, batch: Batch) -> dict[str, paddle.Tensor]:
        """The batch as the training forward takes it. bf16 on a CPU (to_static's AMP) marks its floating inputs as
        needing a gradient: Paddle 3.3.1's oneDNN bf16 ``matmul_grad`` kernel segfaults writing the gradient of an
        operand that needs none (a model whose first op is a matmul of its input, as the autoencoder's first
        attention projection; tests/test_paddle_encoder.py reproduces it). The unused input gradient costs one
        product of the input's shape per step, in that mode only."""
        tensors = self._tensors(batch)
        if self.kind == "cpu" and self._amp_dtype is not None:
            for t in tensors.values():
                if t.is_floating_point():
                    t.stop_gradient = False
        return tensors

    def _accumulate(self, micro_batches: Sequence[Batch]) -> tuple[paddle.Tensor, paddle.Tensor]:
        """Gradients of the *summed* loss over all micro-batches into ``.grad`` (dygraph adds each backward's
        gradients to what is there; synchronised over the replicas by the strategy, on the last micro-batch only);
        returns the global batch's (summed loss, count).

        Dividing the gradients once by the strategy's divisor of the total count (:meth:`_divide`) then makes k
        micro-batches of b give exactly the gradient of one batch of k·b, padding included.
        """
        self.optimizer.clear_grad(set_to_zero=False)
        total, count = paddle.zeros([]), paddle.zeros([])
        for i, batch in enumerate(micro_batches):
            with self.strategy.micro_step(last=i == len(micro_batches) - 1):
                # Building a to_static program (a new shape) drops every parameter's .grad (Paddle 3.3.1): the
                # earlier micro-batches' gradients are held (references, no copy) and added back when one was built.
                held, builds = [p.grad for p in self.params] if i else None, self.graph_builds()
                summed, n = self._forward(self._train_tensors(batch))
                built = self.graph_builds() > builds
                self.scaler.scale(summed).backward()
                if held and built:
                    self._add_grads(held)
            total, count = total + summed.detach(), count + n.detach().astype("float32")
        return self.strategy.global_totals(total, count)

    @paddle.no_grad()
    def _add_grads(self, grads: list[paddle.Tensor | None]) -> None:
        for p, g in zip(self.params, grads, strict=True):
            if g is not None:
                p.grad.add_(g)

    @paddle.no_grad()
    def _divide(self, divisor: paddle.Tensor) -> None:
        for p in self.params:
            if p.grad is not None:
                p.grad.divide_(divisor)

    def _apply_gradients(self, divisor: paddle.Tensor) -> None:
        """Summed-loss gradients → mean-loss gradients → one Adam step (dygraph in both modes: module docstring).
        fp16's GradScaler unscales, checks for overflow and skips the step when it finds one."""
        self._divide(divisor)
        if self._loss_scaling:
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.skipped_steps += bool(getattr(self.scaler, "_found_inf", False))
        else:
            self.optimizer.step()

    def train_step(self, micro_batches: Sequence[Batch]) -> float:
        total, count = self._accumulate(micro_batches)
        self._apply_gradients(self.strategy.gradient_divisor(count))
        return float((total / count).item())  # host copy: synchronises the GPU

    def gradients(self, micro_batches: Sequence[Batch]) -> list[np.ndarray]:
        _, count = self._accumulate(micro_batches)
        self._divide(self.strategy.gradient_divisor(count))
        grads = [p.grad.numpy().copy() for p in self.params]
        self.optimizer.clear_grad(set_to_zero=False)
        return grads

    def canonical_gradients(self, micro_batches: Sequence[Batch]) -> dict[str, np.ndarray]:
        """:meth:`gradients` under canonical names and layouts, for comparison across frameworks: the model's own
        weight mapping reads them (loaded into the parameters in place of the weights, which are then restored)."""
        grads, saved = self.gradients(micro_batches), [p.numpy().copy() for p in self.params]
        with paddle.no_grad():
            for param, value in zip(self.params, grads, strict=True):
                param.set_value(value)
            out = self.impl.get_weights()
            for param, value in zip(self.params, saved, strict=True):
                param.set_value(value)
        return out

    def predict(self, split: Mapping[str, np.ndarray], batch_size: int) -> np.ndarray:
        n = len(next(iter(split.values())))
        parts = []
        for start in range(0, n, batch_size):
            batch = self._tensors({k: v[start:start + batch_size] for k, v in split.items()})
            parts.append(self._outputs(batch).numpy())
        return np.concatenate(parts)

    def num_params(self) -> int:
        return self.impl.num_params()

    def memory_probe(self) -> MemoryProbe:
        return _GpuProbe() if self.kind == "gpu" else super().memory_probe()

    def environment(self) -> dict[str, Any]:
        env: dict[str, Any] = {
            "framework_version": paddle.__version__,
            "device": paddle.device.get_device(),
            "intra_op_threads": self.threads,  # as set: Paddle has no getter for its math thread count
            "threads_api": "paddle.base.core.set_num_threads",
            **probes.tf32(),  # as read, after setup turned it off
            "mixed_precision": f"paddle.amp.auto_cast({self._amp_dtype}, O1)" if self._amp_dtype else "off",
            "loss_scaling": "GradScaler" if self._loss_scaling else "off",
        }
        if self.spec.execution is Execution.EAGER:
            env["inter_op_threads"] = 1  # dygraph runs its ops one after another on the calling thread
        else:  # to_static's programs run on the PIR interpreter, whose host work queue Paddle sizes itself
            env["executor_serial_run"] = probes.flag("FLAGS_new_executor_serial_run")
        if self.kind == "gpu":
            env["device_name"] = paddle.device.cuda.get_device_name()
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
                 "scaler": self.scaler.state_dict(), "rng": {kind: paddle.get_rng_state(kind) for kind in self._rngs()}}
        tmp = directory / "state.pdckpt.tmp"
        paddle.save(state, str(tmp))
        tmp.replace(directory / "state.pdckpt")

    def load_checkpoint(self, directory: Path) -> None:
        state = paddle.load(str(directory / "state.pdckpt"))
        self.impl.module.set_state_dict(state["model"])
        self.optimizer.set_state_dict(state["optimizer"])
        if state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        for kind, rng in state["rng"].items():
            paddle.set_rng_state(rng, kind)

    def _rngs(self) -> tuple[str, ...]:
        """The devices whose generators a checkpoint keeps: the CPU's, and the GPU's (dropout's there) on one."""
        return ("cpu", "gpu") if self.kind == "gpu" else ("cpu",)

    def profiler(self, directory: Path) -> contextlib.AbstractContextManager[_StepTrace]:
        if self.spec.parallelism is not Parallelism.NONE:
            raise Unsupported("the process group is gone once training's figures are taken (distributed_figures), "
                              "so no rank can take another step")
        return trace(directory, gpu=self.kind == "gpu")

    def graph_builds(self) -> int:
        if self.spec.execution is not Execution.GRAPH:
            return 0
        return len(self._forward.program_cache)

    def extras(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if getattr(self, "_loss_scaling", False):  # (a set-up that failed early set no scaler)
            out["loss_scaling"] = {"skipped_steps": self.skipped_steps,
                                   "final_scale": float(self.scaler._scale.item())}
        if self.spec.execution is Execution.GRAPH and hasattr(self, "_forward"):
            out["to_static_programs"] = self.graph_builds()
            out["to_static_scope"] = "forward and loss (backward: the program's gradient program); Adam dygraph"
        return out


class _StepTrace:
    tool = "paddle.profiler"

    def step(self, number: int) -> contextlib.AbstractContextManager:
        # The name PyTorch's profiler gives its step spans, which the trace views split steps on
        return paddle.profiler.RecordEvent(f"ProfilerStep#{number}")


@contextlib.contextmanager
def trace(directory: Path, gpu: bool) -> Iterator[_StepTrace]:
    """``paddle.profiler`` over the block (host ops with their input shapes; GPU kernels too with ``gpu``), written
    when it ends as a gzipped Chrome trace, ``<host>.perfetto_trace.json.gz``, which Perfetto opens (the ending
    :mod:`bakeoff.trial.profile` tells the viewer by)."""
    targets = [paddle.profiler.ProfilerTarget.CPU]
    if gpu:
        targets.append(paddle.profiler.ProfilerTarget.GPU)
    # on_trace_ready: nothing (Paddle's default writes into ./profiler_log/ when the profiler stops); the one
    # trace is the export below, into ``directory``.
    prof = paddle.profiler.Profiler(targets=targets, record_shapes=True, timer_only=False,
                                    on_trace_ready=lambda _: None)
    prof.start()
    try:
        yield _StepTrace()
    finally:
        prof.stop()
    plain = directory / f"{socket.gethostname()}.trace.json"
    prof.export(str(plain), format="json")
    with plain.open("rb") as source, gzip.open(directory / f"{socket.gethostname()}.perfetto_trace.json.gz",
                                               "wb") as target:
        shutil.copyfileobj(source, target)
    plain.unlink()


class _GpuProbe:
    """Paddle's GPU allocator: bytes allocated to tensors now and at peak (not the pool it reserves)."""

    kind = "paddle.device.cuda.max_memory_allocated"

    def current(self) -> int:
        return int(paddle.device.cuda.memory_allocated())

    def peak(self) -> int:
        return int(paddle.device.cuda.max_memory_allocated())

    def reset_peak(self) -> bool:
        paddle.device.cuda.reset_max_memory_allocated()
        return True
