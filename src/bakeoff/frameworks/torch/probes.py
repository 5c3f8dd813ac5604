"""What PyTorch's settings and build are, read from it rather than assumed (:mod:`bakeoff.measure.numerics`,
:func:`bakeoff.measure.environment.cuda_build`). Imports PyTorch only when a reading is asked for."""

from __future__ import annotations

from typing import Any

from bakeoff.measure import environment


def tf32() -> dict[str, Any]:
    """``torch.backends.cuda.matmul.allow_tf32``, ``torch.backends.cudnn.allow_tf32`` and
    ``torch.get_float32_matmul_precision()`` ("highest" is fp32; "high" allows TF32)."""
    import torch

    settings = {"cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
                "cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
                "float32_matmul_precision": torch.get_float32_matmul_precision()}
    tf32 = settings["cuda.matmul.allow_tf32"] or settings["cudnn.allow_tf32"] or \
        settings["float32_matmul_precision"] != "highest"
    return {"tf32": tf32, "tf32_settings": settings}


def cuda_build() -> bool:
    """Whether the installed build can use an NVIDIA GPU, from package metadata (no import): PyTorch's CPU wheels
    carry a ``+cpu`` local version."""
    version = environment.package_version("torch")
    return version is not None and not version.endswith("+cpu")
