"""Which deep-learning frameworks a process has loaded: the guard of "one trial, one process, one framework".

A framework counts as loaded when one of its top-level Python packages is in ``sys.modules`` or one of its shared
libraries is mapped into the process (``/proc/self/maps`` on Linux). Both are checked because a package can load
another framework's native library without importing its Python package, and the reverse.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping

from bakeoff.registry import LOADED_MARKERS


def _mapped_paths() -> list[str]:
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6})
    except OSError:
        return []  # not Linux: the Python modules still tell


def loaded_frameworks(modules: Iterable[str] | None = None,
                      mapped: Iterable[str] | None = None) -> dict[str, dict[str, list[str]]]:
    """``{framework: {"modules": [...], "libraries": [...]}}`` for every framework found loaded.

    Args:
        modules: names of imported modules (default: this process's ``sys.modules``).
        mapped: paths of files mapped into the process (default: this process's ``/proc/self/maps``).
    """
    tops = {name.partition(".")[0] for name in (sys.modules if modules is None else modules)}
    paths = _mapped_paths() if mapped is None else list(mapped)
    found: dict[str, dict[str, list[str]]] = {}
    for framework, (packages, libraries) in LOADED_MARKERS.items():
        hit_modules = sorted(p for p in packages if p in tops)
        hit_libs = sorted({path.rsplit("/", 1)[-1] for path in paths if any(lib in path for lib in libraries)})
        if hit_modules or hit_libs:
            found[framework] = {"modules": hit_modules, "libraries": hit_libs}
    return found


def foreign_frameworks(framework: str, loaded: Mapping[str, Mapping[str, list[str]]]) -> str:
    """A reason naming every framework other than ``framework`` in ``loaded``; empty when there is none."""
    parts = []
    for other, what in sorted(loaded.items()):
        if other == framework:
            continue
        evidence = [f"modules {', '.join(what['modules'])}" if what["modules"] else "",
                    f"libraries {', '.join(what['libraries'][:4])}" if what["libraries"] else ""]
        parts.append(f"{other} ({'; '.join(e for e in evidence if e)})")
    if not parts:
        return ""
    return (f"another framework was loaded in this {framework} trial's process: {', '.join(parts)}; its import "
            "time, memory and threads would be charged to the framework under test")
