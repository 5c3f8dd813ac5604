"""Tie a process to its parent's life: when the parent dies, however it dies, the kernel kills the process.

``python -m bakeoff.core.tether PARENT_PID COMMAND...`` asks Linux for ``SIGKILL`` on its parent's death
(``prctl(PR_SET_PDEATHSIG)``, kept across ``exec``), checks the parent is still ``PARENT_PID`` (it may have died
before the request), then becomes ``COMMAND``. The runner starts every member of a trial this way and each trial
process asks the same for itself, so when bakeoff itself is killed (``kill -9``, an out-of-memory kill, a crash)
its members die, a launcher's death takes its ranks (torchrun starts them in sessions of their own), and no trial
trains on, unowned, through the next run's timings. Where ``prctl`` is missing (not Linux) the command runs as is.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_parent() -> bool:
    """Ask for SIGKILL when this process's parent dies; whether the kernel agreed. A parent already gone (this
    process adopted by init while it started) ends this process at once."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        agreed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if agreed and os.getppid() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return agreed


def command(argv: list[str]) -> list[str]:
    """``argv`` started tethered to this process."""
    return [sys.executable, "-m", "bakeoff.core.tether", str(os.getpid()), *argv]


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        sys.stderr.write("usage: python -m bakeoff.core.tether PARENT_PID COMMAND [ARG...]\n")
        return 2
    die_with_parent()
    if os.getppid() != int(argv[0]):  # the parent died before the request: nothing is left to serve
        return 1
    os.execvp(argv[1], argv[1:])
    return 127  # not reached: execvp raises on failure


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
