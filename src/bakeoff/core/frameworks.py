"""What bakeoff knows about each framework, one record per framework row: everything outside a framework's own
folder and model files reads it from here (a trial's environment, the trial's isolation guard and
out-of-memory classification, the environment fingerprint, versions in trial keys, the decision's names and
production modes, the plots' colours, the CLI's listing and help).

The records are not written here: each framework is one folder, ``bakeoff/frameworks/<name>/``, with the same
module names in each (``record.py``, ``engine.py``, ``distributed.py``, ``probes.py``, ``deploy.py``,
``runtime.py``), and its ``record.py`` holds its rows (``RECORDS``) and where they are listed among the others
(``ORDER``). :data:`FRAMEWORKS` is discovered from those folders on first use, as workloads are
(:mod:`bakeoff.core.discover`): a ``record.py`` imports only ``bakeoff.core``, so discovering the rows imports no
framework. Adding a framework is its folder, a model file per workload it supports
(``workloads/<workload>/<model_module>.py``, the same class names as the others': a workload is implemented in the
frameworks whose file it has) and its extra in ``pyproject.toml``.

A *row* is what a user picks with ``--framework``: usually one framework, but a Keras 3 row is the same Keras model
code on one backend (``keras-jax``, ``keras-torch``, ``keras-tensorflow``), so it loads that backend's framework
and is judged against the native rows like any other.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from bakeoff.core.choices import Execution, Parallelism, Precision
from bakeoff.core.lazy import Discovered

__all__ = ["FRAMEWORKS", "PACKAGE", "Capacity", "Format", "FrameworkInfo", "LoadMarkers", "adapter_module",
           "by_folder", "exporting_frameworks", "folders", "frozen", "get", "markers", "names", "native",
           "rediscover"]

PACKAGE = "bakeoff.frameworks"
"""The package whose folders are the frameworks (one ``<name>/record.py`` each)."""


@dataclasses.dataclass(frozen=True)
class Format:
    """One deployment format of one source framework.

    ``name`` is unique across frameworks (``torch-onnx`` and ``tf-onnx`` are two formats: two converters).
    ``runtime`` names the runtime that loads and runs it in the inference process: a framework's own (its
    record's ``runtimes`` give the module in its folder) or ``bakeoff.deploy.<runtime>_runtime``; ``loads`` the
    frameworks that process may import (none for ONNX Runtime and LiteRT).
    ``tolerance`` is the largest absolute output difference from the framework model accepted for a float format;
    ``None`` for a quantised one, whose metric change is reported instead. ``targets`` are where such a file is
    deployed (server, mobile, browser, edge: LiteRT's interpreter is what a phone or an edge box runs); a target
    counts for a framework only when its format exported and ran.
    """

    name: str
    display: str
    framework: str
    runtime: str
    file: str  # file or directory name inside the format's export directory
    tolerance: float | None
    targets: tuple[str, ...]
    loads: tuple[str, ...]
    packages: tuple[str, ...]  # Python packages the export and the runtime need, for the "not installed" message
    extra: str  # pip extra that installs them
    quantised: str = ""  # "" for float formats; else what is quantised ("int8 weights, dynamic range")
    needs: str = ""  # "" or "cuda": the format needs a CUDA GPU (TensorRT)
    notes: str = ""

    @property
    def adapter(self) -> str:
        return adapter_module(self.framework)

    @property
    def runtime_module(self) -> str:
        for info in FRAMEWORKS.values():  # a framework's own runtime is in its folder
            if self.runtime in info.runtimes:
                return info.runtimes[self.runtime]
        return f"bakeoff.deploy.{self.runtime}_runtime"  # a framework-free one (ONNX Runtime, LiteRT)

    @property
    def install_hint(self) -> str:
        return f"pip install 'bakeoff[{self.extra}]'"


@dataclasses.dataclass(frozen=True)
class LoadMarkers:
    """What betrays a framework loaded into a process: its top-level Python packages, and substrings of the paths
    of its shared libraries (:mod:`bakeoff.measure.isolation`)."""

    packages: tuple[str, ...]
    libraries: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Capacity:
    """What the capacity plan (:mod:`bakeoff.predict.capacity`) knows of a framework: the API a user calls for each
    strategy kind (``data``, ``zero1`` ... ``parameter_server``) or why it ships none, its mixed-precision recipes
    (:class:`bakeoff.predict.recipes.Recipe`'s fields but ``frameworks``) and the one each strategy uses by default,
    and its tag in the plan's tables."""

    tag: str
    strategies: Mapping[str, str]  # kind -> the API a user calls
    missing: Mapping[str, str]  # kind -> why it ships none
    recipes: tuple[Mapping[str, Any], ...] = ()
    defaults: Mapping[str, str] = dataclasses.field(default_factory=lambda: frozen())  # kind -> recipe name


def frozen(mapping: Mapping | None = None) -> Mapping:
    """A read-only copy of ``mapping`` (a record's fields are immutable)."""
    return MappingProxyType(dict(mapping or {}))


@dataclasses.dataclass(frozen=True)
class FrameworkInfo:
    """One framework row (module docstring)."""

    name: str  # what --framework takes, and the value of spec.Framework
    display: str  # what a report calls it
    colour: str  # its colour in every plot
    modules: tuple[str, ...]  # importable packages it needs (installed() finds them all without importing)
    extra: str  # bakeoff's pip extra that installs it
    dists: tuple[str, ...]  # distributions whose versions a trial's result depends on (in trial keys)
    engine: str  # "module:Class" of its engine
    model_module: str  # <model_module>.py beside a workload's module holds its model (bakeoff.core.discover)
    executions: tuple[Execution, ...]  # what its engine implements, first the default
    execution_notes: Mapping[Execution, str]  # what each mode is in this framework's own words
    production: tuple[Execution, ...]  # how its users train by default: a verdict must include one of these
    compiled: tuple[Execution, ...]  # its compiled modes (a verdict without any of them says so)
    precisions: tuple[Precision, ...]  # what its engine implements (on a CPU: less cpu_missing, and no fp16)
    launchers: Mapping[Parallelism, str]  # parallelism -> launcher (bakeoff.run.launchers)
    strategies: Mapping[Parallelism, str]  # parallelism -> what its users call the strategy ("DDP")
    missing_modes: Mapping[Execution, str] = dataclasses.field(default_factory=frozen)  # modes it lacks: why
    missing_strategies: Mapping[Parallelism, str] = dataclasses.field(default_factory=frozen)  # and why
    missing_executions: Mapping[tuple[Parallelism, Execution], str] = dataclasses.field(default_factory=frozen)
    # (execution, precision) pairs its engine cannot run on a CPU: why (refused in the trial on a CPU, and by
    # parity before any probe starts: probes run on the CPU)
    cpu_missing: Mapping[tuple[Execution, Precision], str] = dataclasses.field(default_factory=frozen)
    loads: tuple[str, ...] = ()  # the frameworks (by marker) its trial process legitimately loads
    markers: LoadMarkers | None = None  # when it is a framework of its own that a process can load
    env: Mapping[str, str] = dataclasses.field(default_factory=frozen)  # set in its trial processes
    oom_markers: tuple[str, ...] = ()  # substrings of an exception's type name or message meaning out of memory
    matmul: str = ""  # "module:function" timing its matmul (the MFU ceiling, bakeoff.measure.ceiling)
    deploy: str = ""  # the module that keeps and exports its models (bakeoff.deploy); "" when bakeoff does not
    formats: tuple[Format, ...] = ()  # the deployment formats it exports (bakeoff.core.formats), in report order
    runtimes: Mapping[str, str] = dataclasses.field(default_factory=frozen)  # runtime name -> its module
    probes: str = ""  # the module reading its settings and build (tf32(), cuda_build()); "" for none
    cache_env: Mapping[str, str] = dataclasses.field(default_factory=frozen)  # compile cache variable -> subfolder
    function_model: str = ""  # "module:Class" of its model for a workload's keras_function; "" when it runs none
    model_words: str = ""  # what its model file is written in, as `bakeoff new` describes it ("JAX (Flax Linen)")
    launch: str = ""  # the module holding its launchers (LAUNCHERS, bakeoff.core.launching); "" for none
    capacity: Capacity | None = None  # what the capacity plan knows of it; None: not planned

    @property
    def install_hint(self) -> str:
        return f"pip install 'bakeoff[{self.extra}]'"


FRAMEWORKS: Mapping[str, FrameworkInfo] = Discovered("FRAMEWORKS", lambda: _discover())  # defined below
"""Every framework row, in the order the CLI lists them: the records of ``bakeoff/frameworks/*/record.py``, read on
first use (module docstring)."""


def folders() -> list[tuple[str, Path]]:
    """``(module, folder)`` of each framework folder: a folder of :data:`PACKAGE` holding a ``record.py``."""
    package = importlib.import_module(PACKAGE)  # an empty package: no framework, no record
    return [(f"{PACKAGE}.{child.name}", child) for root in package.__path__ for child in sorted(Path(root).iterdir())
            if (child / "record.py").is_file()]


@functools.cache
def _discover() -> Mapping[str, FrameworkInfo]:
    found: list[tuple[Any, str, FrameworkInfo]] = []
    for module_name, _ in folders():
        module = importlib.import_module(f"{module_name}.record")
        found += [(module.ORDER, module_name, info) for info in module.RECORDS]
    found.sort(key=lambda entry: (entry[0], entry[1]))  # stable: a folder's rows keep their own order
    return MappingProxyType({info.name: info for _, _, info in found})


def rediscover() -> None:
    """Forget the discovered records (a test that adds a framework folder), and the framework choice built from
    them (:class:`bakeoff.core.spec.Framework`)."""
    _discover.cache_clear()  # the spec's framework choice follows the rows it finds (spec.framework_choice)


def get(name: str) -> FrameworkInfo:
    """The record of ``name`` (a ``spec.Framework`` or its value); a ``KeyError`` names the accepted ones."""
    try:
        return FRAMEWORKS[str(name)]
    except KeyError:
        raise KeyError(f"unknown framework {name!r}; accepted: {', '.join(FRAMEWORKS)}") from None


def names() -> list[str]:
    return list(FRAMEWORKS)


def by_folder() -> dict[str, list[str]]:
    """Each framework folder's name -> the rows its record declares (``keras`` -> its Keras 3 rows), in the order
    the CLI lists them."""
    out = {folder.name: [info.name for info in importlib.import_module(f"{module}.record").RECORDS]
           for module, folder in folders()}
    order = list(FRAMEWORKS)
    return dict(sorted(out.items(), key=lambda item: order.index(item[1][0])))


def native() -> list[str]:
    """The rows that are a framework of their own (their own load markers), not Keras on a backend: what an ad-hoc
    run, a new workload and the calibration bench take when no framework is named."""
    return [name for name, info in FRAMEWORKS.items() if info.markers is not None]


def markers() -> dict[str, LoadMarkers]:
    """``{framework: markers}`` for each framework a process can load (the Keras rows load their backend's)."""
    return {name: info.markers for name, info in FRAMEWORKS.items() if info.markers is not None}


def exporting_frameworks() -> list[str]:
    """The frameworks whose models bakeoff keeps and exports: those whose record names a deployment adapter."""
    return [name for name, info in FRAMEWORKS.items() if info.deploy]


def adapter_module(framework: str) -> str:
    """The module that keeps and exports ``framework``'s models (its record's ``deploy``)."""
    module = get(framework).deploy
    if not module:
        raise KeyError(f"bakeoff keeps and exports no {framework} models; it does {', '.join(exporting_frameworks())}")
    return module
