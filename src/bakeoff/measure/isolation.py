"""Which deep-learning frameworks a process has loaded: the guard of "one trial, one process, one framework".

A framework counts as loaded when one of its top-level Python packages is in ``sys.modules`` or one of its shared
libraries is mapped into the process (``/proc/self/maps`` on Linux). Both are checked because a package can load
another framework's native library without importing its Python package, and the reverse.

Some frameworks import another one merely because it is installed: ``import tensorflow`` imports ``jax`` when JAX
is installed (``tensorflow/lite/python/util.py`` tries ``from jax import jit``), and so does Keras 3 on the PyTorch
backend. A trial therefore refuses, from its first line, to import the Python packages of every framework its row
does not load (:func:`refuse_foreign`); such optional imports fail as if the package were absent, as they would in
an environment with only the framework under test, and the refused packages are recorded with the result.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping

from bakeoff.core import frameworks as records


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
    if modules is None:  # a refused package is None in sys.modules (refuse_foreign): not loaded
        modules = [name for name, module in list(sys.modules.items()) if module is not None]
    tops = {name.partition(".")[0] for name in modules}
    paths = _mapped_paths() if mapped is None else list(mapped)
    found: dict[str, dict[str, list[str]]] = {}
    for framework, marks in records.markers().items():
        hit_modules = sorted(p for p in marks.packages if p in tops)
        hit_libs = sorted({path.rsplit("/", 1)[-1] for path in paths if any(lib in path for lib in marks.libraries)})
        if hit_modules or hit_libs:
            found[framework] = {"modules": hit_modules, "libraries": hit_libs}
    return found


def foreign_frameworks(framework: str, loaded: Mapping[str, Mapping[str, list[str]]]) -> str:
    """A reason naming every framework in ``loaded`` that ``framework``'s trials do not load by design (its record's
    ``loads``: a Keras row loads its backend); empty when there is none."""
    info = records.FRAMEWORKS.get(framework)
    own = set(info.loads) if info else {framework}
    parts = []
    for other, what in sorted(loaded.items()):
        if other in own:
            continue
        evidence = [f"modules {', '.join(what['modules'])}" if what["modules"] else "",
                    f"libraries {', '.join(what['libraries'][:4])}" if what["libraries"] else ""]
        parts.append(f"{other} ({'; '.join(e for e in evidence if e)})")
    if not parts:
        return ""
    return (f"another framework was loaded in this {framework} trial's process: {', '.join(parts)}; its import "
            "time, memory and threads would be charged to the framework under test")


def refuse_foreign(framework: str) -> list[str]:
    """From now on, importing another framework's Python packages in this process fails as if they were absent
    (Python's own way: ``None`` in ``sys.modules``, so ``import`` raises ModuleNotFoundError and
    ``importlib.util.find_spec`` answers None); returns the refused packages (module docstring)."""
    info = records.FRAMEWORKS.get(framework)
    return refuse_all_but(set(info.loads) if info else {framework})


def refuse_all_but(allowed: Iterable[str]) -> list[str]:
    """:func:`refuse_foreign` for a process that may load exactly the frameworks ``allowed`` (none at all for an
    ONNX Runtime or LiteRT inference process)."""
    own = set(allowed)
    packages = sorted(p for name, marks in records.markers().items() if name not in own for p in marks.packages
                      if p not in sys.modules)
    for package in packages:
        sys.modules[package] = None  # type: ignore[assignment]
    return packages
