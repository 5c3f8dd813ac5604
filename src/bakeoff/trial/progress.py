"""A trial's progress, as its log says it: the training loop writes a line now and then (:class:`Reporter`), and the
parent reads the last one back (:func:`last`) for the heartbeat of a long trial (``… still running: ..., step
120/400``). Framework-free and cheap: the loop asks the clock once a step and writes at most every
:data:`EVERY_S` seconds, off the training clock."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import sys
import time
from pathlib import Path

from bakeoff.core.contract import PROGRESS_S

EVERY_S = PROGRESS_S
"""Seconds between a trial's progress lines, unless its request says another (``BAKEOFF_PROGRESS_S``, read by the
parent: :func:`bakeoff.core.contract.progress_every`)."""
PREFIX = "bakeoff progress:"
_LINE = re.compile(rf"^{PREFIX} step (\d+)/(\d+|\?)", re.MULTILINE)
_TAIL_BYTES = 16_384


@dataclasses.dataclass(frozen=True)
class Progress:
    """How far a trial got: its training ``step`` of ``max_steps`` (None: its budget is in seconds)."""

    step: int
    max_steps: int | None

    def text(self) -> str:
        """``"step 120/400"``, or ``"step 120"`` when the budget has no step count."""
        return f"step {self.step}/{self.max_steps}" if self.max_steps is not None else f"step {self.step}"


class Reporter:
    """Writes ``bakeoff progress: step N/M`` to standard error (the trial's log) at most every ``every_s`` seconds,
    and after the first step (which may compile for long: the heartbeat then knows it is done)."""

    def __init__(self, max_steps: float, every_s: float | None = None) -> None:
        self._max = str(int(max_steps)) if math.isfinite(max_steps) else "?"
        self._every = every_s if every_s is not None else EVERY_S
        self._last = -math.inf

    def step(self, step: int) -> None:
        now = time.monotonic()
        if now - self._last >= self._every or step == 1:
            self._last = now
            sys.stderr.write(f"{PREFIX} step {step}/{self._max}\n")
            sys.stderr.flush()


def last(log: Path) -> Progress | None:
    """The last progress line in the end of ``log``; None when there is none (or no log)."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - _TAIL_BYTES))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    found = _LINE.findall(tail)
    if not found:
        return None
    step, most = found[-1]
    return Progress(int(step), None if most == "?" else int(most))
