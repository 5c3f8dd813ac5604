"""Memory probes: what a trial holds after import and build, what training adds, and the whole trial's peak.

A probe reads the memory in use now, the peak since its last reset, and resets that peak, so the training loop
can take the peak over training steps alone (evaluation excluded) and the baseline before them. The CPU probe
here reads the process's resident set; engines on a GPU supply their framework allocator's counters instead.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path
from typing import Protocol


class MemoryProbe(Protocol):
    kind: str

    def current(self) -> int | None:
        """Bytes in use now (``None`` when the probe cannot tell)."""

    def peak(self) -> int | None:
        """Peak bytes since the last :meth:`reset_peak` (or since the process started)."""

    def reset_peak(self) -> bool:
        """Start a new peak from the current use; ``False`` when this probe cannot reset."""


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class RssProbe:
    """Resident set size of this process.

    Linux: ``VmRSS`` now and ``VmHWM`` (the high-water mark), reset by writing 5 to ``/proc/self/clear_refs``.
    Elsewhere: ``getrusage``'s ``ru_maxrss`` as the peak (bytes on macOS, KiB on Linux and the BSDs), which cannot
    be reset, and no current reading; the training increment is then reported missing rather than guessed.
    """

    kind = "rss"

    def __init__(self) -> None:
        self._linux = Path("/proc/self/status").exists()

    def current(self) -> int | None:
        kib = _status_kib("VmRSS") if self._linux else None
        return kib * 1024 if kib is not None else None

    def peak(self) -> int | None:
        if self._linux and (kib := _status_kib("VmHWM")) is not None:
            return kib * 1024
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return maxrss if sys.platform == "darwin" else maxrss * 1024

    def reset_peak(self) -> bool:
        if not self._linux:
            return False
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            return False
        return True
