"""TensorFlow engine: eager, ``tf.function`` (graph) or ``tf.function(jit_compile=True)`` (XLA), on one device or
under a ``tf.distribute`` strategy (:mod:`bakeoff.frameworks.tensorflow.distributed`).

The loop is a custom ``GradientTape`` step, the same shape as the PyTorch step, with Keras' Adam running the
same update as ``torch.optim.Adam`` (see :mod:`bakeoff.frameworks.tensorflow.optim`; epsilon pinned to PyTorch's 1e-8).
Embedding gradients arrive as ``tf.IndexedSlices``; they are densified before the update, because Adam on
slices squares each repeated token's gradient separately (a different second moment from PyTorch's dense one).

The step is written once, per replica (``replica_step``), and composed with the spec's distribution: on one
device it is the whole step; under a strategy each replica runs it on its shard and the distribution sums counts
and gradients across replicas (the arithmetic is in :mod:`bakeoff.frameworks.tensorflow.distributed`). XLA compiles the
whole step on one device; under a strategy only each replica's forward and backward (``local_sums``), because
XLA on CPU compiles no collectives (measured, TF 2.21: "Collectives are not yet implemented for CPU devices when
compiling with XLA") and one XLA cluster cannot reach the other replicas' variables (MirroredStrategy: "Trying
to access resource ... located in device CPU:1 from device CPU:0").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bakeoff.core import registry  # noqa: E402
from bakeoff.core.spec import Device, Execution, Precision
from bakeoff.core.workload import Batch, Weights  # noqa: E402
from bakeoff.engines.base import Engine, Unsupported, threads_for  # noqa: E402
from bakeoff.frameworks.tensorflow import distributed as tf_distributed  # noqa: E402
from bakeoff.frameworks.tensorflow import probes  # noqa: E402
from bakeoff.frameworks.tensorflow.optim import Adam, LossScaleOptimizer  # noqa: E402
from bakeoff.measure.memory import MemoryProbe  # noqa: E402


def matmul_rates(precision: str, n: int, repeats: int, threads: int) -> list[float]:
    """FLOP/s of ``repeats`` dense ``(n, n) @ (n, n)`` products (2·n³ FLOPs each) in ``precision`` on this
    process's device, after warm-up, with ``threads`` set as a trial sets them (0: as already set, in a trial
    process that has trained) (:mod:`bakeoff.measure.ceiling`)."""
    import time

    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    tf.config.experimental.enable_tensor_float_32_execution(False)  # fp32 means fp32, as in every trial
    dtype = {"fp32": tf.float32, "bf16": tf.bfloat16}[precision]
    rng = np.random.default_rng(0)
    a, b = (tf.constant(rng.standard_normal((n, n)), dtype) for _ in range(2))
    matmul = tf.function(tf.linalg.matmul)
    rates = []
    for i in range(repeats + 3):  # 3 untimed: the function's trace, allocation
        t0 = time.perf_counter()
        matmul(a, b)[0, 0].numpy()  # one element to the host: the product is done
        if i >= 3:
            rates.append(2 * n**3 / (time.perf_counter() - t0))
    return rates


def gemm_rates(precision: str, shapes: list[tuple[int, int, int, int]], repeats: list[int],
               threads: int) -> list[list[float]]:
    """FLOP/s of ``repeats[i]`` products of shape ``i`` ``(batch, m, n, k)`` (``batch`` independent ``(m, k) @ (k, n)``,
    2·batch·m·n·k FLOPs) in ``precision`` on this process's device, each after one untimed product (the trace):
    the rates of a plan's own GEMMs (:mod:`bakeoff.measure.gemm_rates`)."""
    from bakeoff.measure.gemm_rates import sample

    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    tf.config.experimental.enable_tensor_float_32_execution(False)
    dtype = {"fp32": tf.float32, "bf16": tf.bfloat16}[precision]
    rng = np.random.default_rng(0)
    matmul = tf.function(tf.linalg.matmul)
    out = []
    for (batch, m, n, k), times in zip(shapes, repeats, strict=True):
        lead = (batch,) if batch > 1 else ()
        a = tf.constant(rng.standard_normal((*lead, m, k)), dtype)
        b = tf.constant(rng.standard_normal((*lead, k, n)), dtype)
        # one element to the host: the product is done
        out.append(sample(lambda a=a, b=b: tf.reshape(matmul(a, b), [-1])[0].numpy(), 2 * batch * m * n * k,
                          times))
    return out


class TensorFlowEngine(Engine):
    framework = "tensorflow"

    def _start_runtime(self) -> None:
        """The runtime as the spec asks, before its first op: threads, visible devices (``self.device``), the
        distribution strategy (``self.dist``), fp32 without TF32, the seed and the dtype policy (``self.policy``)."""
        spec = self.spec
        threads = threads_for(spec)
        # Intra-op and inter-op pools both get all cores (or spec.threads), as PyTorch's do: both frameworks'
        # own defaults, so each runs as its users run it, and the two are sized alike. Set before the runtime
        # starts (here, before the first op), they are what the runtime uses; environment() reads them back.
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        gpus = tf.config.list_physical_devices("GPU")
        if spec.device is Device.CUDA and not gpus:
            raise Unsupported("device cuda requested but TensorFlow sees no GPU")
        if spec.device is Device.CPU and gpus:
            tf.config.set_visible_devices([], "GPU")
            gpus = []
        self.device = "GPU:0" if gpus else "CPU:0"
        if spec.precision is Precision.FP16 and not gpus:
            raise Unsupported("fp16 with loss scaling needs a GPU; on CPU use bf16")
        # The strategy first: it configures devices (logical CPUs) and the cluster before the runtime starts.
        self.dist = tf_distributed.distribution(spec, gpus)
        tf.config.experimental.enable_tensor_float_32_execution(False)  # fp32 means fp32, as in torch
        keras.utils.set_random_seed(spec.seed)  # dropout masks
        # Mixed precision, Keras' own way: a global dtype policy (variables fp32, compute bf16/fp16) set before
        # the model is built, and for fp16 a LossScaleOptimizer.
        self.policy = {Precision.BF16: "mixed_bfloat16", Precision.FP16: "mixed_float16"}.get(spec.precision,
                                                                                            "float32")
        keras.mixed_precision.set_dtype_policy(self.policy)

    def setup(self, weights: Mapping[str, np.ndarray]) -> None:
        spec = self.spec
        reason = registry.unsupported(spec)  # what no process could run (the runner asks before starting any)
        if reason:
            raise Unsupported(reason)
        self._start_runtime()

        dist = self.dist
        with dist.scope():  # variables and optimizer state: mirrored, or on the parameter server
            self.impl = registry.model_class(spec, "tensorflow")(self.config, self.device)
            self.impl.build(dict(weights))
            self.variables = self.impl.trainable()
            optimizer = Adam(learning_rate=self.config["learning_rate"], beta_1=0.9, beta_2=0.999, epsilon=1e-8)
            if spec.precision is Precision.FP16:
                optimizer = LossScaleOptimizer(optimizer)  # every replica skips an overflowed step together
            self.optimizer = optimizer
            self.optimizer.build(self.variables)
        self._traces = 0
        self._last_args = None

        def local_sums(micro_batches: list[dict[str, tf.Tensor]]) -> tuple[list[tf.Tensor], tf.Tensor, tf.Tensor]:
            """This replica's summed-loss gradients, summed loss and count over its micro-batches (nothing
            divided yet: accumulation and padding stay exact)."""
            parts: list[list] = [[] for _ in self.variables]  # each variable's gradient from every micro-batch
            total, count = tf.constant(0.0), tf.constant(0.0)
            for batch in micro_batches:  # unrolled: k is fixed per trial
                with tf.GradientTape() as tape:
                    summed, n = self.impl.loss(batch, training=True)
                    summed = tf.cast(summed, tf.float32)
                    scaled = self.optimizer.scale_loss(summed) if self.policy == "mixed_float16" else summed
                for part, grad in zip(parts, tape.gradient(scaled, self.variables), strict=True):
                    part.append(grad)
                total, count = total + summed, count + tf.cast(n, tf.float32)
            return [_combine(p) for p in parts], total, count

        def gradients(micro_batches: list[dict[str, tf.Tensor]]) -> tuple[list[tf.Tensor], tf.Tensor]:
            """Mean-loss gradients over all micro-batches: summed-loss gradients divided once by the total count."""
            grads, total, count = local_sums(micro_batches)
            return [g / tf.cast(count, g.dtype) for g in grads], total / count

        jit = spec.execution is Execution.XLA
        replica_sums = tf.function(local_sums, jit_compile=True) if jit and not dist.whole_step_xla else local_sums

        def replica_step(micro_batches: list[dict[str, tf.Tensor]]) -> tf.Tensor:
            """One replica's part of the step; the whole step on one device."""
            grads, total, count = replica_sums(micro_batches)
            total, count = dist.sum_over_replicas([total, count])  # the step's global count and summed loss
            # Under a strategy Keras' optimizer sums these across replicas: the one gradient reduction per step.
            self.optimizer.apply([g / tf.cast(count, g.dtype) for g in grads], self.variables)
            return total / count

        def step(args: object) -> tf.Tensor:
            self._traces += 1  # Python side effect: once per trace in graph modes, every step in eager
            return dist.run(replica_step, args)

        def outputs(batch: dict[str, tf.Tensor]) -> tf.Tensor:
            return self.impl.outputs(batch)

        if spec.execution is Execution.EAGER:
            self._step, self._gradients, self._outputs = step, gradients, outputs
        else:  # gradients() compiled too: the parity probes check what the compiled step computes
            whole = jit and dist.whole_step_xla
            self._step = tf.function(step, jit_compile=whole)
            self._gradients = tf.function(gradients, jit_compile=jit)
            self._outputs = tf.function(outputs, jit_compile=jit)

    @staticmethod
    def _tensors(batch: Batch) -> dict[str, tf.Tensor]:
        return {k: tf.convert_to_tensor(v) for k, v in batch.items()}

    def train_step(self, micro_batches: Sequence[Batch]) -> float:
        self._last_args = self.dist.place(micro_batches)
        return self.dist.execute(self._step, self._last_args)  # host copy: waits for the device

    def gradients(self, micro_batches: Sequence[Batch]) -> list[np.ndarray]:
        if self.dist.replicas > 1:
            raise NotImplementedError("gradients() probes one device (parity); this engine runs "
                                      f"{self.dist.words}")
        grads, _ = self._gradients([self._tensors(b) for b in micro_batches])
        scale = float(self.optimizer.dynamic_scale.numpy()) if self.policy == "mixed_float16" else 1.0
        return [g.numpy() / scale for g in grads]

    def canonical_gradients(self, micro_batches: Sequence[Batch]) -> dict[str, np.ndarray]:
        """:meth:`gradients` under canonical names and layouts, for comparison across frameworks: the model's own
        weight mapping reads them (loaded into the variables in place of the weights, which are then restored)."""
        grads, saved = self.gradients(micro_batches), [v.numpy() for v in self.variables]
        for variable, value in zip(self.variables, grads, strict=True):
            variable.assign(value)
        out = self.impl.get_weights()
        for variable, value in zip(self.variables, saved, strict=True):
            variable.assign(value)
        return out

    def predict(self, split: Mapping[str, np.ndarray], batch_size: int) -> np.ndarray:
        # Every process evaluates (MultiWorkerMirroredStrategy's workers stay in step; each reads its own copy);
        # under a parameter server only the chief, once the steps in flight have finished.
        self.dist.finish()
        n = len(next(iter(split.values())))
        parts = []
        for start in range(0, n, batch_size):
            batch = self._tensors({k: v[start:start + batch_size] for k, v in split.items()})
            parts.append(np.asarray(self._outputs(batch).numpy(), np.float32))
        return np.concatenate(parts)

    def num_params(self) -> int:
        return self.impl.num_params()

    def data_shard(self) -> tuple[int, int]:
        return self.dist.data_shard()

    def is_chief(self) -> bool:
        return self.dist.is_chief()

    def replica_weights(self) -> list[Weights]:
        return self.dist.replica_weights(self.impl)

    def distributed_figures(self) -> dict[str, Any]:
        eager = self.spec.execution is Execution.EAGER
        figures = self.dist.figures(self.variables, None if eager else self._step, self._last_args, eager)
        if figures and self.spec.execution is Execution.XLA:
            figures["xla_scope"] = ("whole step" if self.dist.whole_step_xla else
                                    "each replica's forward and backward (local_sums); the cross-replica "
                                    "reductions and the Adam update run in the surrounding tf.function")
        return figures

    def memory_probe(self) -> MemoryProbe:
        return _GpuProbe(self.device) if self.device.startswith("GPU") else super().memory_probe()

    def environment(self) -> dict[str, Any]:
        return {
            "framework_version": tf.__version__,
            "keras_version": keras.__version__,
            "device": self.device,
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            **probes.tf32(),  # as read, after setup turned it off
            "mixed_precision": self.policy,
            "loss_scaling": "LossScaleOptimizer" if self.policy == "mixed_float16" else "off",
            "distribution": self.dist.words,
        }

    def _checkpoint(self) -> tf.train.Checkpoint:
        # Variables are named explicitly: TF's object-graph tracking does not see through Keras 3's layer lists
        # (measured: it saved 4 of the model's 45 variables). model.variables include the dropout layers'
        # seed-generator states, so dropout masks continue exactly after a resume.
        model = {f"model_{i:04d}": v for i, v in enumerate(self.impl.module.variables)}
        optimizer = {f"optimizer_{i:04d}": v for i, v in enumerate(self.optimizer.variables)}
        return tf.train.Checkpoint(**model, **optimizer)

    def save_checkpoint(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._checkpoint().write(str(directory / "ckpt"))

    def load_checkpoint(self, directory: Path) -> None:
        self._checkpoint().read(str(directory / "ckpt")).assert_consumed()

    def summary_writer(self, logdir: Path) -> _Writer:
        return _Writer(logdir)

    def profiler(self, directory: Path) -> contextlib.AbstractContextManager[_StepTrace]:
        if isinstance(self.dist, tf_distributed.ParameterServer):
            raise Unsupported("the parameter-server chief only schedules steps: their work runs in the worker "
                              "processes, which this profiler does not trace")
        return trace(directory)

    def graph_builds(self) -> int:
        return 0 if self.spec.execution is Execution.EAGER else self._traces

    def extras(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if isinstance(getattr(self, "optimizer", None), LossScaleOptimizer):  # (a set-up that failed early made none)
            out["loss_scaling"] = {"skipped_steps": int(self.optimizer.skipped.numpy()),
                                   "final_scale": float(self.optimizer.dynamic_scale.numpy())}
        if self.spec.execution is not Execution.EAGER:
            out["train_step_traces"] = self._traces
        return out


def _combine(parts: list) -> tf.Tensor:
    """Sum one variable's gradients over micro-batches, as a dense tensor. Embedding gradients arrive as
    IndexedSlices: their rows are concatenated and densified once (summing repeated rows), which is both exact
    and cheaper than densifying every micro-batch's slices."""
    if isinstance(parts[0], tf.IndexedSlices):
        return tf.convert_to_tensor(tf.IndexedSlices(tf.concat([p.values for p in parts], 0),
                                                     tf.concat([p.indices for p in parts], 0), parts[0].dense_shape))
    return parts[0] if len(parts) == 1 else tf.add_n(parts)


class _GpuProbe:
    """TensorFlow's GPU allocator: bytes in use now and at peak (``tf.config.experimental.get_memory_info``)."""

    kind = "tf get_memory_info"

    def __init__(self, device: str) -> None:
        self.device = device

    def current(self) -> int:
        return int(tf.config.experimental.get_memory_info(self.device)["current"])

    def peak(self) -> int:
        return int(tf.config.experimental.get_memory_info(self.device)["peak"])

    def reset_peak(self) -> bool:
        tf.config.experimental.reset_memory_stats(self.device)
        return True


class _StepTrace:
    tool = "tf.profiler.experimental"

    def step(self, number: int) -> contextlib.AbstractContextManager:
        # the step marker TensorBoard's profile overview reads its step times from
        return tf.profiler.experimental.Trace("train", step_num=number, _r=1)


@contextlib.contextmanager
def trace(directory: Path) -> Iterator[_StepTrace]:
    """TensorFlow's profiler over the block, written when it ends as ``plugins/profile/<time>/<host>.xplane.pb``
    under ``directory``, which TensorBoard's profile plugin opens (:mod:`bakeoff.trial.profile`). Also the
    Keras engine's on TensorFlow."""
    tf.profiler.experimental.start(str(directory))
    try:
        yield _StepTrace()
    finally:
        tf.profiler.experimental.stop()


class _Writer:
    """TensorBoard events through ``tf.summary``."""

    def __init__(self, logdir: Path) -> None:
        self._writer = tf.summary.create_file_writer(str(logdir))

    def scalar(self, tag: str, value: float, step: int) -> None:
        with self._writer.as_default():
            tf.summary.scalar(tag, value, step=step)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
