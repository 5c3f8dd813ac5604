"""What a framework's float32 settings are, read from the framework itself rather than assumed: whether float32
matrix products and convolutions may run in TF32 on a GPU that has it (Ampere and later). Trials and deployment
runtimes turn TF32 off (fp32 means fp32 in every framework) and record these readings, so a setting that did not
take is seen in the result. The settings govern GPUs only: on a CPU no framework has TF32, whatever they say.

Each reader imports its framework when called, never at import time, and is called only in a process that has
loaded that framework.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FULL_JAX_PRECISIONS = ("highest", "float32", "F32_F32_F32")
"""``jax_default_matmul_precision`` values that keep float32 products in float32 (None, JAX's default, lets a GPU
use TF32)."""


def torch_tf32() -> dict[str, Any]:
    """PyTorch: ``torch.backends.cuda.matmul.allow_tf32``, ``torch.backends.cudnn.allow_tf32`` and
    ``torch.get_float32_matmul_precision()`` ("highest" is fp32; "high" allows TF32)."""
    import torch

    settings = {"cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
                "cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
                "float32_matmul_precision": torch.get_float32_matmul_precision()}
    tf32 = settings["cuda.matmul.allow_tf32"] or settings["cudnn.allow_tf32"] or \
        settings["float32_matmul_precision"] != "highest"
    return {"tf32": tf32, "tf32_settings": settings}


def tensorflow_tf32() -> dict[str, Any]:
    """TensorFlow: ``tf.config.experimental.tensor_float_32_execution_enabled()``."""
    import tensorflow as tf

    enabled = bool(tf.config.experimental.tensor_float_32_execution_enabled())
    return {"tf32": enabled, "tf32_settings": {"tensor_float_32_execution_enabled": enabled}}


def jax_tf32() -> dict[str, Any]:
    """JAX: ``jax.config.jax_default_matmul_precision`` (None, the default, lets a GPU use TF32)."""
    import jax

    precision = jax.config.jax_default_matmul_precision
    return {"tf32": precision not in FULL_JAX_PRECISIONS, "tf32_settings": {"jax_default_matmul_precision": precision}}


READERS: dict[str, Callable[[], dict[str, Any]]] = {"torch": torch_tf32, "tensorflow": tensorflow_tf32,
                                                     "jax": jax_tf32}
"""The reader of each framework, by the name a Keras backend or a framework record gives it."""


def tf32(framework: str) -> dict[str, Any]:
    """``{"tf32": bool, "tf32_settings": {...}}`` as ``framework`` (torch, tensorflow or jax) reads them now."""
    return READERS[framework]()
