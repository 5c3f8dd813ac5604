"""What an executor is: where the trials of a run execute, while the submitting ``bakeoff run`` stays the only
writer of the store.

The runner (:func:`bakeoff.run.runner.run`) decides which trials run, in which order, and stores each result as it
comes back; an :class:`Executor` only executes :class:`TrialJob` s, each as one trial process group started by the
same launcher wherever its engine puts it (:func:`bakeoff.run.executors.local.run_here` on the node): here, one after
another (``local``), as Ray tasks (``ray``) or Slurm jobs (``slurm``).

The contract every executor keeps:

- ``done(job, result)`` is called in the calling thread, once per job, with a :class:`TrialResult` whatever
  happened to the job (crashed, timed out, cancelled, preempted, its node lost): the caller stores it.
- No job is retried behind the runner's back (a timed trial run twice would be measured twice).
- When :class:`bakeoff.run.process.Interrupted` (Ctrl-C, SIGTERM) reaches :meth:`Executor.run`, every job still
  running or queued is cancelled and every process of it, on every node, ends before the exception propagates;
  the jobs that were cut off are not recorded (they run again on the next ``bakeoff run``).
- No process of a trial outlives it: a trial that passes its timeout is killed on its node.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec, SpecError
from bakeoff.trial.profile import Request as ProfileRequest

if TYPE_CHECKING:
    from bakeoff.run.launchers import Member

MemberPlacer = Callable[["Member"], "Member"]
"""How a member of a trial's group starts on its host (:attr:`Member.host`): the member itself where it starts here."""
Started = Callable[["TrialJob"], None]
Done = Callable[["TrialJob", TrialResult], None]


@dataclasses.dataclass(frozen=True)
class TrialJob:
    """One trial to execute: its spec, its place in the run, and what its process group is given
    (:func:`~bakeoff.run.executors.local.run_here` hands it to :func:`~bakeoff.run.executors.local.run_one`; every
    path is under the store's folder, which a remote node must see at the same path)."""

    spec: RunSpec
    position: int  # 1-based place in the planned order of the whole run
    timeout_s: float
    log_dir: Path
    checkpoint_dir: Path | None = None
    tensorboard_dir: Path | None = None
    keep_dir: Path | None = None
    probe_ceiling: bool = False
    profile: ProfileRequest | None = None
    evaluate: bool = True

    @property
    def what(self) -> str:
        spec = self.spec
        return spec.title()


def executor_record(name: str, *, submitted_at: float, started_at: float | None = None, **more: object) -> dict:
    """A result's ``execution.executor`` record: which executor ran it, when it was handed over (``time.time()``)
    and when its trial began on its node, and the scheduling overhead between the two."""
    record: dict = {"name": name, "submitted_at": submitted_at, "started_at": started_at}
    if started_at is not None:
        record["scheduling_s"] = max(0.0, started_at - submitted_at)
    record.update(more)
    return record


class Executor(abc.ABC):
    """Where a run's trials execute. One instance serves one ``bakeoff run``."""

    name: str = ""
    remote: bool = False
    """Whether the trials run on other machines (a cluster's nodes): this machine's GPUs then say nothing of theirs
    (``--device cuda`` is the executor's to check on its nodes), and its measuring lock (:mod:`bakeoff.run.machine`)
    guards nothing of their timings."""

    def describe(self) -> str:
        """One line for the console and the dry run: which engine, where."""
        return self.name

    @abc.abstractmethod
    def run(self, jobs: Iterable[TrialJob], started: Started, done: Done) -> None:
        """Execute every job ``jobs`` yields; ``started(job)`` when its trial starts (as far as the executor knows),
        ``done(job, result)`` in this thread as each ends. ``jobs`` may be lazy: the local executor takes the next
        one only after the previous is done, so what a job is given may depend on the results before it."""


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one trial asks a cluster for. ``cpus`` None: every core of its node (a trial that does not say its
    threads uses all the cores it sees, so it must not share them: another trial beside it would load its
    timings). ``gpus``: whole GPUs, one per replica (:attr:`bakeoff.run.launchers.Launcher.gpu_per_rank`,
    TensorFlow's strategies likewise), none on ``--device cpu``; ``gpus_required``: ``--device cuda`` (with
    ``--device auto`` an executor asks for them only where the cluster has GPUs)."""

    cpus: int | None
    gpus: int
    gpus_required: bool


def resources(spec: RunSpec) -> Resources:
    """The resources ``spec``'s trial needs on its node (all of it on one node)."""
    from bakeoff.core import registry
    from bakeoff.core.spec import Device, Parallelism
    from bakeoff.run import launchers

    launcher = launchers.LAUNCHERS[registry.launcher(spec)]
    processes = spec.workers if launcher.group else 1  # the processes that compute, spec.threads threads each
    if spec.parallelism is Parallelism.PARAMETER_SERVER:
        processes = 1 + spec.workers + launchers.PARAMETER_SERVERS
    gpus = 0 if spec.device is Device.CPU else spec.workers if spec.parallelism is not Parallelism.NONE else 1
    return Resources(cpus=spec.threads * processes if spec.threads else None, gpus=gpus,
                     gpus_required=spec.device is Device.CUDA)


def parse_options(executor: str, options: str, accepted: str) -> tuple[str, int | None]:
    """``--executor EXECUTOR=OPTIONS`` of a cluster's executor, ``[WHERE][,workers-per-node=K]``: WHERE ('' when not
    given: a Ray address, a Slurm partition) and K (None: every trial on one node). Anything else is a
    :class:`SpecError` naming the item and the ``accepted`` forms."""
    where, per_node = "", None
    for item in (part.strip() for part in options.split(",")):
        name, equals, value = item.partition("=")
        if not item:
            continue
        if name == "workers-per-node" and value.isdigit() and int(value) > 0:
            per_node = int(value)
        elif not equals and not where:
            where = item
        else:
            raise SpecError(f"--executor {executor}={options}: {item!r} is not understood; accepted: {accepted}")
    return where, per_node


def nodes_for(spec: RunSpec, workers_per_node: int | None) -> int:
    """How many nodes ``spec``'s trial spans on an executor told ``workers-per-node=K``: more than one only for a
    ``multi_worker`` trial of more workers than K (data parallel and parameter servers stay on one node)."""
    from bakeoff.core.spec import Parallelism

    if workers_per_node is None or spec.parallelism is not Parallelism.MULTI_WORKER:
        return 1
    return math.ceil(spec.workers / workers_per_node)


def spread(nodes: Sequence[str], workers: int, workers_per_node: int) -> list[str]:
    """Each worker's node, in rank order: the first ``workers_per_node`` on the first node, and so on."""
    return [nodes[i // workers_per_node] for i in range(workers)]
