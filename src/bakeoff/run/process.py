"""A trial's process group: started together, given one deadline, killed together, whatever ends the run.

Signals: inside :func:`interruptible` (the runner and the batch-size search enter it), SIGINT and SIGTERM raise
:class:`Interrupted`. Each process of a trial runs in its own session, owned by :func:`process_groups` while it
runs, with every session its descendants open (torchrun starts each rank in a session of its own, so killing
torchrun's group alone leaves the ranks training): a :class:`Family`. Whatever ends the block, every process of
the family is killed (an exception: SIGTERM, then SIGKILL after :data:`KILL_GRACE_S`, before it propagates).
:func:`hold` keeps a signal from interrupting a result while it is written; it is raised after.

The deadline and memory cap of a trial are :func:`bakeoff.run.launchers.run_group`'s; :func:`read_oom_kills`
reads the kernel's OOM-kill counter of this process's memory cgroup, the evidence that a SIGKILL was the kernel's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from bakeoff.core import tether

KILL_GRACE_S = 3.0
"""Seconds an interrupted trial's process group gets between SIGTERM and SIGKILL."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached an :func:`interruptible` run; the running trial (if any) was killed, unrecorded."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        self.exit_code = 128 + signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM
        self.stopped: str | None = None  # what was running when it came, e.g. "mnist/tiny torch/eager seed 1"
        super().__init__(self.signal_name)


class _SignalGate:
    """Where SIGINT and SIGTERM go inside :func:`interruptible`: raised at once as :class:`Interrupted`, or held
    (see :meth:`hold`) while something must not be cut in half.

    ``held`` counts the blocks holding signals now, in any thread: ``bakeoff parity`` starts and ends its probes'
    process groups from a thread pool. Each change is made under a lock, since ``held += 1`` is a read and a write
    that two threads can interleave, losing one; a count left at 1 would hold every later Ctrl-C for good, one left
    at -1 likewise (it is truthy). The handler (which Python runs in the main thread) only reads it, so it never
    waits on the lock the main thread may itself hold.
    """

    def __init__(self) -> None:
        self.held = 0
        self.pending: int | None = None
        self._lock = threading.Lock()

    def handler(self, signum: int, frame: object) -> None:
        if self.held:
            self.pending = self.pending or signum
            return
        raise Interrupted(signum)

    def enter(self) -> None:
        """Start holding signals (one more block holds them)."""
        with self._lock:
            self.held += 1

    def leave(self) -> None:
        """Stop holding signals for one block (they pass when none holds them); see :meth:`check`."""
        with self._lock:
            self.held -= 1

    def check(self) -> None:
        """Raise the signal that came while held, if any (in one thread only, should several check at once)."""
        with self._lock:
            if self.held or self.pending is None:
                return
            signum, self.pending = self.pending, None
        raise Interrupted(signum)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Hold signals during the block; one that came meanwhile is raised when the block ends normally (when
        the block raises, it stays pending for the next :meth:`check`)."""
        self.enter()
        try:
            yield
        finally:
            self.leave()
        self.check()


_GATE = _SignalGate()
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into :class:`Interrupted` during the block (re-entrant; main thread only).

    A signal the process inherited as ignored (``nohup``, a non-interactive shell's ``&``) stays ignored.
    """
    if threading.current_thread() is not threading.main_thread() or any(
            signal.getsignal(s) == _GATE.handler for s in _SIGNALS):
        yield
        return
    previous = {s: signal.getsignal(s) for s in _SIGNALS}
    for s, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(s, _GATE.handler)
    try:
        yield
        _GATE.check()
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        _GATE.pending = None


def processes() -> list[tuple[int, int, int, str]]:
    """``(pid, parent pid, session id, state)`` of every process in ``/proc`` (state ``Z``: exited, not reaped)."""
    table = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        except OSError:
            continue
        table.append((int(entry.name), int(fields[1]), int(fields[3]), fields[0]))
    return table


class Family(list[subprocess.Popen]):
    """The processes :func:`process_groups` started, and the sessions they and their descendants run in.

    :meth:`discover` adds the sessions of every descendant; a rank keeps its session when its launcher dies and it
    is adopted by init, so what was discovered once is found and killed however the tree has changed since.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sessions: set[int] = set()

    def discover(self) -> set[int]:
        """The family's sessions now: the members', and those of any process descended from a process in them."""
        table = processes()
        ours = os.getsid(0)
        inside = {pid for pid, _, sid, _ in table if sid in self.sessions or pid in {p.pid for p in self}}
        grown = True
        while grown:
            children = {pid for pid, ppid, _, _ in table if ppid in inside} - inside
            inside |= children
            grown = bool(children)
        self.sessions |= {sid for pid, _, sid, _ in table if pid in inside and sid != ours}
        return self.sessions

    def living(self) -> list[int]:
        """Pids of the family's processes that have not exited (zombies excluded)."""
        return [pid for pid, _, sid, state in processes() if sid in self.sessions and state != "Z"]

    def signal(self, signum: int) -> None:
        for pid in self.living():
            with contextlib.suppress(ProcessLookupError, PermissionError):  # gone, or changed user: not ours
                os.kill(pid, signum)


def kill_groups(procs: Family, grace_s: float) -> None:
    """Kill every process of the family (its sessions discovered first): SIGTERM to all, then SIGKILL to whatever
    is left after ``grace_s`` (at once when ``grace_s`` is 0). Reaps ``procs``."""
    procs.discover()
    if grace_s > 0:
        procs.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        # Wait for every process of the family, not only the members: a rank a launcher started may outlive it.
        while time.monotonic() < deadline and (any(p.poll() is None for p in procs) or procs.living()):
            time.sleep(0.05)
    for _ in range(3):  # a process forked during the kill is in a known session, or a child of one
        procs.discover()
        procs.signal(signal.SIGKILL)
        for proc in procs:
            proc.wait()
        if not procs.living():
            break
        time.sleep(0.05)


@contextlib.contextmanager
def process_groups(commands: Sequence[tuple[Sequence[str], dict[str, Any]]], what: str) -> Iterator[Family]:
    """Start each ``(command, Popen keyword arguments)`` in a new session and own the :class:`Family` during the
    block (call its :meth:`Family.discover` now and then, so a rank is known before its launcher could die).

    An exception leaving the block (:class:`Interrupted`, Ctrl-C, anything) kills every process of the family first
    (SIGTERM, SIGKILL after :data:`KILL_GRACE_S`); when the block ends normally, whatever is left of it (a rank a
    launcher started, a server) is killed with SIGKILL. So no trial, probe or server outlives its turn. ``what``
    names the trial for the interrupt message.
    """
    procs = Family()
    _GATE.enter()  # a signal during the start is raised below, once the groups are ours to kill
    try:
        for command, popen in commands:  # each tethered: killed by the kernel if this process dies first
            procs.append(subprocess.Popen(tether.command(list(command)), start_new_session=True, **popen))
            procs.sessions.add(procs[-1].pid)  # a new session's id is its leader's pid
    except BaseException:
        kill_groups(procs, grace_s=0)
        raise
    finally:
        _GATE.leave()
    try:
        _GATE.check()
        yield procs
    except BaseException as exc:
        with _GATE.hold():
            kill_groups(procs, KILL_GRACE_S)
            if isinstance(exc, KeyboardInterrupt):
                _GATE.pending = None  # already stopping: a second Ctrl-C during the grace adds nothing
        if isinstance(exc, Interrupted) and exc.stopped is None:
            exc.stopped = what
        raise
    with _GATE.hold():
        kill_groups(procs, grace_s=0)


@contextlib.contextmanager
def process_group(command: Sequence[str], what: str, **popen: Any) -> Iterator[subprocess.Popen]:
    """:func:`process_groups` of one command."""
    with process_groups([(command, popen)], what) as (proc,):
        yield proc


def proc_status(pid: int, field: str) -> int:
    """A size field of ``/proc/PID/status`` in bytes (``VmRSS``, ``VmHWM``); 0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


@dataclasses.dataclass(frozen=True)
class OomKills:
    """The kernel's OOM-kill counter of a memory cgroup: ``count`` read from ``source`` (None: ``source`` says
    why nothing could be read)."""

    count: int | None
    source: str


def _oom_counter_files() -> list[Path]:
    """Where this process's memory cgroup keeps its OOM-kill counter: its own cgroup first, then its ancestors
    (cgroup v2 ``memory.events``, v1 ``memory.oom_control``; both count kills in the cgroups below too)."""
    paths: dict[str, str] = {}  # "v2" | "v1" -> this process's cgroup path
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and not controllers:
            paths["v2"] = path
        elif "memory" in controllers.split(","):
            paths["v1"] = path
    files: list[Path] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        tail = fields[fields.index("-") + 1:]  # fstype, source, super options
        if tail[0] == "cgroup2" and "v2" in paths:
            version, name = "v2", "memory.events"
        elif tail[0] == "cgroup" and "v1" in paths and "memory" in tail[2].split(","):
            version, name = "v1", "memory.oom_control"
        else:
            continue
        root, mount = PurePosixPath(fields[3]), Path(fields[4])
        path = PurePosixPath(paths[version])
        directory = mount / path.relative_to(root) if path.is_relative_to(root) else mount
        while True:
            files.append(directory / name)
            if directory == mount:
                break
            directory = directory.parent
    return files


def read_oom_kills() -> OomKills:
    """How many processes the kernel's out-of-memory killer has killed in this process's memory cgroup."""
    try:
        files = _oom_counter_files()
    except (OSError, ValueError, IndexError) as exc:
        return OomKills(None, f"cannot read this process's cgroup ({exc})")
    for path in files:
        try:
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return OomKills(int(value), str(path))
        except (OSError, ValueError):
            continue
    return OomKills(None, "no cgroup OOM-kill counter is readable (memory.events or memory.oom_control)")


def hold() -> contextlib.AbstractContextManager[None]:
    """While in this block, SIGINT / SIGTERM wait; they are raised as :class:`Interrupted` when it ends."""
    return _GATE.hold()
