"""The per-backend parts of the Keras 3 engine (:class:`bakeoff.frameworks.keras.engine.KerasEngine`): device and
threads, versions, Adam, the gradient probe and JAX's memory probe — the places where Keras on JAX, PyTorch and
TensorFlow differ (the engine's module docstring says why each is needed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from bakeoff.core.spec import Device, Execution
from bakeoff.engines.base import Unsupported
from bakeoff.measure.environment import usable_cores

GradientFn = Callable[[Any, Any], tuple[list[np.ndarray], float]]
"""(x, y) -> (summed-loss gradients in trainable_variables order, example count)."""


def labels_key(impl: Any) -> str:
    """The batch entry a model's loss reads as labels (Keras' y): ``labels``, unless the model names another (a
    Keras function's declaration may)."""
    return getattr(impl, "labels_key", "labels")


def pin_device_and_threads(backend: str, device: Device, threads: int) -> str:
    """Pin threads and fp32 numerics (no TF32), check the device Keras will use against the spec's; returns it."""
    if backend == "torch":
        import torch

        from bakeoff.frameworks.torch.engine import _pin_threads

        _pin_threads(threads)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        from keras.src.backend.torch.core import get_device  # Keras' torch device: cuda if available

        actual = str(get_device())
    elif backend == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        gpus = tf.config.list_physical_devices("GPU")
        if device is Device.CPU and gpus:
            tf.config.set_visible_devices([], "GPU")
            gpus = []
        tf.config.experimental.enable_tensor_float_32_execution(False)
        actual = "gpu:0" if gpus else "cpu:0"
    else:
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")  # fp32 matmuls in fp32 on GPU (no TF32)
        actual = str(jax.devices()[0].platform) + ":0"
    on_gpu = not actual.startswith("cpu")
    if device is Device.CUDA and not on_gpu:
        raise Unsupported(f"device cuda requested but Keras on {backend} sees no GPU")
    if device is Device.CPU and on_gpu:
        how = {"torch": "KERAS_TORCH_DEVICE=cpu", "jax": "JAX_PLATFORMS=cpu"}[backend]
        raise Unsupported(f"device cpu requested but Keras on {backend} runs on {actual}: set {how}")
    return actual


def adam_class(backend: str) -> type:
    """PyTorch's Adam in Keras (:mod:`bakeoff.frameworks.tensorflow.optim`, ``keras.ops`` only); on TensorFlow with the
    embedding's gradient densified first.

    On the TensorFlow backend an Embedding's gradient is a ``tf.IndexedSlices`` with one row per token occurrence,
    and Keras' Adam arithmetic (``ops.square(gradient)``) squares each occurrence's row before they are summed into
    the dense second moment: a token seen twice in a batch gets g₁² + g₂², not (g₁ + g₂)² as on jax and torch
    (measured on the text classifier: the second training loss 1.2002 against 1.1781 on every other row). Keras'
    own ``keras.optimizers.Adam`` has the same arithmetic, so this is what an unmodified Keras-on-TF model computes;
    bakeoff densifies, as its TensorFlow engine does, so that the rows train the same algorithm.
    """
    from bakeoff.frameworks.tensorflow.optim import Adam

    if backend != "tensorflow":
        return Adam
    import tensorflow as tf

    class DenseGradientAdam(Adam):
        def apply(self, grads, trainable_variables=None):  # noqa: ANN001, ANN201 - Keras' signature
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
            return super().apply(grads, trainable_variables)

    return DenseGradientAdam


def backend_environment(backend: str) -> dict[str, Any]:
    if backend == "torch":
        import torch

        return {"framework_version": torch.__version__, "intra_op_threads": torch.get_num_threads(),
                "inter_op_threads": torch.get_num_interop_threads()}
    if backend == "tensorflow":
        import tensorflow as tf

        return {"framework_version": tf.__version__,
                "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
                "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads()}
    import jax

    # XLA's CPU client sizes its thread pool itself (all cores); it is fixed before bakeoff can set it.
    return {"framework_version": jax.__version__, "intra_op_threads": f"XLA default ({usable_cores()} cores)"}


def _jax_gradients(impl: Any, execution: Execution) -> GradientFn:
    import jax

    module = impl.module

    def summed(trainable: list, frozen: list, x: Any, y: Any) -> tuple[Any, Any]:
        logits, _ = module.stateless_call(trainable, frozen, x, training=True)
        return module.summed_loss(y, logits)

    grad = jax.value_and_grad(summed, has_aux=True)
    if execution is not Execution.EAGER:
        grad = jax.jit(grad)

    def fn(x: Any, y: Any) -> tuple[list[np.ndarray], float]:
        (_, count), grads = grad([v.value for v in module.trainable_variables],
                                 [v.value for v in module.non_trainable_variables], x, y)
        return [np.asarray(g, np.float32) for g in grads], float(count)

    return fn


def _torch_gradients(impl: Any, execution: Execution) -> GradientFn:
    import torch

    def fn(x: Any, y: Any) -> tuple[list[np.ndarray], float]:  # eager in every mode
        params = [v.value for v in impl.module.trainable_variables]
        for p in params:
            p.grad = None
        summed, count = impl.loss({impl.input_key: x, labels_key(impl): y}, training=True)
        summed.backward()
        grads = [p.grad.detach().float().cpu().numpy().copy() for p in params]
        with torch.no_grad():
            for p in params:
                p.grad = None
        return grads, float(count)

    return fn


def _tf_gradients(impl: Any, execution: Execution) -> GradientFn:
    import tensorflow as tf

    def grad(x: Any, y: Any) -> tuple[list, Any]:
        variables = [v.value for v in impl.module.trainable_variables]
        with tf.GradientTape() as tape:
            summed, count = impl.loss({impl.input_key: x, labels_key(impl): y}, training=True)
        # The embedding's gradient arrives as IndexedSlices: densified (summing repeated rows).
        return [tf.convert_to_tensor(g) for g in tape.gradient(summed, variables)], count

    if execution is not Execution.EAGER:
        grad = tf.function(grad, jit_compile=execution is Execution.XLA)

    def fn(x: Any, y: Any) -> tuple[list[np.ndarray], float]:
        grads, count = grad(tf.convert_to_tensor(x), tf.convert_to_tensor(y))
        return [np.asarray(g.numpy(), np.float32) for g in grads], float(count)

    return fn


GRADIENTS = {"jax": _jax_gradients, "torch": _torch_gradients, "tensorflow": _tf_gradients}


class JaxDeviceProbe:
    """JAX's device allocator (``Device.memory_stats``): bytes in use and at peak; the peak cannot be reset."""

    kind = "jax memory_stats"

    def _stats(self) -> dict[str, int]:
        import jax

        return jax.devices()[0].memory_stats() or {}

    def current(self) -> int | None:
        return self._stats().get("bytes_in_use")

    def peak(self) -> int | None:
        return self._stats().get("peak_bytes_in_use")

    def reset_peak(self) -> bool:
        return False
