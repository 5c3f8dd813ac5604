"""Energy a trial's training steps used, read from the machine's own cumulative counters (no framework imported).

Two kinds of counter, each read where the machine exposes it, never estimated:

* **RAPL** (Intel, and AMD since Zen through the same interface): ``/sys/class/powercap/*rapl*/…/energy_uj``, in
  microjoules, for the domains named ``package-N`` (each CPU socket) and ``dram`` (its memory), top-level zones and
  subzones alike. ``psys`` (the whole platform) and the ``core``/``uncore`` subzones are left out: they contain or
  are contained in a package, so counting them too would count the same joules twice. RAPL is package-wide: every
  process on the socket is in it, not only the trial's. Each counter wraps to 0 after ``max_energy_range_uj``; a
  reading below the previous one is a wrap, added back and counted (:attr:`Counter.wraps`). Linux made
  ``energy_uj`` readable by root only in 2020 (CVE-2020-8694): a counter that exists but cannot be read is named
  with that reason, not silently dropped.
* **NVML** (NVIDIA, Volta and newer): ``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded
  (64 bits: it does not wrap), for the GPUs the trial uses. ``pynvml`` (the ``nvidia-ml-py`` package) is imported
  only when a trial runs on CUDA.

:class:`EnergyMeter` brackets each training step at the same points as the step clock (outside its timed region,
as :class:`bakeoff.measure.environment.CpuSharing` does): the steady steps' joules give energy per step and per
example; every step's joules give the training energy at each point of the quality curve, hence energy to target.
Where no counter can be read the meter says why (:data:`NOT_MEASURED`), and the trial has no energy figure.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

POWERCAP_ROOT = Path("/sys/class/powercap")
POWERCAP_ROOT_ENV = "BAKEOFF_POWERCAP_ROOT"
"""Where the RAPL zones are read from instead of :data:`POWERCAP_ROOT` (tests point it at a fake tree)."""

NOT_MEASURED = "no RAPL or NVML counters here"
"""Why a trial has no energy figure on a machine with neither counter: shown as ``energy: not measured — …``."""

RAPL_DOMAINS = ("package-", "dram")
"""The RAPL domains counted, by name prefix: the sockets and their memory; never ``psys``, ``core`` or ``uncore``."""

ROOT_ONLY = "permission denied (Linux makes energy_uj readable by root only since 2020)"


@dataclasses.dataclass
class Counter:
    """One cumulative energy counter: its domain's name, how to read it (raw units), joules per unit, and the
    value after which it wraps to 0 (``None``: it does not)."""

    domain: str  # "rapl package-0", "rapl package-0 dram", "nvml gpu 0 (NVIDIA H100 80GB HBM3)"
    read: Callable[[], int]
    joules_per_unit: float
    wrap_at: int | None = None
    wraps: int = 0  # wrap-arounds seen

    def delta(self, before: int, after: int) -> float:
        """Joules between two readings, a wrap-around added back (and counted)."""
        change = after - before
        if change < 0 and self.wrap_at:
            self.wraps += 1
            change += self.wrap_at
        return max(0, change) * self.joules_per_unit


def _read_int(path: Path) -> Callable[[], int]:
    return lambda: int(path.read_text())


def _why(exc: OSError | ValueError) -> str:
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM):
        return ROOT_ONLY
    return exc.strerror or str(exc) if isinstance(exc, OSError) else f"not a number ({exc})"


def rapl_counters(root: Path | None = None,
                  environ: Mapping[str, str] | None = None) -> tuple[list[Counter], dict[str, str]]:
    """The readable RAPL package and DRAM counters under ``root`` (default :data:`POWERCAP_ROOT`, or
    ``$BAKEOFF_POWERCAP_ROOT``), and the domains found but unreadable, with why.

    Powercap lists every zone at its top (``intel-rapl:0``, its subzone ``intel-rapl:0:2``) and again inside its
    parent; a zone is taken once, by its id. A domain reached by two interfaces (``intel-rapl-mmio:0`` is the MSR
    interface's ``package-0`` again) is taken once too, from the MSR one.
    """
    if root is None:
        root = Path((os.environ if environ is None else environ).get(POWERCAP_ROOT_ENV) or POWERCAP_ROOT)
    zones: dict[str, Path] = {}
    for pattern in ("*rapl*", "*rapl*/*rapl*", "*rapl*/*rapl*/*rapl*"):
        for zone in sorted(root.glob(pattern)):
            if zone.name not in zones and (zone / "name").is_file():
                zones[zone.name] = zone

    def name(zone_id: str) -> str:
        return (zones[zone_id] / "name").read_text().strip() if zone_id in zones else ""

    counters: list[Counter] = []
    unreadable: dict[str, str] = {}
    taken: set[str] = set()
    for zone_id in sorted(zones, key=lambda z: ("mmio" in z, z)):
        own = name(zone_id)
        if not own.startswith(RAPL_DOMAINS):
            continue  # psys (the platform, which holds the packages), core and uncore (inside a package)
        parent = name(zone_id.rsplit(":", 1)[0]) if zone_id.count(":") >= 2 else ""
        domain = " ".join(p for p in ("rapl", parent, own) if p)
        if domain in taken:
            continue
        taken.add(domain)
        energy = zones[zone_id] / "energy_uj"
        try:
            int(energy.read_text())
            wrap = int((zones[zone_id] / "max_energy_range_uj").read_text())
        except (OSError, ValueError) as exc:
            unreadable[domain] = f"{energy}: {_why(exc)}"
            continue
        counters.append(Counter(domain, _read_int(energy), 1e-6, wrap or None))
    return counters, unreadable


def nvml_indices(gpus: Sequence[int], environ: Mapping[str, str] | None = None) -> list[int | str]:
    """NVML's handles for the trial's CUDA devices ``gpus`` (as the framework numbers them): NVML ignores
    ``CUDA_VISIBLE_DEVICES``, so a visible index is mapped through it (an index, or a ``GPU-…`` UUID)."""
    environ = os.environ if environ is None else environ
    visible = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible:
        return list(gpus)
    return [int(visible[g]) if visible[g].isdigit() else visible[g] for g in gpus if g < len(visible)]


def nvml_counters(gpus: Sequence[int], nvml: Any = None,
                  environ: Mapping[str, str] | None = None) -> tuple[list[Counter], dict[str, str]]:
    """The NVML energy counters of the trial's GPUs, and those unreadable with why (no ``pynvml``, a GPU older
    than Volta). ``nvml``: the module (``pynvml``), injected by tests."""
    if not gpus:
        return [], {}
    if nvml is None:
        try:
            import pynvml as nvml  # the nvidia-ml-py package; only on a CUDA trial
        except ImportError:
            return [], {"nvml": "pynvml is not installed (pip install nvidia-ml-py)"}
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - pynvml raises NVMLError subclasses; any failure means no counter
        return [], {"nvml": f"NVML did not start: {exc}"}
    counters: list[Counter] = []
    unreadable: dict[str, str] = {}
    for gpu, index in zip(gpus, nvml_indices(gpus, environ), strict=False):
        try:
            handle = (nvml.nvmlDeviceGetHandleByUUID(index) if isinstance(index, str)
                      else nvml.nvmlDeviceGetHandleByIndex(index))
            name = nvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            domain = f"nvml gpu {gpu} ({name})"
            nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except Exception as exc:  # noqa: BLE001 - NVML_ERROR_NOT_SUPPORTED before Volta, among others
            unreadable[f"nvml gpu {gpu}"] = f"no energy counter: {exc}"
            continue
        counters.append(Counter(domain, lambda h=handle: int(nvml.nvmlDeviceGetTotalEnergyConsumption(h)), 1e-3))
    return counters, unreadable


class EnergyMeter:
    """Joules over bracketed steps: :meth:`begin` before a step's clock starts, :meth:`end` after it stops.

    Every step adds to :attr:`train_j`; steady steps (``end(steady=True)``) also to the steady figures, by domain.
    """

    def __init__(self, counters: Sequence[Counter], unreadable: Mapping[str, str] | None = None,
                 not_read: Mapping[str, str] | None = None) -> None:
        self.counters = list(counters)
        self.unreadable = dict(unreadable or {})  # found, not readable: why
        self.not_read = dict(not_read or {})  # deliberately not read here: why (RAPL read by another rank)
        self.train_j = 0.0
        self.steady_j: dict[str, float] = {c.domain: 0.0 for c in self.counters}
        self.steady_s = 0.0
        self.steady_steps = 0
        self._start: list[int] | None = None

    @classmethod
    def for_trial(cls, gpus: Sequence[int], rapl: bool = True, root: Path | None = None, nvml: Any = None,
                  environ: Mapping[str, str] | None = None) -> EnergyMeter:
        """The meter of a trial that uses the CUDA devices ``gpus`` (none on CPU) and reads RAPL when ``rapl``
        (one process per machine does: the packages are shared by every rank on it)."""
        counters, unreadable = rapl_counters(root, environ) if rapl else ([], {})
        gpu_counters, gpu_unreadable = nvml_counters(gpus, nvml, environ)
        not_read = {} if rapl else {"rapl": "read by local rank 0 of this machine (the packages are shared)"}
        return cls([*counters, *gpu_counters], {**unreadable, **gpu_unreadable}, not_read)

    @property
    def measuring(self) -> bool:
        return bool(self.counters)

    def _read(self) -> list[int] | None:
        try:
            return [c.read() for c in self.counters]
        except (OSError, ValueError):
            return None  # a counter vanished mid-trial: this step is not counted

    def begin(self) -> None:
        if self.counters:
            self._start = self._read()

    def end(self, seconds: float, steady: bool) -> float | None:
        """After a step that took ``seconds`` on the step clock (``steady``: one of the steady steps): its joules,
        None when not measured."""
        if self._start is None:
            return None
        now = self._read()
        if now is None:
            self._start = None
            return None
        joules = {c.domain: c.delta(a, b) for c, a, b in zip(self.counters, self._start, now, strict=True)}
        self._start = None
        self.train_j += sum(joules.values())
        if steady:
            for domain, j in joules.items():
                self.steady_j[domain] += j
            self.steady_s += seconds
            self.steady_steps += 1
        return sum(joules.values())

    def missing(self) -> str:
        """Why there is no energy figure: '' when some counter was read."""
        if self.counters:
            return ""
        if self.unreadable:
            return "; ".join(f"{domain}: {why}" for domain, why in self.unreadable.items())
        if self.not_read:
            return "; ".join(self.not_read.values())
        return NOT_MEASURED

    def figures(self, examples_per_step: int) -> dict[str, Any]:
        """The record kept in the result (:class:`bakeoff.core.result.Energy`): the steady steps' joules in all
        and by domain, per step, per example and as mean power, the wraps seen, what was not read and why."""
        out: dict[str, Any] = {"missing": self.missing(), "domains": dict(self.steady_j),
                               "wraps": sum(c.wraps for c in self.counters), "unreadable": dict(self.unreadable),
                               "not_read": dict(self.not_read)}
        if not self.counters:
            return out
        if self.steady_steps == 0:
            return {**out, "train_j": self.train_j, "missing": "no steady steps were measured"}
        joules = sum(self.steady_j.values())
        return {**out, "steady_j": joules, "steady_s": self.steady_s, "steady_steps": self.steady_steps,
                "per_step_j": joules / self.steady_steps,
                "per_example_j": joules / (self.steady_steps * examples_per_step) if examples_per_step else None,
                "mean_w": joules / self.steady_s if self.steady_s > 0 else None, "train_j": self.train_j}


def describe(record: Any) -> str:
    """One line on a trial's energy (its :class:`bakeoff.core.result.Energy`, None for a result stored before
    bakeoff measured energy): ``energy: not measured — <why>``, or the figures and where they came from."""
    if record is None:
        return "energy: not measured — stored before bakeoff measured energy"
    if record.missing:
        return f"energy: not measured — {record.missing}"
    per_example = record.per_example_j
    figures = [f"{per_example * 1e3:.3g} mJ per training example" if per_example is not None else "",
               f"{record.mean_w:.3g} W" if record.mean_w is not None else "",
               f"{record.to_target_j:.3g} J to target" if record.to_target_j is not None else ""]
    where = ", ".join(record.domains)
    notes = [f"{record.wraps} counter wrap-around{'s' if record.wraps != 1 else ''} added back"] if record.wraps else []
    notes += [f"not read: {domain} ({why})" for domain, why in {**record.unreadable, **record.not_read}.items()]
    return (f"energy: {', '.join(f for f in figures if f)} over {record.steady_steps} steady steps, measured by "
            f"the counters {where}" + (" (RAPL: the whole package, other processes on it included)"
                                        if "rapl" in where else "") + "".join(f"; {n}" for n in notes))
