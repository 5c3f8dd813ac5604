"""What Paddle's settings and build are, read from it rather than assumed (:mod:`bakeoff.measure.numerics`,
:func:`bakeoff.measure.environment.cuda_build`). Imports Paddle only when a reading is asked for."""

from __future__ import annotations

from typing import Any

from bakeoff.measure import environment

TF32_FLAGS = ("FLAGS_allow_tf32_cublas", "FLAGS_allow_tf32_cudnn")
"""Paddle's switches for TF32 in cuBLAS and cuDNN (both on by default in CUDA builds; a CPU build has neither)."""

CUDA_DISTS = ("paddlepaddle-gpu",)
"""Packages that install a CUDA build of Paddle (the ``paddlepaddle`` wheel is CPU only)."""


def flag(name: str) -> Any:
    """The value of Paddle flag ``name``, or None where this build has no such flag (``paddle.get_flags`` raises
    for a flag it was not compiled with: the CUDA ones in a CPU build)."""
    import paddle

    try:
        return paddle.get_flags([name])[name]
    except (ValueError, RuntimeError):
        return None


def tf32() -> dict[str, Any]:
    """The TF32 flags as read (``None``: not in this build, so nothing can use TF32)."""
    settings = {name.removeprefix("FLAGS_"): flag(name) for name in TF32_FLAGS}
    return {"tf32": any(bool(v) for v in settings.values()), "tf32_settings": settings}


def cuda_build() -> bool:
    """Whether the installed build can use an NVIDIA GPU, from package metadata (no import): only the
    ``paddlepaddle-gpu`` wheels can."""
    return any(environment.package_version(name) for name in CUDA_DISTS)
