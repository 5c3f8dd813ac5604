"""Every deployment format bakeoff exports, as one record each: who exports it, which runtime serves it, and what
it is for. Each framework's record lists the formats it exports (``formats``, in its folder); :data:`FORMATS`
gathers them. The adapter and runtime contract's types are here too (:class:`Unsupported`, :func:`ran_on`; the
contract itself is in :mod:`bakeoff.deploy`). Framework-free; the adapters and runtimes named here are imported
only in their own processes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bakeoff.core import frameworks
from bakeoff.core.frameworks import Format, adapter_module, exporting_frameworks  # noqa: F401  (read from here too)
from bakeoff.core.lazy import Discovered
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


FLOAT_TOLERANCE = 1e-4  # fp32 graphs re-lowered by another compiler: fused and reordered sums, not new rounding

FORMATS: Mapping[str, Format] = Discovered(
    "FORMATS", lambda: {f.name: f for info in frameworks.FRAMEWORKS.values() for f in info.formats})
"""Every deployment format by name, in the order a report lists them: each framework's record's ``formats``, in the
frameworks' order (read on first use, with the records)."""


def for_framework(framework: str) -> list[Format]:
    """The formats ``framework`` exports, in the order a report lists them (none for a Keras row)."""
    return [f for f in FORMATS.values() if f.framework == framework]


def get(name: str) -> Format:
    """The format called ``name``; :class:`SpecError` naming the accepted ones otherwise."""
    if name not in FORMATS:
        raise SpecError(f"unknown deployment format {name!r}; accepted: {', '.join(FORMATS)}")
    return FORMATS[name]
