"""One measuring run per machine: two `bakeoff run`s at once each time the other's load into its figures.

Measured before this lock: mnist/torch recorded at 110 examples/s (6,174-9,291 alone) and the autoencoder at 291
(1,517 alone) when two runs shared a 2-core machine, and nothing flagged them. :func:`measuring` holds an exclusive
``flock`` on a machine-wide file for the length of a run; a second run waits for it, saying whose it is, unless
told to run at once (``bakeoff run --concurrent``). The kernel releases the lock when its holder dies, however it
dies, so a crashed run never blocks the next.

``BAKEOFF_MACHINE_LOCK`` names another lock file: runs confined to disjoint cores (the test suite's pytest-xdist
workers, each pinned to its own) do not compete and may each hold their own.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

LOCK_ENV = "BAKEOFF_MACHINE_LOCK"


def lock_path() -> Path:
    """The machine-wide lock file (``BAKEOFF_MACHINE_LOCK`` when set)."""
    return Path(os.environ.get(LOCK_ENV) or Path(tempfile.gettempdir()) / "bakeoff-measuring.lock")


def _open(path: Path) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:  # another user's lock file: a read-only descriptor can hold a flock too
        return os.open(path, os.O_RDONLY)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)  # every user's runs share the machine
    return fd


def holder(path: Path | None = None) -> str:
    """Who holds the lock, as its holder wrote it: "pid 123, store r.sqlite, since 10:02:11"."""
    try:
        info = json.loads((path or lock_path()).read_text() or "{}")
    except (OSError, ValueError):
        return "another bakeoff run"
    if not info:
        return "another bakeoff run"
    return f"pid {info.get('pid')}, store {info.get('store')}, since {info.get('since')}"


@contextlib.contextmanager
def measuring(store: Path | str, wait: bool = True, say: Callable[[str], None] | None = None) -> Iterator[bool]:
    """Hold the machine for a measuring run; yields whether this run holds it. Held by another: wait for it
    (``say`` is told why, once; a signal interrupts the wait), or with ``wait=False`` run at once, saying so."""
    path = lock_path()
    fd = _open(path)
    held = False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = True
        except BlockingIOError:
            who = holder(path)
            if not wait:
                if say is not None:
                    say(f"another bakeoff run is measuring on this machine ({who}); running at once as asked "
                        "(--concurrent): both runs' timings include the other's load")
            else:
                if say is not None:
                    say(f"another bakeoff run is measuring on this machine ({who}); waiting for it to finish, so "
                        f"that neither run's timings include the other's load (--concurrent runs at once; lock "
                        f"{path})")
                fcntl.flock(fd, fcntl.LOCK_EX)
                held = True
        if held:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps({"pid": os.getpid(), "store": str(store),
                                          "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode(), 0)
        yield held
    finally:
        if held:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
        os.close(fd)  # releases the lock
