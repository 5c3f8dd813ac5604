"""Where a suite's trials execute (:mod:`.base` says what every executor keeps to): :mod:`.local` runs them one
after another on this machine; :mod:`.ray_executor` as Ray tasks on a cluster, :mod:`.slurm_executor` as Slurm
jobs. ``bakeoff run --executor NAME[=ARGUMENT]`` picks one by its record here; adding an executor is one record and
its own module, imported only when it is asked for."""

from __future__ import annotations

import dataclasses
import importlib

from bakeoff.core.spec import SpecError
from bakeoff.run.executors.executor import Executor


@dataclasses.dataclass(frozen=True)
class ExecutorRecord:
    """One executor: its name, the class that implements it (``module:Class``, imported when asked for), what its
    argument means, and what it needs installed."""

    name: str
    implementation: str
    argument: str = ""  # what NAME=ARGUMENT means ('' when it takes none)
    options: str = ""  # what may follow it, or the name alone, after a comma: NAME[=ARGUMENT][,OPTIONS]
    help: str = ""


EXECUTORS: dict[str, ExecutorRecord] = {record.name: record for record in (
    ExecutorRecord("local", "bakeoff.run.executors.local:LocalExecutor",
                   help="each trial on this machine, one after another (the default)"),
    ExecutorRecord("ray", "bakeoff.run.executors.ray_executor:RayExecutor",
                   argument="ADDRESS", options="workers-per-node=K",
                   help="each trial a Ray task, several at once: a Ray instance on this machine for the run, or the "
                        "cluster at ADDRESS (auto, HOST:6379, ray://HOST:10001); a multi_worker trial of more than "
                        "K workers spans nodes, K on each (a placement group); needs pip install 'bakeoff[ray]'"),
    ExecutorRecord("slurm", "bakeoff.run.executors.slurm_executor:SlurmExecutor",
                   argument="PARTITION", options="workers-per-node=K",
                   help="each trial a Slurm job (sbatch), on PARTITION or the cluster's default one; a "
                        "multi_worker trial of more than K workers spans nodes, K on each; the store's folder must "
                        "be on a file system the nodes share, at the same path"),
)}


def describe() -> str:
    """The accepted forms, one per executor, for ``--help`` and errors."""
    return "; ".join(f"{r.name}{f'[={r.argument}]' if r.argument else ''}{f'[,{r.options}]' if r.options else ''}: "
                     f"{r.help}" for r in EXECUTORS.values())


def parse(text: str) -> Executor:
    """The executor ``text`` names: ``local``, or ``NAME=ARGUMENT`` for one that takes an argument; an argument of
    options alone may follow the name after a comma (``slurm,workers-per-node=2``: the default partition)."""
    name, _, argument = text.strip().partition("=")
    if "," in name:  # NAME,OPTION=VALUE: the comma came before any "="
        name, _, rest = text.strip().partition(",")
        argument = "," + rest
    record = EXECUTORS.get(name.strip().lower())
    if record is None:
        raise SpecError(f"--executor {text!r}: unknown executor; accepted: {describe()}")
    if argument and not record.argument:
        raise SpecError(f"--executor {text!r}: {record.name} takes no argument; accepted: {describe()}")
    module, _, cls = record.implementation.partition(":")
    implementation = getattr(importlib.import_module(module), cls)
    return implementation(argument.strip()) if record.argument else implementation()
