"""The disk a results store lives on (:mod:`bakeoff.results.store`): the kind of file system, which decides its
journal (write-ahead on a local disk, the rollback journal on a network file system, where WAL's shared-memory index
does not work across machines: https://www.sqlite.org/wal.html), and a full disk told as such, naming the mount point
and what to free, rather than as SQLite's I/O error."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

NETWORK_FILE_SYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs",
                        "9p", "afs", "panfs", "wekafs", "fuse.sshfs", "fuse.ceph", "fuse.glusterfs", "fuse.s3fs",
                        "fuse.gcsfuse", "fuse.juicefs")
"""File systems whose files other machines share: a store there keeps a rollback journal, not WAL."""


def file_system(path: Path, mountinfo: str | None = None) -> str:
    """The type of the file system holding ``path`` (``ext4``, ``nfs4``; '' where it cannot be read: not Linux),
    from the longest mount point above it in ``/proc/self/mountinfo`` (or the ``mountinfo`` text given)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return ""
    target = path.resolve()  # links followed as far as they exist: a store's folder may not exist yet
    best, kind = -1, ""
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        point = Path(fields[4].replace("\\040", " "))
        after = line.split(" - ", 1)[1].split()
        if (target == point or point in target.parents) and len(point.parts) > best and after:
            best, kind = len(point.parts), after[0]
    return kind


def journal_mode(path: Path) -> str:
    """``wal`` for a store on a local disk, ``delete`` (the rollback journal) on a network file system."""
    return "delete" if file_system(path) in NETWORK_FILE_SYSTEMS else "wal"


SPACE_NEEDED_MB = 5
"""What a store's writes may need on its disk before SQLite can make room again: its journal grows until a
checkpoint, at 1,000 pages (4 MiB at SQLite's default page), beside WAL's 32 KiB index and a trial's rows."""


FULL_BELOW = 2**20
"""Free bytes under which an I/O error of SQLite's is a full disk: its largest single write, the WAL index's first
32 KiB, fits in far less (SQLite reports a full disk as ``disk I/O error`` when it cannot grow that index)."""


def mount_point(path: Path) -> Path:
    """The mount point of the file system holding ``path`` (the nearest existing folder above it, if it is not)."""
    path = path.resolve()
    while not path.exists():
        path = path.parent
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def no_space(path: Path, exc: sqlite3.Error) -> str | None:
    """"no space left on MOUNT (F MB free), free N MB or more there" when SQLite's error ``exc`` on the store at
    ``path`` is its disk being full (``SQLITE_FULL``, or an I/O error with under :data:`FULL_BELOW` bytes free
    there); None otherwise."""
    name = getattr(exc, "sqlite_errorname", "")
    if not (name == "SQLITE_FULL" or name.startswith("SQLITE_IOERR")):
        return None
    try:
        disk = os.statvfs(path.parent if path.parent.exists() else mount_point(path))
    except OSError:
        return None
    free = disk.f_bavail * disk.f_frsize
    if name != "SQLITE_FULL" and free >= FULL_BELOW:
        return None
    return f"no space left on {mount_point(path)} ({free / 1e6:.1f} MB free), free {SPACE_NEEDED_MB} MB or more there"
