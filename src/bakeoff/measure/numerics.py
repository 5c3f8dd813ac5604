"""What a framework's float32 settings are, read from the framework itself rather than assumed: whether float32
matrix products and convolutions may run in TF32 on a GPU that has it (Ampere and later). Trials and deployment
runtimes turn TF32 off (fp32 means fp32 in every framework) and record these readings, so a setting that did not
take is seen in the result. The settings govern GPUs only: on a CPU no framework has TF32, whatever they say.

Each framework's reader is ``tf32()`` in the module its record names (``probes``: ``probes.py`` in its folder); it
imports its framework when called, never at import time, and is called only in a process that has loaded that
framework.
"""

from __future__ import annotations

import importlib
from typing import Any

from bakeoff.core import frameworks


def tf32(framework: str) -> dict[str, Any]:
    """``{"tf32": bool, "tf32_settings": {...}}`` as ``framework`` (a framework with probes: the name a Keras
    backend or a framework record gives it) reads them now."""
    probes = frameworks.get(framework).probes
    if not probes:
        raise KeyError(f"{framework} reads no numerics of its own; "
                       f"those that do: {', '.join(n for n, i in frameworks.FRAMEWORKS.items() if i.probes)}")
    return importlib.import_module(probes).tf32()
