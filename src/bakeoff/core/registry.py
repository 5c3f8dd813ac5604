"""Where each workload, model implementation and engine lives, imported only when a trial needs it, and what a
spec's framework can run (from its record, :mod:`bakeoff.core.frameworks`, and what the workload declares).
Workloads are found by :mod:`bakeoff.core.discover`: shipped, installed (entry points) or referenced by module or
file, all alike.

Nothing here imports a framework: :func:`installed` asks importlib whether one *could* be imported.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Sequence
from typing import Any

from bakeoff.core import discover, frameworks, keras_function
from bakeoff.core.spec import Framework, Parallelism, RunSpec, SpecError
from bakeoff.core.workload import Workload


def unsupported(spec: RunSpec) -> str:
    """Why ``spec`` cannot run here, decided before any process starts ('' when it can): a workload, mode,
    precision or strategy its framework's record does not list, with the accepted ones named."""
    info = frameworks.get(spec.framework.value)
    name = info.display
    implemented = models(spec)
    if spec.framework.value not in implemented:
        return (f"{name} has no {spec.workload} implementation; {spec.workload} is implemented in "
                f"{', '.join(implemented)}")
    if spec.execution not in info.executions:
        why = info.missing_modes.get(spec.execution, f"{name} has no {spec.execution.value} execution mode")
        return (f"{why}; accepted: "
                f"{', '.join(e.value for e in info.executions)}")
    if spec.precision not in info.precisions:
        return (f"{name} has no {spec.precision.value} precision in bakeoff; accepted: "
                f"{', '.join(p.value for p in info.precisions)}")
    if spec.parallelism in info.missing_strategies:
        return info.missing_strategies[spec.parallelism]
    if spec.parallelism not in info.launchers:
        accepted = ", ".join(p.value for p in info.launchers)
        return f"{name} has no {spec.parallelism.value} mode in bakeoff; accepted: {accepted}"
    if (spec.parallelism, spec.execution) in info.missing_executions:
        return info.missing_executions[spec.parallelism, spec.execution]
    if spec.parallelism is not Parallelism.NONE and spec.checkpoint_every:
        return "checkpoints are not kept under distributed training yet: drop checkpoint_every"
    return ""


def unsupported_on_cpu(spec: RunSpec) -> str:
    """Why ``spec``'s execution and precision cannot run on a CPU in its framework ('' when they can): its record's
    ``cpu_missing``. Its engine refuses them in a trial on a CPU; parity, whose probes always run on the CPU, before
    any starts."""
    return frameworks.get(spec.framework.value).cpu_missing.get((spec.execution, spec.precision), "")


def data_problem(spec: RunSpec, entries: Sequence[str]) -> str:
    """Why the model of ``spec``'s framework cannot read batches holding ``entries`` ('' when it can): checked for
    a Keras function, whose input and labels are declared by name (a ModelImpl reads the batch itself)."""
    if models(spec).get(spec.framework.value) != discover.KERAS_FUNCTION_MODEL:
        return ""
    why = keras_function.data_problem(workload_class(spec).keras_function, entries)
    return f"{spec.workload} on {spec.framework.value}: {why}" if why else ""


def launcher(spec: RunSpec) -> str:
    """The launcher that starts ``spec``'s processes (:mod:`bakeoff.run.launchers`)."""
    return frameworks.get(spec.framework.value).launchers[spec.parallelism]


def not_installed(framework: str) -> str:
    """Why ``framework``'s trials cannot run in this environment ('' when they can), with the install command."""
    info = frameworks.get(framework)
    missing = [m for m in info.modules if importlib.util.find_spec(m) is None]
    if not missing:
        return ""
    return f"{info.display} is not installed (missing {', '.join(missing)}); install it with: {info.install_hint}"


def load(target: str) -> Any:
    """Import ``"module:attr"`` and return the attribute."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def installed(framework: str) -> bool:
    """Whether the framework's packages are importable, without importing them."""
    return not not_installed(framework)


def workload_class(which: RunSpec | str) -> type[Workload]:
    """The Workload class a spec names, or a name or reference (``MODULE:CLASS``, ``FILE.py:CLASS``) does;
    raises :class:`SpecError` naming the bad value and the accepted forms."""
    if isinstance(which, RunSpec):
        return discover.load(discover.entry_of(which.workload, which.workload_class, which.workload_path))
    return discover.load(discover.resolve(which))


def workload_fields(text: str) -> dict[str, str]:
    """The RunSpec fields naming the workload ``text`` names (a name, ``MODULE:CLASS`` or ``FILE.py:CLASS``): its
    name, and for a workload found by reference rather than by name, ``workload_class`` and ``workload_path``, what
    a trial process resolves it by."""
    entry = discover.resolve(text)
    if entry.origin != "reference":
        return {"workload": entry.name}
    return {"workload": entry.name, "workload_class": entry.target, "workload_path": entry.path}


def workload(which: RunSpec | str) -> Workload:
    """An instance of the workload ``which`` names (:func:`workload_class`)."""
    return workload_class(which)()


def workload_names() -> list[str]:
    """Every workload known by name: shipped, then installed packages' (the ``bakeoff.workloads`` entry points)."""
    return discover.names()


def models(which: RunSpec | str) -> dict[str, str]:
    """``{framework: "module:Class"}`` of each framework implementing the workload ``which`` names."""
    return discover.models(workload_class(which))


def model_class(which: RunSpec | str, framework: str | Framework) -> Any:
    """The model class (a :class:`~bakeoff.core.workload.ModelImpl`) of ``framework`` for the workload ``which``
    names; imports the framework."""
    cls = workload_class(which)
    table = discover.models(cls)
    name = str(framework)
    if name not in table:
        raise SpecError(f"no {name} implementation of {cls.name}; available: {', '.join(table)}")
    module, _, attr = table[name].partition(":")
    found = getattr(importlib.import_module(module), attr, None)
    if found is None:
        raise SpecError(f"{cls.name}'s {name} model {table[name]!r}: module {module} has no {attr}")
    if table[name] == discover.KERAS_FUNCTION_MODEL:  # one class for every Keras function: bound to this one's
        return found.bound(cls.keras_function)
    return found


def engine_class(framework: str | Framework) -> Any:
    name = str(framework)
    if name not in frameworks.FRAMEWORKS:
        raise SpecError(f"no engine for framework {name!r}; available: {', '.join(frameworks.FRAMEWORKS)}")
    return load(frameworks.get(name).engine)
