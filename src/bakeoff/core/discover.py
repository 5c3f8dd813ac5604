"""Where workloads come from, all by one mechanism: a name or a reference resolves to an :class:`Entry`, the
``"module:Class"`` of a framework-free :class:`~bakeoff.core.workload.Workload` class (and the folder its module
needs on ``sys.path``), and the class says where its model is in each framework (:func:`models`).

Three sources:

* **shipped**: ``bakeoff/workloads/<name>/workload.py``, found by looking in the package's folders. Not through
  entry-point metadata: an editable install writes that when installed and refreshes it only when reinstalled, so
  a checkout's new or renamed workload would go unseen (or a stale one be listed), and reading every installed
  distribution's metadata would cost each trial process a scan it does not need for a shipped name.
* **entry points** of the group ``bakeoff.workloads`` (``sentiment = "my_models.sentiment:Sentiment"``), declared
  by installed packages: listed by ``bakeoff list`` and run by name. A name a shipped workload has is refused.
* **references**, given wherever a workload name goes: ``MODULE:CLASS`` (a module on ``sys.path``, or under the
  current folder as ``python -m`` finds one) or ``FILE.py:CLASS`` (imported as ``pytest`` imports a test file:
  its folder, or the folder above its package, goes on ``sys.path``). ``:CLASS`` may be left out when the module
  defines one Workload class.

A trial runs in a fresh process (``python -m bakeoff.trial``): the spec of a referenced workload carries its
``workload_class`` (``"module:Class"``) and ``workload_path`` (the folder to put on ``sys.path``, '' for none), which
:func:`entry_of` resolves there the same way, whatever that process's current folder.

Importing a workload's module imports no framework (its contract); its models are found without importing them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import os
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType

from bakeoff.core import frameworks, keras_function
from bakeoff.core.spec import SpecError
from bakeoff.core.workload import Workload

GROUP = "bakeoff.workloads"
"""The entry-point group through which an installed package offers its workloads by name."""

SHIPPED_PACKAGE = "bakeoff.workloads"

KERAS_FUNCTION_MODEL = "bakeoff.workloads.common.keras_function_model:KerasFunctionModel"
"""The model of a Keras row for a workload that declares a ``keras_function``: one class for every such workload,
bound to it by :func:`bakeoff.core.registry.model_class`."""

REFERENCES = "MODULE:CLASS (a module on sys.path or under the current folder) or FILE.py:CLASS"
FORMS = f"a workload name (`bakeoff list` shows them), {REFERENCES}"
"""The accepted forms of a workload, in words, for error messages."""


@dataclasses.dataclass(frozen=True)
class Entry:
    """A workload: its name, its class as ``"module:Class"``, the folder its module needs on ``sys.path`` ('' for
    none) and where it was found (``shipped``, ``entry point of DIST``, ``reference``)."""

    name: str
    target: str
    path: str = ""
    origin: str = "shipped"

    @property
    def shipped(self) -> bool:
        return self.origin == "shipped"


_REFERENCED: dict[str, Entry] = {}
"""Workloads this process resolved from a reference, by name, so later lookups by name find them."""


def _shipped_folder() -> Path:
    spec = importlib.util.find_spec(SHIPPED_PACKAGE)  # imports bakeoff.workloads (empty), no workload
    assert spec is not None and spec.submodule_search_locations, "bakeoff.workloads is part of bakeoff"
    return Path(next(iter(spec.submodule_search_locations)))


def shipped_names() -> list[str]:
    """The shipped workloads' names: every folder of ``bakeoff/workloads`` holding a ``workload.py``."""
    root = _shipped_folder()
    return sorted(p.parent.name for p in root.glob("*/workload.py") if p.parent.name.isidentifier())


def _shipped(name: str) -> Entry | None:
    if not name.isidentifier() or not (_shipped_folder() / name / "workload.py").is_file():
        return None
    module = importlib.import_module(f"{SHIPPED_PACKAGE}.{name}.workload")
    found = [c for c in _defined(module) if getattr(c, "name", None) == name]
    assert len(found) == 1, f"{module.__name__} defines one Workload class named {name!r}"
    return Entry(name, f"{module.__name__}:{found[0].__name__}")


@functools.cache
def entry_points() -> dict[str, Entry]:
    """The workloads installed packages declare in the ``bakeoff.workloads`` entry-point group, by name (not
    imported). Raises :class:`SpecError` for a name a shipped workload has, or two packages giving one name to
    different classes."""
    shipped = set(shipped_names())
    found: dict[str, Entry] = {}
    for point in metadata.entry_points(group=GROUP):
        dist = point.dist.name if point.dist is not None else "an unnamed distribution"
        entry = Entry(point.name, point.value, "", f"entry point of {dist}")
        if point.name in shipped:
            raise SpecError(f"workload name clash: {dist} declares entry point {point.name} = {point.value!r} in "
                            f"group {GROUP}, but {point.name} is a shipped workload's name; results are stored by "
                            "name, so rename the entry point and its class's name")
        if point.name in found and found[point.name].target != entry.target:
            raise SpecError(f"workload name clash: entry point {point.name} is {found[point.name].target!r} "
                            f"({found[point.name].origin}) and {point.value!r} ({entry.origin}); rename one")
        found.setdefault(point.name, entry)
    return found


def names() -> list[str]:
    """Every workload known by name: the shipped ones, then the installed packages' (entry points)."""
    return shipped_names() + sorted(entry_points())


def _unknown(name: str) -> SpecError:
    return SpecError(f"unknown workload {name!r}; accepted: {', '.join(names())}, {REFERENCES}")


def by_name(name: str) -> Entry:
    """The workload called ``name``: shipped, resolved from a reference in this process, or an entry point's."""
    entry = _shipped(name) or _REFERENCED.get(name) or entry_points().get(name)
    if entry is None:
        raise _unknown(name)
    return entry


def is_reference(text: str) -> bool:
    """Whether ``text`` names a workload by module or file rather than by name (a name is a Python identifier)."""
    return any(c in text for c in ":./" + os.sep)


def resolve(text: str) -> Entry:
    """The workload ``text`` names: a name, ``MODULE[:CLASS]`` or ``FILE.py[:CLASS]``, imported and checked.

    A referenced workload is remembered by its name for the rest of this process. Raises :class:`SpecError`
    naming the bad value and the accepted forms: an unknown name, a module or file that does not import, a class
    that is not a usable Workload or declares no model, a name another workload already has.
    """
    text = text.strip()
    if not is_reference(text):
        return by_name(text)
    left, colon, attr = text.rpartition(":") if ":" in text else (text, "", "")
    if colon and not attr.isidentifier():
        raise SpecError(f"workload {text!r}: {attr!r} is not a class name; accepted: {FORMS}")
    if left.endswith(".py") or "/" in left or os.sep in left:
        module, path = _file_module(text, left)
    elif all(part.isidentifier() for part in left.split(".")):
        module, path = left, ""
    else:
        raise SpecError(f"workload {text!r}: {left!r} is neither a module path nor a .py file; accepted: {FORMS}")
    imported, path = _import(module, path, text)
    if left.endswith(".py") and Path(imported.__file__ or "").resolve() != Path(left).resolve():
        raise SpecError(f"workload {text!r}: {left} imports as module {module}, but {module} is already "
                        f"{imported.__file__}: rename the file")
    cls = _pick(imported, attr, text)
    check(cls, text)
    return _remember(Entry(cls.name, f"{module}:{cls.__name__}", path, "reference"), text)


def _remember(entry: Entry, given: str) -> Entry:
    """Keep a referenced workload by name, or find it is a shipped or installed one (then that entry: one workload,
    one spec, however it is named); refuse a name another workload has (results are stored by name)."""
    shipped = entry.name in shipped_names()
    other = by_name(entry.name) if shipped else _REFERENCED.get(entry.name) or entry_points().get(entry.name)
    if other is None:
        _REFERENCED[entry.name] = entry
        return entry
    if other.target != entry.target:
        known = f"the shipped workload {other.target}" if shipped else f"{other.target} ({other.origin})"
        raise SpecError(f"workload {given!r} is named {entry.name!r}, the name of {known}; results are stored by "
                        "name: give the class another name")
    return other


def entry_of(name: str, target: str = "", path: str = "") -> Entry:
    """The workload a spec names: by its ``workload_class`` and ``workload_path`` when it carries them (a
    referenced workload, in a trial process), else by name."""
    if not target:
        return by_name(name)
    entry = Entry(name, target, path, "reference")
    cls = load(entry)
    if cls.name != name:
        raise SpecError(f"workload {target!r} is named {cls.name!r} now, not {name!r} as when this spec was made")
    _REFERENCED.setdefault(name, entry)
    return entry


def load(entry: Entry) -> type[Workload]:
    """The Workload class of ``entry``, imported (its folder put on ``sys.path`` first when it needs one)."""
    module, _, attr = entry.target.partition(":")
    imported, _ = _import(module, entry.path, entry.target)
    cls = _pick(imported, attr, entry.target)
    if not entry.shipped:
        check(cls, entry.target)
    if entry.origin.startswith("entry point") and cls.name != entry.name:
        raise SpecError(f"entry point {entry.name} = {entry.target!r} ({entry.origin}) names a workload whose "
                        f"name is {cls.name!r}: make the entry point's name the class's name")
    return cls


def _file_module(given: str, file: str) -> tuple[str, str]:
    """The module a ``.py`` file imports as, and the folder that goes on ``sys.path``: its own folder, or the
    folder above the outermost package (``__init__.py``) it is in."""
    path = Path(file).expanduser()
    if path.suffix != ".py" or not path.is_file():
        raise SpecError(f"workload {given!r}: no Python file {file}; accepted: {FORMS}")
    path = path.resolve()
    parts, root = [path.stem], path.parent
    while (root / "__init__.py").is_file():
        parts.insert(0, root.name)
        root = root.parent
    return ".".join(parts), str(root)


def _on_path(folder: str) -> None:
    if folder not in sys.path:
        sys.path.insert(0, folder)
        importlib.invalidate_caches()  # a folder's listing may be cached from before its files were written


def _import(module: str, path: str, given: str) -> tuple[ModuleType, str]:
    """Import ``module`` (``path`` on ``sys.path`` first, when given); a module path not found as it stands is
    looked for under the current folder, as ``python -m`` would. Returns the module and the folder it needs."""
    if path:
        _on_path(path)
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        here = os.getcwd()
        if path or exc.name != module.partition(".")[0] or here in sys.path:
            raise _not_imported(given, module, exc) from None
        _on_path(here)
        try:
            imported, path = importlib.import_module(module), here
        except Exception as again:  # noqa: BLE001 - whatever the user's module raises while importing
            raise _not_imported(given, module, again) from None
    except Exception as exc:  # noqa: BLE001 - a SyntaxError, or what the user's module raises while importing
        raise _not_imported(given, module, exc) from None
    if not path and _root(imported) == Path(os.getcwd()).resolve():
        path = os.getcwd()  # found under the current folder: a trial process started elsewhere finds it too
    return imported, path


def _root(module: ModuleType) -> Path | None:
    """The ``sys.path`` folder ``module`` was imported from."""
    if not getattr(module, "__file__", None):
        return None
    file = Path(module.__file__).resolve()
    depth = module.__name__.count(".") + (file.name == "__init__.py")
    return file.parents[depth]


def _not_imported(given: str, module: str, exc: BaseException) -> SpecError:
    return SpecError(f"workload {given!r}: module {module} does not import ({type(exc).__name__}: {exc}); "
                     f"accepted: {FORMS}")


def _defined(module: ModuleType) -> list[type[Workload]]:
    """The Workload classes ``module`` defines (not those it imports)."""
    return [c for c in vars(module).values()
            if inspect.isclass(c) and issubclass(c, Workload) and c.__module__ == module.__name__]


def _pick(module: ModuleType, attr: str, given: str) -> type[Workload]:
    """``module.attr``, or the one Workload class ``module`` defines when ``attr`` is ''."""
    if not attr:
        defined = _defined(module)
        if len(defined) != 1:
            which = ", ".join(c.__name__ for c in defined) or "none"
            raise SpecError(f"workload {given!r}: name the class, {module.__name__}:CLASS (the Workload classes "
                            f"it defines: {which})")
        return defined[0]
    if not hasattr(module, attr):
        defined = ", ".join(c.__name__ for c in _defined(module)) or "none"
        raise SpecError(f"workload {given!r}: module {module.__name__} has no {attr} (the Workload classes it "
                        f"defines: {defined})")
    return getattr(module, attr)


def check(cls: object, given: str) -> None:
    """Raise :class:`SpecError` unless ``cls`` is a usable Workload class: a concrete subclass of
    :class:`~bakeoff.core.workload.Workload` with a name (an identifier) and a model in at least one framework."""
    if not (inspect.isclass(cls) and issubclass(cls, Workload)):
        raise SpecError(f"workload {given!r} is {cls!r}, not a Workload (a subclass of "
                        "bakeoff.core.workload.Workload with its presets, data, metric and models)")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise SpecError(f"workload {given!r}: {cls.__name__} does not implement {missing}")
    name = getattr(cls, "name", None)
    if not (isinstance(name, str) and name.isidentifier()):
        raise SpecError(f"workload {given!r}: {cls.__name__} needs a name, a Python identifier such as "
                        f"name = \"sentiment\" (it has {name!r})")
    unknown = sorted(set(cls.models) - set(frameworks.FRAMEWORKS))
    if unknown:
        raise SpecError(f"workload {given!r}: {cls.__name__}.models names unknown framework(s) "
                        f"{', '.join(unknown)}; accepted: {', '.join(frameworks.FRAMEWORKS)}")
    for framework, target in cls.models.items():
        module, colon, attr = target.partition(":")
        if not (colon and attr.isidentifier() and all(p.isidentifier() for p in module.split("."))):
            raise SpecError(f"workload {given!r}: {cls.__name__}.models[{framework!r}] is {target!r}; give it "
                            "as \"module.path:Class\"")
        if not _findable(module):
            raise SpecError(f"workload {given!r}: {cls.__name__}.models[{framework!r}] is {target!r}, but no module "
                            f"{module} is found (on sys.path, or beside the workload's package)")
    wrong = keras_function.problems(cls.keras_function) if cls.keras_function is not None else []
    if wrong:
        raise SpecError(f"workload {given!r}: {cls.__name__}.keras_function, the model of its Keras rows "
                        f"({', '.join(keras_function.ROWS)}): {'; '.join(wrong)}")
    if not models(cls):
        files = ", ".join(sorted({f"{info.model_module}.py" for info in frameworks.FRAMEWORKS.values()}))
        raise SpecError(f"workload {given!r}: {cls.__name__} declares no model in any framework: set model_class "
                        f"to its model's class name in the files beside it ({files}), or models = "
                        "{framework: \"module:Class\"}, or keras_function = KerasFunction(...) for the Keras rows")


def _findable(module: str) -> bool:
    """Whether ``module`` can be found, without importing it (its parent packages are imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def models(cls: type[Workload]) -> dict[str, str]:
    """``{framework: "module:Class"}`` of each framework row that implements ``cls`` (see
    :attr:`Workload.model_class` and :attr:`Workload.models`; a Keras row of a workload with a
    :attr:`Workload.keras_function` and no other Keras model gets :data:`KERAS_FUNCTION_MODEL`), found without
    importing any model."""
    module = sys.modules[cls.__module__]
    file = Path(module.__file__ or "")
    package = module.__name__ if file.name == "__init__.py" else module.__name__.rpartition(".")[0]
    out: dict[str, str] = {}
    for framework, info in frameworks.FRAMEWORKS.items():
        if framework in cls.models:
            out[framework] = cls.models[framework]
        elif cls.model_class and file.with_name(f"{info.model_module}.py").is_file():
            out[framework] = f"{package + '.' if package else ''}{info.model_module}:{cls.model_class}"
        elif cls.keras_function is not None and info.function_model:
            out[framework] = info.function_model
    return out

