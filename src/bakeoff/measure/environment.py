"""The machine fingerprint kept with every result (no framework imported here)."""

from __future__ import annotations

import importlib
import os
import platform
import shutil
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from bakeoff.core import frameworks
from bakeoff.core.contract import Placement


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


def cuda_build(framework: str) -> bool:
    """Whether ``framework``'s installed build can use an NVIDIA GPU, read from package metadata (no import) by its
    record's probes (``cuda_build()`` in its folder's ``probes.py``); False for a framework without probes."""
    probes = frameworks.get(framework).probes if framework in frameworks.FRAMEWORKS else ""
    return bool(probes) and importlib.import_module(probes).cuda_build()


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


def local_rank(environ: Mapping[str, str] | None = None) -> int:
    """This rank's index among its trial's ranks on its machine, the GPU it takes: the launcher's local rank
    (:class:`bakeoff.core.contract.Placement`, a member that is one rank) plus torchrun's ``LOCAL_RANK`` (a rank
    among its agent's ranks; 0 for a one-process agent); 0 outside a group."""
    environ = os.environ if environ is None else environ
    return (Placement.read(environ).local_rank or 0) + int(environ.get("LOCAL_RANK") or 0)


OTHER_WORK_SHARE = 0.25
"""The share of a trial's cores other processes may use during its steady steps before the trial counts as
measured on a busy machine: a quarter of the cores taken from a trial whose thread pools are sized to them skews
its steps by tens of percent. Flagged in the report and verdict; ``bakeoff run --retry-busy`` measures such trials
again. (On Linux a trial, in a session of its own, gets about half a contested core whatever else runs there: the
scheduler shares a core between sessions first.)"""


def busy_seconds(cpus: set[int] | None = None) -> float | None:
    """CPU seconds the given CPUs (default: those this process may run on) have spent busy since boot, whoever ran
    on them (``/proc/stat``: all but idle and iowait); None where it cannot be read."""
    cpus = cpus if cpus is not None else (os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None)
    try:
        with open("/proc/stat") as f:
            lines = [line.split() for line in f if line.startswith("cpu") and line[3:4].isdigit()]
    except OSError:
        return None
    ticks = 0
    for name, *fields in lines:
        if cpus is None or int(name[3:]) in cpus:
            values = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
            ticks += sum(values) - values[3] - values[4]
    return ticks / os.sysconf("SC_CLK_TCK")


class CpuSharing:
    """Who used this trial's cores while its steady steps ran: each step is bracketed by :meth:`begin` and
    :meth:`end` (outside its timed region); the sums give the cores busy, this process's own share, and the rest,
    other processes' (another trial, a build, a browser). Kernel CPU accounting is in clock ticks (10 ms), so a
    single short step is coarse, and a trial's steady steps together are not."""

    def __init__(self) -> None:
        self.busy = self.own = self.wall = 0.0
        self.cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None  # read once, not per step
        self.readable = busy_seconds(self.cpus) is not None
        self._start: tuple[float, float, float] | None = None

    def begin(self) -> None:
        if self.readable:
            self._start = (busy_seconds(self.cpus) or 0.0, time.process_time(), time.perf_counter())

    def end(self) -> None:
        if self._start is not None:
            busy, own, wall = busy_seconds(self.cpus) or 0.0, time.process_time(), time.perf_counter()
            self.busy += busy - self._start[0]
            self.own += own - self._start[1]
            self.wall += wall - self._start[2]
            self._start = None

    def figures(self) -> dict[str, Any]:
        """``{"cores", "cores_busy", "own_cores", "other_cores", "other_share", "seconds"}`` over the bracketed
        steps (``other_share``: other processes' cores over the trial's), or why not."""
        if not self.readable:
            return {"missing": "/proc/stat cannot be read here: other processes' CPU use is not measured"}
        if self.wall <= 0:
            return {"missing": "no steady steps were timed"}
        cores, other = len(self.cpus) if self.cpus else usable_cores(), max(0.0, (self.busy - self.own) / self.wall)
        return {"cores": cores, "cores_busy": self.busy / self.wall, "own_cores": self.own / self.wall,
                "other_cores": other, "other_share": other / cores, "seconds": self.wall}


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
        "host": platform.node(),  # which machine of a cluster ran the trial (executors spread them)
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
