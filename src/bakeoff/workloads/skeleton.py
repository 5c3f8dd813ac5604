"""``bakeoff new workload NAME``: a workload package, written from templates, that runs as written.

:func:`new_workload` writes ``NAME/`` — the framework-free workload, one model file per chosen framework, a suite,
a parity test and a README — from the templates in ``bakeoff/workloads/templates/`` (package data, ``*.tmpl``).
As written it is a small but real task (an MLP on generated, seeded Gaussian blobs), so that ``bakeoff parity``,
``bakeoff run`` and the parity test pass before the user changes anything; each file's docstrings state the part
of the contract it keeps (:mod:`bakeoff.core.workload`).

Why here, beside the shipped workloads: the templates *are* a workload's files, in the shipped ones' shape
(``mnist/``: a framework-free ``workload.py``, ``<framework>_model.py`` files with one class name, weights through
:mod:`bakeoff.workloads.common.layouts`), and they change when those do. Discovery takes a folder holding a
``workload.py`` for a shipped workload; ``templates/`` holds ``workload.py.tmpl``, so it is not one. This module
imports no framework and nothing above ``core/``.

Bad input is refused before anything is written, with :class:`~bakeoff.core.spec.SpecError` naming the value and
what is accepted: a name that is not a lowercase identifier, a Python keyword, a known workload's name or a module
``import NAME`` already finds; a folder that exists; an unknown framework. The package is written into a hidden
sibling folder and renamed into place, so an error while writing leaves nothing half-written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import keyword
import re
import secrets
import shutil
import textwrap
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from string import Template

from bakeoff.core import discover, frameworks
from bakeoff.core.spec import SpecError


def model_files() -> dict[str, str]:
    """What ``--framework`` takes, a framework folder's name -> the model file it writes (its rows' ``model_module``:
    one ``keras_model.py`` serves every Keras 3 row), in the order the CLI lists them."""
    return {folder: frameworks.get(rows[0]).model_module for folder, rows in frameworks.by_folder().items()}

NAME_RULE = "a lowercase Python identifier (a letter, then letters, digits or underscores), e.g. my_task"

@dataclasses.dataclass(frozen=True)
class Skeleton:
    """What :func:`new_workload` wrote: the package folder, its files, the reference that names the workload from
    the folder above it, and the framework rows its model files implement."""

    name: str
    folder: Path
    files: tuple[str, ...]
    reference: str
    rows: tuple[str, ...]

    def next_steps(self) -> list[tuple[str, str]]:
        """``(command, what it does)`` to run next, from :attr:`folder`'s parent (the README's and the CLI's)."""
        return next_steps(self.name, self.reference, self.rows)


def class_prefix(name: str) -> str:
    """``my_task`` -> ``MyTask``: the start of the generated class names."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def rows_of(chosen: Sequence[str]) -> tuple[str, ...]:
    """The framework rows (``--framework`` of ``bakeoff run``) that the chosen model files implement, in the order
    chosen: ``keras`` is every Keras 3 row."""
    files = model_files()
    return tuple(row for choice in chosen for row, info in frameworks.FRAMEWORKS.items()
                 if info.model_module == files[choice])


def check_frameworks(chosen: Sequence[str]) -> list[str]:
    """The chosen frameworks without repeats; raises :class:`SpecError` for an unknown one, or for none."""
    files, folders = model_files(), frameworks.by_folder()
    shared = "; ".join(f"{folder}: one {files[folder]}.py for {', '.join(rows[:-1])} and {rows[-1]}"
                       for folder, rows in folders.items() if len(rows) > 1)
    accepted = f"accepted: {', '.join(files)}" + (f" ({shared})" if shared else "")
    for framework in chosen:
        if framework not in files:
            raise SpecError(f"--framework {','.join(chosen)}: unknown framework {framework!r}; {accepted}")
    if not chosen:
        raise SpecError(f"--framework: give at least one framework; {accepted}")
    return list(dict.fromkeys(chosen))


def check_name(name: str, folder: Path) -> None:
    """Raise :class:`SpecError` unless ``name`` can be a new workload package in ``folder``."""
    accepted = f"accepted: {NAME_RULE}, not a known workload's name, in a folder where NAME/ does not exist yet"
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise SpecError(f"workload name {name!r} is not a lowercase Python identifier; {accepted}")
    if keyword.iskeyword(name):
        raise SpecError(f"workload name {name!r} is a Python keyword: `import {name}.workload` cannot be written; "
                        f"{accepted}")
    if name in discover.names():
        raise SpecError(f"workload name {name!r} is taken: results are stored by name, and {name} is a "
                        f"{'shipped' if name in discover.shipped_names() else 'installed'} workload; {accepted}")
    target = folder / name
    if target.exists() or target.is_symlink():
        raise SpecError(f"{target} exists: nothing is overwritten; {accepted} (remove it, or give another NAME "
                        "or --dir)")
    if folder.exists() and not folder.is_dir():
        raise SpecError(f"--dir {folder}: not a folder; accepted: a folder, or a path to create one at")
    found = _module(name)
    if found:
        raise SpecError(f"workload name {name!r}: `import {name}` already finds {found}, so {name}.workload would "
                        f"not be yours; {accepted}")


def _module(name: str) -> str:
    """Where ``import name`` finds a module now ('' for nowhere)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return ""
    if spec is None:
        return ""
    return spec.origin if spec.origin and spec.origin != "built-in" else f"the built-in module {name}"


def next_steps(name: str, reference: str, rows: Sequence[str]) -> list[tuple[str, str]]:
    """``(command, what it does)`` to run next, from the folder that holds ``name/``."""
    steps = [(f"bakeoff list --presets --workload {reference}", "its presets: fields, parameters, targets")]
    if len(rows) > 1:
        steps.append((f"bakeoff parity --workload {reference} --framework {','.join(rows)}",
                      "the ports are the same model"))
    steps += [(f"pytest {name}/test_parity.py", "the same, as a test to keep"),
              (f"bakeoff run --suite {name}/suite.toml --max-steps 20 --repeats 1", "a quick look"),
              (f"bakeoff run --suite {name}/suite.toml", "the bake-off (measure the targets first)"),
              ("bakeoff report", "the decision report")]
    return steps


def _suite_variants(rows: Sequence[str]) -> str:
    """One ``[[variant]]`` per row, in the execution mode its users train in (its record's first production mode)."""
    return "".join(f'\n[[variant]]\nframework = "{row}"\nexecution = "{frameworks.get(row).production[0].value}"\n'
                   for row in rows)


def render(name: str, chosen: Sequence[str]) -> dict[str, str]:
    """``{file name: text}`` of the package :func:`new_workload` writes (nothing is written)."""
    prefix = class_prefix(name)
    reference = f"{name}.workload:{prefix}Workload"
    rows = rows_of(chosen)
    files = model_files()
    models = {f"{files[c]}.py": frameworks.get(frameworks.by_folder()[c][0]).model_words for c in chosen}
    modes = ", ".join(f"{frameworks.get(r).display} {frameworks.get(r).production[0].value}" for r in rows)
    values = {
        "name": name, "reference": reference,
        "workload_class": f"{prefix}Workload", "model_class": f"{prefix}Model", "net_class": f"{prefix}Net",
        "rows": json.dumps(list(rows)),
        # the top-level module of each framework folder's first row: what the workload module must not import
        "framework_modules": repr(tuple(frameworks.get(folder_rows[0]).modules[0]
                                        for folder_rows in frameworks.by_folder().values())),
        "header": textwrap.fill(f"{name}'s bake-off: each framework in the mode its users train in ({modes}), "
                                "preset tiny, until the target or 2 epochs, 3 repeats (seeds 0-2) per framework so "
                                "that every verdict has an interval.", 116, initial_indent="# ",
                                subsequent_indent="# "),
        "description": f"{name}: {', '.join(rows)}, each in its production mode, 3 repeats",
        "variants": _suite_variants(rows),
        "model_list": "\n".join(f"* ``{file}``: {words}" for file, words in models.items()),
        "model_rows": "".join(f"| `{file}` | its model in {words} |\n" for file, words in models.items()),
        "commands": "\n".join(f"# {what}\n{command}" for command, what in next_steps(name, reference, rows)),
    }
    templates = resources.files("bakeoff.workloads").joinpath("templates")
    # a model file's template is in its framework's folder (model.py.tmpl), the others here
    sources = {file: templates.joinpath(f"{file}.tmpl")
               for file in ["__init__.py", "workload.py", "suite.toml", "test_parity.py", "README.md"]}
    sources.update({f"{files[c]}.py": resources.files(f"{frameworks.PACKAGE}.{c}").joinpath("model.py.tmpl")
                    for c in chosen})
    return {file: Template(sources[file].read_text()).substitute(values)
            for file in ["__init__.py", "workload.py", *models, "suite.toml", "test_parity.py", "README.md"]}


def new_workload(name: str, chosen: Sequence[str] | None = None, folder: str | Path = ".") -> Skeleton:
    """Write the workload package ``folder/name/`` and return what was written.

    Args:
        name: the workload's name (its package, and what results are stored by): :data:`NAME_RULE`.
        chosen: the frameworks to write a model for, the first being parity's reference: of :func:`model_files`
            (None: the native rows, :func:`bakeoff.core.frameworks.native`).
        folder: where the package goes (created when missing); the workload is then found by module from there.

    Raises:
        SpecError: a bad name, an existing ``folder/name``, an unknown framework; nothing is written.
    """
    folder = Path(folder)
    chosen = check_frameworks(frameworks.native() if chosen is None else chosen)
    check_name(name, folder)
    texts = render(name, chosen)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{name}.partial-{secrets.token_hex(4)}"
    try:
        partial.mkdir()
        for file, text in texts.items():
            (partial / file).write_text(text)
        partial.rename(folder / name)  # fails rather than merge into a folder made meanwhile
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # the folder this call made, now empty again
        raise
    return Skeleton(name, folder / name, tuple(texts), f"{name}.workload:{class_prefix(name)}Workload",
                    rows_of(chosen))
