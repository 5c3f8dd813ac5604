"""What TensorFlow's settings and build are, read from it rather than assumed (:mod:`bakeoff.measure.numerics`,
:func:`bakeoff.measure.environment.cuda_build`). Imports TensorFlow only when a reading is asked for."""

from __future__ import annotations

from typing import Any

from bakeoff.measure import environment


def tf32() -> dict[str, Any]:
    """``tf.config.experimental.tensor_float_32_execution_enabled()``."""
    import tensorflow as tf

    enabled = bool(tf.config.experimental.tensor_float_32_execution_enabled())
    return {"tf32": enabled, "tf32_settings": {"tensor_float_32_execution_enabled": enabled}}


def cuda_build() -> bool:
    """Whether the installed build can use an NVIDIA GPU, from package metadata (no import): ``tensorflow-cpu``
    has no CUDA, ``tensorflow`` may."""
    return environment.package_version("tensorflow") is not None
