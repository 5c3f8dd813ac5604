"""The launcher contract: what a launcher is (:class:`Launcher`), what it starts its members from
(:class:`Start`) and what it makes (:class:`Plan` of :class:`Member` processes). :mod:`bakeoff.run.launchers`
chooses one per trial and runs its group; a framework's own launchers (torchrun's, a cluster's environment
variables) are records in its folder's ``launch.py`` and are found through its record (``launch``). Framework-free,
importing nothing else of bakeoff but the spec.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence

from bakeoff.core.spec import RunSpec

HOST = "127.0.0.1"
"""Loopback: where every member of a trial on one machine listens."""

PARAMETER_SERVERS = 1
"""Parameter-server processes of a ``parameter_server`` trial (``workers`` counts the workers)."""


@dataclasses.dataclass
class Member:
    """One process of a trial's group."""

    name: str  # "trial", "torchrun", "node 1", "worker 0", "ps 0"
    command: list[str]
    env: dict[str, str]
    writes_result: bool  # the group is done when every such member has exited
    host: str = ""  # the machine of its worker (plan's ``hosts``); an executor's placement starts it there


@dataclasses.dataclass
class Plan:
    launcher: str
    members: list[Member]
    ranks: int  # rank results expected (result.json, result.rank1.json, ...)
    processes: int  # trial processes (torchrun's agents not counted; servers counted)
    threads: int  # CPU threads each computing process is given
    warnings: list[str] = dataclasses.field(default_factory=list)


def trial_command(args: Sequence[str]) -> list[str]:
    """A trial process's command: ``python -m bakeoff.trial ARGS``."""
    return [sys.executable, "-m", "bakeoff.trial", *args]


@dataclasses.dataclass
class Start:
    """What a launcher starts its members from (:func:`plan`)."""

    spec: RunSpec
    args: Sequence[str]  # the trial's command-line arguments (its request file)
    env: dict[str, str]  # the environment every member starts from
    ports: list[int]  # free ports, as many as the launcher's ``ports(workers)``
    hosts: list[str]  # one per worker (loopback for every worker on this machine)
    threads: int
    warnings: list[str]

    @property
    def workers(self) -> int:
        return self.spec.workers

    def plan(self, launcher: str, members: list[Member], ranks: int, processes: int) -> Plan:
        return Plan(launcher, members, ranks, processes, self.threads, self.warnings)


@dataclasses.dataclass(frozen=True)
class Launcher:
    """One kind of process group: how many ports it needs, how its members start, and how its failures are read.
    A framework's record names one per parallelism (:mod:`bakeoff.core.frameworks`); a framework's launchers are
    records in its folder's ``launch.py`` (``LAUNCHERS``), with the functions that start their members; bakeoff's
    own, ``single``, is in :mod:`bakeoff.run.launchers`."""

    name: str
    start: Callable[[Start], Plan]
    program: str = "bakeoff"  # what starts the members and reports on them: bakeoff itself, or the framework's own
    ports: Callable[[int], int] = lambda workers: 0  # free ports to choose for ``workers`` workers
    group: bool = True  # several processes: each computing process shares the cores, ports can clash, ranks merge
    gpu_per_rank: bool = False  # on GPUs, each rank takes the GPU at its local rank (NCCL: one rank per GPU)
    root_cause: Callable[[str], tuple[int, int] | None] = lambda log: None
    """(rank, exit code) of the failure the launcher's own log names as the one that ended the group, if any."""
    served_port: Callable[[Mapping[str, str]], int | None] = lambda env: None
    """The port a member with this environment serves on, read from it (checked free on its node before it starts),
    for a launcher whose members serve at ports the plan chose; None for none."""


def local_ranks(hosts: Sequence[str]) -> list[int]:
    """Each worker's index among the trial's workers on its machine (the workers of each host numbered in rank
    order)."""
    seen: dict[str, int] = {}
    out = []
    for host in hosts:
        out.append(seen.get(host, 0))
        seen[host] = out[-1] + 1
    return out
