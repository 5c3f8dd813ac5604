"""Writing a file so that a reader never sees half of it; a temporary folder that never outlives its process."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def write_json(path: Path, data: Any, **dumps: Any) -> None:
    """``data`` as JSON at ``path``, written beside it first and renamed into place (atomic on one file system);
    ``dumps``: :func:`json.dumps`' options. The temporary's name holds the process id, so two writers never share
    it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, **dumps))
    os.replace(tmp, path)


_JANITOR = ("trap '' TERM INT HUP; cat >/dev/null; "
            'for _ in 1 2 3 4 5; do rm -rf -- "$BAKEOFF_TEMPORARY" 2>/dev/null; '
            '[ -e "$BAKEOFF_TEMPORARY" ] || exit 0; sleep 1; done')
"""The janitor of :func:`temporary_folder`: waits for the end of its standard input, then removes the folder (again,
a few times, while a dying trial process may still be writing into it), named in its environment, not its command
line: a search for the processes of a trial by its folder finds the trial's alone. It ignores the signals that end
a job step or a terminal (``scancel`` sends SIGTERM to every process of the step, this one included), so that it
outlives its owner by the moment it takes to remove the folder, and no longer: its input ends with the owner."""


@contextlib.contextmanager
def temporary_folder(prefix: str, parent: Path | None = None) -> Iterator[str]:
    """A temporary folder, as :class:`tempfile.TemporaryDirectory` makes it (in ``parent``, by default the
    system's), removed however this process ends:
    when it is killed (``kill -9``, an out-of-memory kill) and runs no clean-up of its own, a janitor removes it.

    The janitor is a shell of its own session (a Ctrl-C meant for bakeoff leaves it be) reading a pipe whose only
    writer is this process: the kernel closes it when this process dies, however it dies, and the janitor, reading
    its end, removes the folder. (Not the trial's death signal: the trial is killed with bakeoff, and sweeping
    dead runs' folders at the next start would leave them until a next run that may never come.) Where no shell
    can be started, the folder is only removed by this process.
    """
    read, write = os.pipe()  # neither end is inherited by the trial processes (PEP 446)
    janitor = None
    try:
        with tempfile.TemporaryDirectory(prefix=prefix, dir=parent) as folder:
            with contextlib.suppress(OSError):
                janitor = subprocess.Popen(["/bin/sh", "-c", _JANITOR, "bakeoff-janitor"], stdin=read,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                           start_new_session=True,
                                           env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                                "BAKEOFF_TEMPORARY": folder})
            os.close(read)
            read = -1
            yield folder
    finally:
        if read >= 0:
            os.close(read)
        os.close(write)  # the folder is gone: the janitor finds nothing to remove, and ends
        if janitor is not None:
            janitor.wait()


def owned_prefix(prefix: str) -> str:
    """``prefix`` with this process's id: the folders :func:`sweep_orphans` can tell the owner of."""
    return f"{prefix}{os.getpid()}-"


def sweep_orphans(prefix: str, parent: Path | None = None) -> list[Path]:
    """Remove the folders ``prefix<PID>-*`` in ``parent`` (the system's temporary folder by default) whose process
    ``PID`` is gone: what a janitor could not remove because it was killed with its owner (a Slurm step's end
    kills every process of the step, the janitor's session included). Folders of live processes, and folders whose
    name holds no process id, are left. Returns those removed."""
    import shutil

    parent = Path(parent or tempfile.gettempdir())
    removed = []
    for folder in parent.glob(f"{prefix}*-*"):
        pid = folder.name.removeprefix(prefix).split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)) or not folder.is_dir():
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (on any POSIX system, not only where ``/proc`` is)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True
