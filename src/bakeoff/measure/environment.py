"""The machine fingerprint kept with every result (no framework imported here)."""

from __future__ import annotations

import os
import platform
import shutil
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from bakeoff import frameworks


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a container's or Slurm's cpuset), which
    its children inherit, else every core the machine reports. Thread counts default to this, so a trial confined
    to some cores does not start more threads than it has cores."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cuda_devices(dev: Path = Path("/dev"), environ: Mapping[str, str] | None = None) -> tuple[int, str]:
    """How many NVIDIA GPUs a trial could see, without importing a framework: the driver's ``/dev/nvidiaN``
    devices, narrowed by ``CUDA_VISIBLE_DEVICES``; and, when none, a sentence saying why."""
    environ = os.environ if environ is None else environ
    found = sorted(p.name for p in dev.glob("nvidia[0-9]*"))
    if not found:
        return 0, f"no NVIDIA GPU on this machine (no {dev}/nvidia0: no GPU, or its driver is not loaded)"
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return len(found), ""
    wanted = [v for v in visible.split(",") if v.strip() and not v.strip().startswith("-")]
    if not wanted:
        return 0, f"CUDA_VISIBLE_DEVICES={visible!r} hides the machine's {len(found)} GPU(s)"
    return min(len(wanted), len(found)), ""


def total_memory() -> int | None:
    """Physical memory of the machine in bytes, when the OS says."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def host_environment() -> dict[str, Any]:
    """CPU, cores, memory, OS, Python, and the versions of the frameworks installed (read from metadata)."""
    mem = total_memory()
    versions = {}
    dists = dict.fromkeys(d for info in frameworks.FRAMEWORKS.values() for d in info.dists)
    for dist in (*dists, "numpy"):
        if (v := package_version(dist)) is not None:
            versions[dist] = v
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "cores_usable": usable_cores(),
        "memory_bytes": mem,
        "os": platform.platform(),
        "python": platform.python_version(),
        "packages": versions,
        "nvidia_smi": shutil.which("nvidia-smi") is not None,
        "thread_env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ},
        # Other work on the machine distorts every timing (thread oversubscription): recorded, so it can be seen.
        "load_average_1m_at_start": round(os.getloadavg()[0], 2),
    }
