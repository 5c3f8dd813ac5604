"""Per-trial claims on a store: two `bakeoff run`s on one store never run the same trial at once.

Before: two ``bakeoff run --concurrent`` on one store both ran every trial, and the store silently kept the figures
of whichever stored last (printed 1,012 examples/s, stored 493). Now a run claims each trial before it starts it:
an exclusive ``flock`` on ``claims/<key>.lock`` in the store's folder (:func:`bakeoff.results.store.artifacts_dir`),
held until its result is stored. A trial another run holds is left for later, then waited for; a trial stored by
another run since this one started is taken from the store, not measured again (:func:`bakeoff.run.runner.run`).

The kernel releases a lock when its holder dies, however it dies, so a claim is never stale: a killed run's trials
are free at once (on a network file system, as soon as its lock manager notices). The holder writes who it is
into the file, for the message of the run that finds it taken; the file is removed when its trial is released.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path


class Claims:
    """The trials this process holds in the claims folder ``folder`` of one store, by spec key."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._held: dict[str, int] = {}  # key -> the descriptor holding its lock

    def take(self, key: str, what: str, wait: bool = False) -> str | None:
        """Claim trial ``key`` (described as ``what``, for others' messages): None once held, or who holds it now
        ("pid 123 on host, since 22:01:07") when another process does and ``wait`` is False. With ``wait``, block
        until it is free (a signal interrupts the wait)."""
        if key in self._held:
            return None
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{key}.lock"
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                return holder(path)
            except BaseException:
                os.close(fd)
                raise
            try:
                if os.stat(path).st_ino == os.fstat(fd).st_ino:  # not a file its last holder removed as it let go
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "trial": what,
                                  "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode(), 0)
        self._held[key] = fd
        return None

    @property
    def holding(self) -> bool:
        """Whether this process holds any trial now."""
        return bool(self._held)

    def release(self, key: str) -> None:
        """Let trial ``key`` go (its file removed first, while still held: no one else is inside it)."""
        fd = self._held.pop(key, None)
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.folder / f"{key}.lock")
        os.close(fd)

    def release_all(self) -> None:
        for key in list(self._held):
            self.release(key)


def holder(path: Path) -> str:
    """Who holds a claim, as they wrote it: "pid 123 on gpu-7, since 2026-12-06 22:01:07"."""
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "a process that has not said who it is yet"
    return f"pid {info.get('pid')} on {info.get('host')}, since {info.get('since')}"
