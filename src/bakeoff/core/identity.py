"""What a trial's result depends on besides its spec's fields: the content of its data files, the resolved model
configuration, and the versions of bakeoff and of the framework. :func:`identify` writes these into
``RunSpec.content``, so a spec's key changes when any of them does: an edited data file, a changed preset or a new
bakeoff or framework release runs anew instead of reusing a stale result; and one file reached through two paths
is one trial, because the key counts a hashed data file by its content, not its path.

Only numpy-free standard-library work happens here: hashing files and reading package metadata.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.util
import inspect
import json
import logging
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import bakeoff
from bakeoff.core import discover, frameworks, registry
from bakeoff.core.spec import RunSpec, SpecError

logger = logging.getLogger(__name__)

DIGEST_CHARS = 16


def _hash_file(h: hashlib._Hash, path: Path) -> None:
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


@functools.lru_cache(maxsize=256)
def _digest(path: Path, stamp: tuple) -> str:
    h = hashlib.sha256()
    if path.is_dir():
        for member in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            h.update(str(member.relative_to(path)).encode() + b"\0")
            _hash_file(h, member)
    else:
        _hash_file(h, path)
    return h.hexdigest()[:DIGEST_CHARS]


def digest(path: str | Path) -> str:
    """Content hash of a file, or of a folder's files (names and contents); cached while unchanged on disk."""
    path = Path(path).resolve()
    stat = path.stat()
    stamp = (stat.st_mtime_ns, stat.st_size)
    if path.is_dir():
        stamp += tuple((p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(path.rglob("*")) if p.is_file())
    return _digest(path, stamp)


def _combined(paths: Sequence[Path]) -> str:
    """One hash over several files (a manifest and the audio it lists), each by name and content."""
    h = hashlib.sha256()
    for path in paths:
        h.update(f"{path.name}\0{digest(path)}\0".encode())
    return h.hexdigest()[:DIGEST_CHARS]


@functools.cache
def bakeoff_version() -> str:
    """bakeoff's version and a hash of its installed package (code, shipped suites and data), so a changed
    checkout between releases counts as another version."""
    return f"{bakeoff.__version__}+{digest(Path(bakeoff.__file__).parent)}"


@functools.cache
def framework_version(framework: str) -> str:
    """``"torch 2.13.0+cpu"``: the installed distributions the framework's trials depend on."""
    found = []
    info = frameworks.FRAMEWORKS.get(framework)
    for dist in info.dists if info else (framework,):
        try:
            found.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(found) or "not installed"


LOCAL_CODE_MAX = 500
"""The most files :func:`local_imports` follows (a workload importing a whole project stops there, with a warning)."""


@functools.cache
def _not_local() -> tuple[Path, ...]:
    """Where imported code is not the user's: the standard library, site-packages (counted by the frameworks'
    versions) and bakeoff itself (by :func:`bakeoff_version`)."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return tuple(sorted({Path(r).resolve() for r in roots} | {Path(bakeoff.__file__).resolve().parent}))


def _local(path: Path) -> bool:
    return not any(path.is_relative_to(root) for root in _not_local())


@functools.lru_cache(maxsize=1024)
def _imports_of(path: Path, stamp: tuple[int, int]) -> tuple[tuple[str, int], ...]:
    """:func:`_imported` of the file at ``path``, parsed once while unchanged on disk (``stamp``: its mtime and
    size; every trial of a run hashes its workload's code); none for a file that does not parse."""
    try:
        return tuple(_imported(ast.parse(path.read_text(encoding="utf-8", errors="replace"), str(path))))
    except (SyntaxError, ValueError, OSError):
        return ()


def _imported(tree: ast.AST) -> list[tuple[str, int]]:
    """(dotted name, relative level) of every module ``tree`` may import: ``from a import b`` may be the module
    ``a.b`` or a name in ``a``, so both."""
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            out += [(f"{base}.{alias.name}" if base else alias.name, node.level) for alias in node.names
                    if alias.name != "*"]
            out += [(base, node.level)] if base else []
    return out


def _module_file(name: str, level: int, importer: Path, search: Sequence[Path]) -> Path | None:
    """The source file ``name`` (``level`` dots before it) resolves to from ``importer``, searching the importer's
    folder then ``search`` for an absolute import; ``None`` when none of them holds it."""
    if level:
        base = importer.parent
        for _ in range(level - 1):
            base = base.parent
        bases: Sequence[Path] = [base]
    else:
        bases = [importer.parent, *search]
    parts = [p for p in name.split(".") if p]
    if not parts:
        init = bases[0] / "__init__.py"
        return init if init.is_file() else None
    for base in bases:
        stem = base.joinpath(*parts)
        for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
            if candidate.is_file():
                return candidate.resolve()
    return None


def local_imports(files: Sequence[Path], search: Sequence[Path] | None = None) -> list[Path]:
    """``files`` and every Python file they import, directly or through each other, from their own folders or the
    user's project (``search``: by default the import path's entries outside the standard library, site-packages
    and bakeoff): found by reading the ``import`` statements (nothing is imported), in name order."""
    if search is None:
        search = [p for entry in sys.path if (p := Path(entry or ".").resolve()).is_dir() and _local(p)]
    seen = {f.resolve() for f in files}
    queue = sorted(seen)
    while queue:
        current = queue.pop()
        try:
            stat = current.stat()
        except OSError:
            continue
        for name, level in _imports_of(current, (stat.st_mtime_ns, stat.st_size)):
            found = _module_file(name, level, current, search)
            if found is None or found in seen or not _local(found):
                continue
            if len(seen) >= LOCAL_CODE_MAX:
                logger.warning("the workload imports more than %d files of its own; those beyond are not counted in "
                               "its trials' keys (name them in code_files)", LOCAL_CODE_MAX)
                return sorted(seen)
            seen.add(found)
            queue.append(found)
    return sorted(seen)


def workload_code(cls: type) -> str:
    """A hash of a workload's code: the file defining its class and each of its model files, its Keras function's
    included, every module of the user's they import (:func:`local_imports`: the team's upstream model, say), and
    the files it names in ``code_files`` (each by name and content), so an edited model is a new trial."""
    home = Path(inspect.getfile(cls))
    paths = [home]
    declared = getattr(cls, "keras_function", None)
    for target in [*discover.models(cls).values(), *([declared.build] if declared is not None else [])]:
        found = importlib.util.find_spec(target.partition(":")[0])
        if found is not None and found.origin and Path(found.origin).is_file():
            paths.append(Path(found.origin))
    named = []
    for entry in getattr(cls, "code_files", ()):
        path = (home.parent / entry).resolve()
        if not path.exists():
            raise SpecError(f"workload {getattr(cls, 'name', cls.__name__)!r}: code_files names {entry!r}, which is "
                            f"not there ({path}); name files or folders relative to {home.name}")
        named.append(path)
    return _combined([*local_imports(paths), *sorted(set(named))])


def content(spec: RunSpec) -> dict[str, str]:
    """``RunSpec.content`` for ``spec``: the hash of the files each data option stands for
    (:meth:`bakeoff.core.workload.Workload.data_files`), of the resolved configuration, and the bakeoff and framework
    versions."""
    cls = registry.workload_class(spec)
    workload = cls()
    out = {f"data:{key}": digest(paths[0]) if len(paths) == 1 else _combined(paths)
           for key, paths in workload.data_files(spec).items()}
    config = workload.config(spec.preset, spec)
    out["config"] = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:DIGEST_CHARS]
    out["bakeoff"] = bakeoff_version()
    if not cls.__module__.startswith("bakeoff."):  # a workload from outside: its code counts as bakeoff's does
        out["workload"] = workload_code(cls)
    out[spec.framework.value] = framework_version(spec.framework.value)
    return out


def identify(specs: Sequence[RunSpec]) -> list[RunSpec]:
    """The specs with their ``content`` filled in (what :meth:`RunSpec.key` then depends on)."""
    return [dataclasses.replace(spec, content=content(spec)) for spec in specs]


def configuration(spec: Mapping[str, Any]) -> str:
    """What a duration depends on: the spec (as a dict) without seed, repeat and versions; a data option whose
    content is hashed counts by its hash, as in :meth:`RunSpec.key`."""
    content = dict(spec.get("content") or {})
    kept = {k: v for k, v in content.items() if k.startswith("data:") or k == "config"}
    raw = {k: v for k, v in spec.items() if k not in ("seed", "repeat", "content", "workload_path")}
    if not raw.get("workload_class"):
        raw.pop("workload_class", None)  # as in RunSpec.key: counts only when set
    raw["data"] = {k: v for k, v in dict(spec.get("data") or {}).items() if f"data:{k}" not in content}
    raw["content"] = kept
    return json.dumps(raw, sort_keys=True, default=str)
