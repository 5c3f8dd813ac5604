"""Every deployment format bakeoff exports, as one record each: who exports it, which runtime serves it, and what
it is for. Each framework's record lists the formats it exports (``formats``, in its folder); :data:`FORMATS`
gathers them. The adapter and runtime contract's types are here too (:class:`Unsupported`, :func:`ran_on`; the
contract itself is in :mod:`bakeoff.deploy`). Framework-free; the adapters and runtimes named here are imported
only in their own processes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from bakeoff.core import frameworks
from bakeoff.core.spec import SpecError

Run = Callable[[dict[str, Any]], Any]


def ran_on(run: Run, device: str, **facts: Any) -> Run:
    """``run`` labelled with the device its runtime computes on and the settings read from it
    (:mod:`bakeoff.deploy`)."""
    run.device = device  # type: ignore[attr-defined]
    run.facts = facts  # type: ignore[attr-defined]
    return run


class Unsupported(RuntimeError):
    """This format cannot be made or run here (recorded as ``unsupported`` with the reason)."""


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
        for info in frameworks.FRAMEWORKS.values():  # a framework's own runtime is in its folder
            if self.runtime in info.runtimes:
                return info.runtimes[self.runtime]
        return f"bakeoff.deploy.{self.runtime}_runtime"  # a framework-free one (ONNX Runtime, LiteRT)

    @property
    def install_hint(self) -> str:
        return f"pip install 'bakeoff[{self.extra}]'"


FLOAT_TOLERANCE = 1e-4  # fp32 graphs re-lowered by another compiler: fused and reordered sums, not new rounding

class _Discovered(Mapping[str, Format]):
    """Every format, in the order a report lists them: each framework's record's ``formats``, in the frameworks'
    order (read on first use, with the records)."""

    def _all(self) -> dict[str, Format]:
        return {f.name: f for info in frameworks.FRAMEWORKS.values() for f in info.formats}

    def __getitem__(self, name: str) -> Format:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


FORMATS: Mapping[str, Format] = _Discovered()
"""Every deployment format by name, from the frameworks' records."""


def for_framework(framework: str) -> list[Format]:
    """The formats ``framework`` exports, in the order a report lists them (none for a Keras row)."""
    return [f for f in FORMATS.values() if f.framework == framework]


def get(name: str) -> Format:
    """The format called ``name``; :class:`SpecError` naming the accepted ones otherwise."""
    if name not in FORMATS:
        raise SpecError(f"unknown deployment format {name!r}; accepted: {', '.join(FORMATS)}")
    return FORMATS[name]


def exporting_frameworks() -> list[str]:
    """The frameworks whose models bakeoff keeps and exports: those whose record names a deployment adapter."""
    return [name for name, info in frameworks.FRAMEWORKS.items() if info.deploy]


def adapter_module(framework: str) -> str:
    """The module that keeps and exports ``framework``'s models (its record's ``deploy``)."""
    module = frameworks.get(framework).deploy
    if not module:
        raise KeyError(f"bakeoff keeps and exports no {framework} models; it does {', '.join(exporting_frameworks())}")
    return module
