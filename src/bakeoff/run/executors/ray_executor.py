"""``bakeoff run --executor ray[=ADDRESS]``: each trial a Ray task on the node Ray picks, this process the only
writer of the store.

``ray`` alone starts a Ray instance for the run on this machine (or joins the one ``RAY_ADDRESS`` names);
``ray=ADDRESS`` connects to a running cluster: ``auto``, ``HOST:6379`` (its head), ``ray://HOST:10001`` (Ray
Client). Every node must have bakeoff, its frameworks and the same Ray installed, and see this run's folder and the
store's folder at the same paths (a trial runs in the run's folder, as a local one does, reading its data there;
logs, checkpoints and TensorBoard runs are written to the store's folder; the results come back to this process).

A multi-node trial (``ray=ADDRESS,workers-per-node=K``: a ``multi_worker`` trial of more than K workers) gets a
placement group of ``ceil(workers / K)`` bundles, one per node (``STRICT_SPREAD``), each what K workers need; its
task runs on the first bundle and starts the process group with each bundle's node address as its workers' hosts
(:mod:`bakeoff.run.launchers`: torchrun's rendezvous, TF_CONFIG's worker 0 and JAX's coordinator on the first
node). Each node's K workers are one unit (:mod:`bakeoff.run.executors.node`), so that one task holds the node's
bundle whole (#51: a task per worker asked for the bundle K times, and the second never started). The unit of
another node is started there by a small proxy process (``python -m bakeoff.run.executors.ray_executor member
...``, a member of the group here like any other) that runs it as a Ray task in that node's bundle, writing to the
unit's log, and ends with it: killed with the group, it takes its Ray connection with it, so Ray ends the remote
task, whose unit is tethered to its worker (and the unit's ranks to the unit). The placement group is
removed when the trial ends. The trial's hosts and nodes are in ``execution.hosts`` and ``execution.nodes``.

A task (:func:`_trial`) runs :func:`~bakeoff.run.executors.local.run_here` on its node: the local executor's
process group, whose members are tethered to the task's worker (:mod:`bakeoff.core.tether`; Ray runs a task on its
worker's main thread, checked and recorded per trial, so PR_SET_PDEATHSIG fires when the worker dies, not when a
thread ends).
It first writes where it runs (node, host, worker) to a small file under the store's folder, so the run knows the
trial has started, and where, even if its worker dies; then it returns the result. (A plain task, not a streaming
one: the run only ever asks Ray for a result Ray says is ready, so no Ray call here waits longer than
:data:`POLL_S` and a Ctrl-C is seen within it; a streaming generator's ``next`` may wait without a bound.)

- Resources (:func:`bakeoff.run.executors.executor.resources`): ``num_cpus`` its threads × processes; a trial that
  does not say its threads uses every core it sees, so it asks for as many CPUs as the cluster's largest node has
  (it runs alone on such a node; on a cluster of unequal nodes it runs only on the largest). Whole GPUs, one per
  replica: required by ``--device cuda``; with ``--device auto`` asked for only when the cluster has GPUs. A trial
  that no node can hold is recorded failed with the reason at once, rather than waiting forever.
- ``max_retries=0``, ``retry_exceptions=False``: a timed trial run twice would be measured twice.
- A task whose worker died or which Ray cancelled is a failed result with Ray's reason; the run goes on.
- Ctrl-C / SIGTERM (:class:`bakeoff.run.process.Interrupted`): every task still queued or running is cancelled
  with ``force=True`` (its worker killed, so its trial's processes die with it), this process waits for Ray to
  confirm each, then the interrupt propagates. Nothing of the cut-off trials is stored.

Ray turns a signal that interrupts its blocking calls into a plain ``KeyboardInterrupt`` (losing SIGTERM's exit
code), so every Ray call here is made with signals held (:func:`bakeoff.run.process.hold`), and waits are short.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bakeoff.core.result import TrialResult
from bakeoff.core.spec import SpecError
from bakeoff.run.executors.executor import (
    Done,
    Executor,
    Started,
    TrialJob,
    executor_record,
    nodes_for,
    parse_options,
    resources,
)
from bakeoff.run.executors.local import remove_shared
from bakeoff.run.executors.ray_node import (
    CANCEL_WAIT_S,
    NAMESPACE,
    POLL_S,
    Group,
    _failure,
    _in_bundle,
    _reason,
    _trial,
    member_main,
)
from bakeoff.run.process import Interrupted, hold

log = logging.getLogger("bakeoff.run.executors.ray")

INSTALL = "pip install 'bakeoff[ray]'"
ADDRESSES = ("ray (a Ray instance on this machine for the run), ray=auto, ray=HOST:6379, ray=ray://HOST:10001, "
             "each optionally followed by ,workers-per-node=K (K a positive integer)")
CONNECT_TIMEOUT_S = 10.0
"""How long a cluster's head (or Ray Client server) has to accept a connection."""


@dataclasses.dataclass(frozen=True)
class Cluster:
    """What the run's Ray cluster offers, read once when the run connects."""

    address: str
    each: tuple[tuple[float, float], ...]  # every live node's (CPUs, GPUs)

    @property
    def nodes(self) -> int:
        return len(self.each)

    @property
    def cpus(self) -> float:
        """In the whole cluster."""
        return sum(c for c, _ in self.each)

    @property
    def node_cpus(self) -> float:
        """On its largest node."""
        return max((c for c, _ in self.each), default=0.0)

    @property
    def node_gpus(self) -> float:
        """On the node with the most."""
        return max((g for _, g in self.each), default=0.0)

    def ask(self, job: TrialJob, workers_per_node: int | None = None) -> tuple[dict[str, float], int, str | None]:
        """The Ray resources ``job``'s trial asks for on each of its nodes, how many nodes it spans
        (:func:`~bakeoff.run.executors.executor.nodes_for`), and why the cluster cannot hold it (None when it can)."""
        need = resources(job.spec)
        nodes = nodes_for(job.spec, workers_per_node)
        if nodes > 1:  # each node runs workers_per_node of the workers (the last node may run fewer)
            per_node = workers_per_node or 1
            need = dataclasses.replace(need, cpus=job.spec.threads * per_node if job.spec.threads else None,
                                       gpus=per_node if need.gpus else 0)
        cpus = float(need.cpus) if need.cpus is not None else self.node_cpus
        gpus = float(need.gpus) if need.gpus_required or self.node_gpus > 0 else 0.0
        asked = {"num_cpus": cpus, "num_gpus": gpus}
        if nodes == 1 and (cpus > self.node_cpus or gpus > self.node_gpus):
            return asked, 1, (f"no node of the Ray cluster at {self.address} can hold this trial: it needs {cpus:g} "
                              f"CPUs and {gpus:g} GPUs on one node; the largest has {self.node_cpus:g} CPUs, the "
                              f"most GPUs on one node are {self.node_gpus:g}")
        able = sum(c >= cpus and g >= gpus for c, g in self.each)
        if nodes > 1 and able < nodes:
            return asked, nodes, (f"the Ray cluster at {self.address} cannot hold this trial: it spans {nodes} nodes "
                                  f"(workers-per-node={workers_per_node}), each with {cpus:g} CPUs and {gpus:g} "
                                  f"GPUs, and {able} of its {self.nodes} nodes have that much")
        return asked, nodes, None


def _where_file(job: TrialJob) -> Path:
    """Where the task of ``job`` says it has started: beside the store's logs (the nodes see the store's folder)."""
    return (job.log_dir.parent / "ray" / f"{job.spec.key()}.where.json").absolute()


def _read_where(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclasses.dataclass
class _Flight:
    """A submitted job and what is known of it so far."""

    job: TrialJob
    submitted_at: float
    asked: dict[str, float]
    where_file: Path
    reserved: Any = None  # a multi-node trial's placement group (Ray's handle)
    where: dict | None = None  # where the task runs, once it said


class RayExecutor(Executor):
    """Trials as Ray tasks, several at once on the cluster's nodes (module docstring)."""

    name = "ray"

    def __init__(self, options: str = "") -> None:
        self.address, self.workers_per_node = parse_options("ray", options, ADDRESSES)  # "": a Ray instance here
        try:
            import ray  # noqa: F401  (imported here only to fail before anything runs)
        except ImportError as exc:
            raise SpecError(f"--executor ray: Ray is not installed ({exc}); install it with {INSTALL}") from None
        # A cluster's nodes have their own GPUs (a trial no node can hold is refused by Cluster.ask) and timings; a
        # Ray instance started here for the run runs its trials on this machine, under its measuring lock.
        self.remote = bool(self.address)
        self._cluster: Cluster | None = None

    def describe(self) -> str:
        cluster = self._connect()
        return (f"ray at {cluster.address}: {cluster.nodes} node{'s' if cluster.nodes != 1 else ''}, "
                f"{cluster.cpus:g} CPUs, at most {cluster.node_gpus:g} GPUs on one node")

    def _connect(self) -> Cluster:
        """Join (or start) the cluster once; a bad address is a :class:`SpecError` naming it."""
        if self._cluster is not None:
            return self._cluster
        import ray

        _check_reachable(self.address)
        signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            ray.init(address=self.address or None, namespace=NAMESPACE, include_dashboard=False,
                     log_to_driver=False, ignore_reinit_error=True)
            nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
            address = ray.get_runtime_context().gcs_address
        except Exception as exc:  # Ray raises ConnectionError, ValueError, RuntimeError... for an address it can't use
            given = f"ray={self.address}" if self.address else "ray"
            raise SpecError(f"--executor {given}: cannot connect to Ray ({' '.join(str(exc).split())}); accepted: "
                            f"{ADDRESSES}") from None
        finally:
            for s, handler in signals.items():  # ray.init sets its own SIGTERM handler; the run keeps its own
                signal.signal(s, handler)
        self._cluster = Cluster(address=self.address or address,
                                each=tuple((n.get("CPU", 0.0), n.get("GPU", 0.0)) for n in nodes))
        log.info("connected: %s", self._cluster)
        return self._cluster

    def run(self, jobs: Iterable[TrialJob], started: Started, done: Done) -> None:
        import ray

        cluster = self._connect()
        task = ray.remote(max_retries=0, retry_exceptions=False)(_trial)
        # No more trials can run at once than the cluster has CPUs (each asks for one at least): jobs are made and
        # submitted as room opens, so a job is made late (a ceiling probed meanwhile is known) and few are queued.
        window = max(1, int(cluster.cpus))
        flight: dict[Any, _Flight] = {}
        queue = iter(jobs)
        try:
            more = True
            while more or flight:
                while more and len(flight) < window:
                    job = next(queue, None)
                    if job is None:
                        more = False
                        break
                    asked, nodes, refused = cluster.ask(job, self.workers_per_node)
                    if refused:
                        started(job)
                        done(job, _failure(job, refused))
                        continue
                    where_file = _where_file(job)
                    where_file.unlink(missing_ok=True)  # an earlier attempt's must not stand for this one
                    with hold():
                        submitted = time.time()
                        options, group, reserved = dict(asked), None, None
                        if nodes > 1:  # one bundle a node; this trial's task on the first, its proxies' on the rest
                            group, reserved = _place_group(job, nodes, self.workers_per_node or 1, asked)
                            options["scheduling_strategy"] = _in_bundle(reserved, 0)
                        ref = task.options(**options).remote(job, os.getcwd(), str(where_file), group)
                    flight[ref] = _Flight(job, submitted, asked, where_file, reserved)
                if flight:
                    self._step(flight, started, done, cluster)
        except BaseException as exc:
            with contextlib.suppress(Interrupted):  # a second Ctrl-C while stopping adds nothing
                with hold():
                    _cancel(flight)
            if isinstance(exc, Interrupted) and exc.stopped is None and flight:
                cut = [f.job.what for f in flight.values()]
                exc.stopped = cut[0] if len(cut) == 1 else f"{len(cut)} trials ({'; '.join(cut)})"
            raise

    def _step(self, flight: dict[Any, _Flight], started: Started, done: Done, cluster: Cluster) -> None:
        """Wait a little for the tasks; say which have started, and hand on each result that came. Nothing here
        blocks longer than :data:`POLL_S`: a task's result is only asked for once Ray says it is ready."""
        import ray

        with hold():
            ready, _ = ray.wait(list(flight), num_returns=len(flight), timeout=POLL_S)
        for ref, current in flight.items():
            if current.where is None and ref not in ready:
                current.where = _read_where(current.where_file)
                if current.where is not None:
                    started(current.job)
        for ref in ready:
            current = flight.pop(ref)
            try:
                with hold():
                    out = ray.get(ref, timeout=POLL_S)  # ready: it does not wait
                result = TrialResult.from_dict(out["result"])
                where = out["where"]
            except ray.exceptions.RayError as exc:  # the worker died, the task was cancelled or raised
                result, where = _failure(current.job, _reason(exc)), _read_where(current.where_file)
                remove_shared(current.job)
            if current.where is None:
                started(current.job)
            current.where = where or current.where
            current.where_file.unlink(missing_ok=True)
            _remove_group(current.reserved)
            done(current.job, self._record(result, current, cluster))

    @staticmethod
    def _record(result: TrialResult, current: _Flight, cluster: Cluster) -> TrialResult:
        where = current.where or {}
        result.execution.executor = executor_record(
            "ray", submitted_at=current.submitted_at, started_at=result.setup.started_at,
            address=cluster.address, node=where.get("node"), host=where.get("host"),
            worker_pid=where.get("worker_pid"), main_thread=where.get("main_thread"), nice=where.get("nice"),
            resources=current.asked)
        return result


def _place_group(job: TrialJob, nodes: int, workers_per_node: int, asked: dict[str, float]) -> tuple[Group, Any]:
    """Reserve ``nodes`` nodes for ``job``'s trial: a placement group of one bundle per node (``STRICT_SPREAD``),
    named so that its members' proxies find it; the group and Ray's handle of it."""
    from ray.util import placement_group

    group = Group(f"bakeoff-{job.spec.key()}-{os.getpid()}-{time.time_ns()}", nodes, workers_per_node, asked)
    return group, placement_group(group.bundles(), strategy="STRICT_SPREAD", name=group.name)


def _remove_group(reserved: Any) -> None:
    """Give back a finished trial's nodes; any task still in its bundles (a proxy's member) is killed with it."""
    if reserved is None:
        return
    from ray.util import remove_placement_group

    with contextlib.suppress(Exception), hold():
        remove_placement_group(reserved)


def _check_reachable(address: str) -> None:
    """Refuse at once an address where nothing answers: Ray itself retries a dead head for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():  # "" or "auto": Ray finds the cluster (or says there is none)
        return
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise SpecError(f"--executor ray={address}: nothing answers at {host}:{port} ({exc}); is the cluster's "
                        f"head up? accepted: {ADDRESSES}") from None


def _cancel(flight: dict[Any, _Flight]) -> None:
    """Cancel every task in ``flight`` (its worker killed: the trial's tethered processes die with it) and wait,
    up to :data:`CANCEL_WAIT_S`, until Ray says each has ended (each wait at most :data:`POLL_S`)."""
    import ray

    for ref in flight:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)
    left = list(flight)
    deadline = time.monotonic() + CANCEL_WAIT_S
    while left and time.monotonic() < deadline:
        _, left = ray.wait(left, num_returns=len(left), timeout=POLL_S)
    for current in flight.values():
        current.where_file.unlink(missing_ok=True)
        _remove_group(current.reserved)
        remove_shared(current.job)  # the trial's folder on the store's, which its killed task could not remove
    if left:
        log.warning("Ray did not confirm the end of %d cancelled trials within %.0f s: %s", len(left),
                    CANCEL_WAIT_S, ", ".join(flight[ref].job.what for ref in left))


if __name__ == "__main__":
    if sys.argv[1:2] != ["member"]:
        sys.exit("usage: python -m bakeoff.run.executors.ray_executor member --address GCS --group NAME --bundle I "
                 "--cpus C --gpus G -- COMMAND...")
    sys.exit(member_main(sys.argv[2:]))
