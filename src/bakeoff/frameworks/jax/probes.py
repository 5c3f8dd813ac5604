"""What JAX's settings and build are, read from it rather than assumed (:mod:`bakeoff.measure.numerics`,
:func:`bakeoff.measure.environment.cuda_build`). Imports JAX only when a reading is asked for."""

from __future__ import annotations

from typing import Any

from bakeoff.measure import environment

FULL_PRECISIONS = ("highest", "float32", "F32_F32_F32")
"""``jax_default_matmul_precision`` values that keep float32 products in float32 (None, JAX's default, lets a GPU
use TF32)."""

CUDA_PLUGINS = ("jax-cuda12-plugin", "jax-cuda13-plugin")
"""Packages whose presence makes JAX able to use an NVIDIA GPU, where its own wheel cannot."""


def tf32() -> dict[str, Any]:
    """``jax.config.jax_default_matmul_precision`` (None, the default, lets a GPU use TF32)."""
    import jax

    precision = jax.config.jax_default_matmul_precision
    return {"tf32": precision not in FULL_PRECISIONS, "tf32_settings": {"jax_default_matmul_precision": precision}}


def cuda_build() -> bool:
    """Whether the installed build can use an NVIDIA GPU, from package metadata (no import): JAX needs a CUDA
    plugin."""
    return any(environment.package_version(name) for name in CUDA_PLUGINS)
