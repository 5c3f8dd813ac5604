"""TensorFlow engine: eager, ``tf.function`` (graph) or ``tf.function(jit_compile=True)`` (XLA).

The loop is a custom ``GradientTape`` step, the same shape as the PyTorch step, with Keras' Adam running the
same update as ``torch.optim.Adam`` (see :mod:`bakeoff.engines.tf_optim`; epsilon pinned to PyTorch's 1e-8).
Embedding gradients arrive as ``tf.IndexedSlices``; they are densified before the update, because Adam on
slices squares each repeated token's gradient separately (a different second moment from PyTorch's dense one).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bakeoff.engines.base import Engine, Unsupported  # noqa: E402
from bakeoff.engines.tf_optim import Adam  # noqa: E402
from bakeoff.registry import model_class  # noqa: E402
from bakeoff.spec import Batch, Device, Execution, Parallelism, Precision  # noqa: E402


class TensorFlowEngine(Engine):
    framework = "tensorflow"

    def setup(self, weights: Mapping[str, np.ndarray]) -> None:
        spec = self.spec
        if spec.precision is not Precision.FP32:
            raise Unsupported(f"precision {spec.precision} is not implemented yet for tensorflow (fp32 only)")
        if spec.parallelism is not Parallelism.NONE:
            raise Unsupported(f"parallelism {spec.parallelism} is not implemented yet for tensorflow")
        threads = spec.threads or os.cpu_count() or 1
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        gpus = tf.config.list_physical_devices("GPU")
        if spec.device is Device.CUDA and not gpus:
            raise Unsupported("device cuda requested but TensorFlow sees no GPU")
        if spec.device is Device.CPU and gpus:
            tf.config.set_visible_devices([], "GPU")
            gpus = []
        self.device = "GPU:0" if gpus else "CPU:0"
        tf.config.experimental.enable_tensor_float_32_execution(False)  # fp32 means fp32, as in torch
        keras.utils.set_random_seed(spec.seed)  # dropout masks

        self.impl = model_class(spec.workload, "tensorflow")(self.config, self.device)
        self.impl.build(dict(weights))
        self.optimizer = Adam(learning_rate=self.config["learning_rate"], beta_1=0.9, beta_2=0.999, epsilon=1e-8)
        self.optimizer.build(self.impl.trainable())
        self._traces = 0

        def step(batch: dict[str, tf.Tensor]) -> tf.Tensor:
            self._traces += 1  # Python side effect: runs once per trace in graph modes, every step in eager
            variables = self.impl.trainable()
            with tf.GradientTape() as tape:
                summed, count = self.impl.loss(batch, training=True)
                loss = summed / count
            grads = [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]  # IndexedSlices → dense
            self.optimizer.apply_gradients(zip(grads, variables, strict=True))
            return loss

        def outputs(batch: dict[str, tf.Tensor]) -> tf.Tensor:
            return self.impl.outputs(batch)

        if spec.execution is Execution.EAGER:
            self._step, self._outputs = step, outputs
        else:
            jit = spec.execution is Execution.XLA
            self._step = tf.function(step, jit_compile=jit)
            self._outputs = tf.function(outputs, jit_compile=jit)

    def train_step(self, batch: Batch) -> float:
        loss = self._step({k: tf.convert_to_tensor(v) for k, v in batch.items()})
        return float(loss.numpy())  # host copy: waits for the device

    def predict(self, split: Mapping[str, np.ndarray], batch_size: int) -> np.ndarray:
        n = len(next(iter(split.values())))
        parts = []
        for start in range(0, n, batch_size):
            batch = {k: tf.convert_to_tensor(v[start:start + batch_size]) for k, v in split.items()}
            parts.append(self._outputs(batch).numpy())
        return np.concatenate(parts)

    def num_params(self) -> int:
        return self.impl.num_params()

    def peak_memory(self) -> tuple[int, str]:
        if self.device.startswith("GPU"):
            return int(tf.config.experimental.get_memory_info(self.device)["peak"]), "tf get_memory_info peak"
        return super().peak_memory()

    def environment(self) -> dict[str, Any]:
        return {
            "framework_version": tf.__version__,
            "keras_version": keras.__version__,
            "device": self.device,
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "tf32": False,
        }

    def extras(self) -> dict[str, Any]:
        if self.spec.execution is Execution.EAGER:
            return {}
        return {"train_step_traces": self._traces}
