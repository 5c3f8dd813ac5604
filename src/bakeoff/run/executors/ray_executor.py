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

- Resources (:func:`bakeoff.run.executors.base.resources`): ``num_cpus`` its threads × processes; a trial that
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
import functools
import json
import logging
import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bakeoff.core.result import TrialResult
from bakeoff.core.spec import SpecError, Status
from bakeoff.run.executors.base import (
    Done,
    Executor,
    Placement,
    Started,
    TrialJob,
    executor_record,
    nodes_for,
    parse_options,
    resources,
    spread,
)
from bakeoff.run.executors.local import remove_shared, run_here
from bakeoff.run.launchers import Member
from bakeoff.run.process import Interrupted, hold

log = logging.getLogger("bakeoff.run.executors.ray")

INSTALL = "pip install 'bakeoff[ray]'"
ADDRESSES = ("ray (a Ray instance on this machine for the run), ray=auto, ray=HOST:6379, ray=ray://HOST:10001, "
             "each optionally followed by ,workers-per-node=K (K a positive integer)")
NAMESPACE = "bakeoff"
"""The Ray namespace of the run and of its members' proxies, which find a trial's placement group by its name."""
POLL_S = 0.2
"""Longest wait inside one Ray call: signals are held meanwhile, so this is how late a Ctrl-C may be seen."""
CONNECT_TIMEOUT_S = 10.0
"""How long a cluster's head (or Ray Client server) has to accept a connection."""
CANCEL_WAIT_S = 60.0
"""How long an interrupted run waits for Ray to confirm that its cancelled tasks ended."""


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
        (:func:`~bakeoff.run.executors.base.nodes_for`), and why the cluster cannot hold it (None when it can)."""
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


@dataclasses.dataclass(frozen=True)
class Group:
    """A multi-node trial's placement group, as its task and its members' proxies find it (by name)."""

    name: str
    nodes: int
    workers_per_node: int
    asked: dict[str, float]  # each bundle's (each node's) resources, as a task asks for them

    def bundles(self) -> list[dict[str, float]]:
        wanted = {"CPU": self.asked["num_cpus"], "GPU": self.asked["num_gpus"]}
        return [{k: v for k, v in wanted.items() if v > 0}] * self.nodes


def _trial(job: TrialJob, folder: str, where_file: str, group: Group | None = None) -> dict:
    """The Ray task: where it runs (also written at once to ``where_file``, under the store's folder, so that the run
    knows the trial has started, and where, even if its worker dies) and the trial's result (as a dict: the driver
    reads it with :meth:`TrialResult.from_dict`, which migrates a result an older bakeoff on the node wrote).

    It runs in the run's ``folder``, as a local trial does: the store's folder, data files and workload files may be
    given relative to it (a worker starts in its node's folder, wherever ``ray start`` ran)."""
    import ray

    main = threading.current_thread() is threading.main_thread()
    if not main:  # the trial's members would die with this thread rather than with the worker
        logging.getLogger(__name__).warning("Ray runs this task off its worker's main thread")
    where = {"node": ray.get_runtime_context().get_node_id(), "host": platform.node(), "worker_pid": os.getpid(),
             "main_thread": main, "nice": _unniced()}
    hosts, place = None, None
    if group is not None:  # this task holds the first bundle; the members of the others start through proxies
        hosts, nodes, place = _placed(group, job.spec.workers)
        where.update(hosts=hosts, nodes=nodes)
    with contextlib.suppress(OSError):  # a node that does not see the store's folder says so below
        partial = Path(where_file + ".part")
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(where))
        partial.replace(where_file)
    if not os.path.isdir(folder):
        return {"where": where, "result": _failure(job, f"the run's folder {folder} is not on {platform.node()}: "
                                                        "every node must see it (and the store's folder) at the "
                                                        "same path").to_dict()}
    before = os.getcwd()
    os.chdir(folder)
    try:
        result = run_here(job, hosts=hosts, place=place)
    finally:
        os.chdir(before)
    if hosts is not None:
        result.execution.hosts, result.execution.nodes = hosts, where["nodes"]
    return {"where": where, "result": result.to_dict()}


def _placed(group: Group, workers: int) -> tuple[list[str], list[str], Placement]:
    """In a multi-node trial's task: each worker's host (its bundle's node address, K workers a node in rank
    order), each bundle's node, and how a member whose host is another node starts there (:func:`_proxied`)."""
    import ray
    from ray.util import get_placement_group, placement_group_table

    table = placement_group_table(get_placement_group(group.name))["bundles_to_node_id"]
    nodes = [table[i] for i in range(group.nodes)]
    addresses = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    bundle_hosts = [addresses[node] for node in nodes]
    hosts = spread(bundle_hosts, workers, group.workers_per_node)
    bundle_of: dict[str, int] = {}
    for index, host in enumerate(bundle_hosts):
        bundle_of.setdefault(host, index)
    proxy = _Proxy(ray.get_runtime_context().gcs_address, group, bundle_of)
    return hosts, nodes, functools.partial(_proxied, bundle_hosts[0], proxy)


@dataclasses.dataclass(frozen=True)
class _Proxy:
    address: str  # the cluster's GCS
    group: Group
    bundle_of: dict[str, int]  # a host's bundle


def _proxied(here: str, proxy: _Proxy, member: Member) -> Member:
    """``member`` (a node's unit, :mod:`bakeoff.run.executors.node`) started on its host from the trial's task on
    ``here``: as it is when its host is this node, else through a proxy (:func:`member_main`) that runs it as a Ray
    task holding its host's bundle whole."""
    if not member.host or member.host == here:
        return member
    asked = proxy.group.asked
    command = [sys.executable, "-m", "bakeoff.run.executors.ray_executor", "member", "--address", proxy.address,
               "--group", proxy.group.name, "--bundle", str(proxy.bundle_of[member.host]),
               "--cpus", repr(asked["num_cpus"]), "--gpus", repr(asked["num_gpus"]), "--", *member.command]
    return dataclasses.replace(member, name=f"{member.name} on {member.host}", command=command)


def _unniced() -> int:
    """Undo Ray's worker niceness, where allowed: Ray starts its workers at niceness 15 (its ``worker_niceness``),
    so a trial there, and every process it starts, would yield its cores to any process at the default and be
    timed so. Back to 0 where this process may raise its priority (root, CAP_SYS_NICE); otherwise it stays, is
    recorded, and the cluster should be started with ``RAY_worker_niceness=0``. The niceness the trial runs at."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    if nice:
        logging.getLogger(__name__).warning("this trial runs at niceness %d (Ray's worker niceness): start the "
                                            "cluster with RAY_worker_niceness=0 to time it at the default", nice)
    return nice


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


def _failure(job: TrialJob, reason: str) -> TrialResult:
    spec = job.spec
    return TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.FAILED, reason=reason)


def _reason(exc: BaseException) -> str:
    """What Ray said of a task that ended without a result, in a few lines."""
    text = " ".join(str(exc).split())
    return f"Ray: {type(exc).__name__}: {text[:600]}"


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


def _in_bundle(reserved: Any, index: int) -> Any:
    """Ray's scheduling strategy for a task in bundle ``index`` of the placement group ``reserved``."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(reserved, placement_group_bundle_index=index)


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


def _member(command: list[str], env: dict[str, str], folder: str, log: str | None) -> dict:
    """The Ray task of a member on another node: run ``command`` tethered to this worker (it dies when the worker
    is killed), with its proxy's environment, writing to its log when this node sees it; its exit code."""
    import ray

    from bakeoff.core import tether

    env = {k: v for k, v in env.items() if not k.startswith("RAY_")}
    own = os.environ.get("CUDA_VISIBLE_DEVICES")  # the GPUs Ray gave this task here, not those of the first node
    if own is not None and env.get("CUDA_VISIBLE_DEVICES") != "":
        env["CUDA_VISIBLE_DEVICES"] = own
    node = ray.get_runtime_context().get_node_id()
    banner = (f"bakeoff: on Ray node {node} ({platform.node()}), worker {os.getpid()}, niceness {_unniced()}\n"
              .encode())
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(log, "ab")) if log and os.path.isfile(log) else subprocess.PIPE
        if out is not subprocess.PIPE:
            out.write(banner)
            out.flush()
        proc = subprocess.Popen(tether.command(command), cwd=folder if os.path.isdir(folder) else None, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        output, _ = proc.communicate()
    output = banner + output if output is not None else b""
    return {"code": proc.returncode, "node": node, "host": platform.node(), "pid": proc.pid,
            "output": output.decode(errors="replace")[-65536:]}


def member_main(argv: list[str]) -> int:
    """``python -m bakeoff.run.executors.ray_executor member --address GCS --group NAME --bundle I --cpus C --gpus
    G -- COMMAND...``: the proxy of a multi-node trial's member. It runs COMMAND as a Ray task in bundle I of the
    trial's placement group (on that bundle's node, in this folder, with this environment, its output into this
    process's log) and exits as it exits. SIGTERM or SIGINT cancels the task (its worker killed, the member with
    it); a SIGKILL of this process ends its Ray connection, and Ray then ends its task."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bakeoff.run.executors.ray_executor member")
    parser.add_argument("--address", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--bundle", type=int, required=True)
    parser.add_argument("--cpus", type=float, required=True)
    parser.add_argument("--gpus", type=float, required=True)
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    stop: list[int] = []
    import ray

    ray.init(address=args.address, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING)
    for s in (signal.SIGINT, signal.SIGTERM):  # after ray.init, which sets its own
        signal.signal(s, lambda signum, _frame: stop.append(signum))
    from ray.util import get_placement_group

    reserved = get_placement_group(args.group)  # placed already: the trial's task runs in its first bundle
    task = ray.remote(max_retries=0, retry_exceptions=False)(_member)
    ref = task.options(num_cpus=args.cpus, num_gpus=args.gpus, scheduling_strategy=_in_bundle(reserved, args.bundle)
                       ).remote(args.command, dict(os.environ), os.getcwd(), _stdout_file())
    while not ray.wait([ref], timeout=POLL_S)[0]:
        if stop:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
                ray.wait([ref], timeout=CANCEL_WAIT_S / 6)
            signal.signal(stop[0], signal.SIG_DFL)
            os.kill(os.getpid(), stop[0])
    try:
        out = ray.get(ref)
    except ray.exceptions.RayError as exc:
        sys.stderr.write(f"{_reason(exc)}\n")
        return 1
    sys.stdout.write(out["output"])
    sys.stdout.flush()
    code = int(out["code"])
    if code < 0:  # killed by a signal there: so this proxy, here
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # their handlers cannot be changed (nor need to be)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def _stdout_file() -> str | None:
    """The file this process's output goes to (its member's log, under the store's folder that every node sees),
    or None when it is not a file."""
    with contextlib.suppress(OSError):
        path = os.readlink("/proc/self/fd/1")
        if path.startswith("/") and os.path.isfile(path):
            return path
    return None


if __name__ == "__main__":
    if sys.argv[1:2] != ["member"]:
        sys.exit("usage: python -m bakeoff.run.executors.ray_executor member --address GCS --group NAME --bundle I "
                 "--cpus C --gpus G -- COMMAND...")
    sys.exit(member_main(sys.argv[2:]))
