"""What runs on a Ray node for ``bakeoff run --executor ray`` (:mod:`bakeoff.run.executors.ray_executor`, the
driver's side): a trial's task (:func:`_trial`), which runs the local executor's process group where Ray placed it,
and, for a multi-node trial, the proxy of a member on another node (:func:`member_main`, started as ``python -m
bakeoff.run.executors.ray_executor member ...``: the command line stays the driver module's), which runs that node's
unit as a Ray task in its bundle of the trial's placement group.
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
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from bakeoff.core.result import TrialResult
from bakeoff.core.spec import Status
from bakeoff.run.executors.executor import MemberPlacer, TrialJob, spread
from bakeoff.run.executors.local import run_here
from bakeoff.run.launchers import Member

NAMESPACE = "bakeoff"
"""The Ray namespace of the run and of its members' proxies, which find a trial's placement group by its name."""

POLL_S = 0.2
"""Longest wait inside one Ray call: signals are held meanwhile, so this is how late a Ctrl-C may be seen."""

CANCEL_WAIT_S = 60.0
"""How long an interrupted run waits for Ray to confirm that its cancelled tasks ended."""


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


def _placed(group: Group, workers: int) -> tuple[list[str], list[str], MemberPlacer]:
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


def _failure(job: TrialJob, reason: str) -> TrialResult:
    spec = job.spec
    return TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.FAILED, reason=reason)


def _reason(exc: BaseException) -> str:
    """What Ray said of a task that ended without a result, in a few lines."""
    text = " ".join(str(exc).split())
    return f"Ray: {type(exc).__name__}: {text[:600]}"


def _in_bundle(reserved: Any, index: int) -> Any:
    """Ray's scheduling strategy for a task in bundle ``index`` of the placement group ``reserved``."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(reserved, placement_group_bundle_index=index)


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
