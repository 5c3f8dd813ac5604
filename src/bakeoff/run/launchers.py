"""How a trial's processes start: one process, torchrun, TF_CONFIG workers, a parameter-server cluster, or
``jax.distributed`` processes.

A launcher turns a spec into a :class:`Plan`: the members of the trial's process group (each a command and its
environment) and how many rank results to expect. :func:`run_group` starts them together, gives the group one
deadline and kills every member (each in its own session, so a member's children go too) as soon as one fails,
hangs or the run is interrupted; :func:`merge` folds the ranks' results into one :class:`TrialResult`, keeping
per-rank figures in its :class:`~bakeoff.core.result.Distributed` section's ``ranks``.

Which launcher a framework's parallelism uses is data: its record's ``launchers`` (:mod:`bakeoff.core.frameworks`);
a framework's own launchers are records in its folder's ``launch.py`` (:data:`LAUNCHERS` finds them through its
record's ``launch``), the contract they follow is :mod:`bakeoff.core.launching`. The frameworks' own engines do the
distributing: ``torch.distributed.run`` (torchrun) starts PyTorch's ranks,
TensorFlow reads ``TF_CONFIG``. Nothing here imports a framework.

Ports are free ports on loopback, chosen just before the start (:func:`free_ports`); a group whose log shows one
was taken meanwhile is started again on new ones (:data:`PORT_IN_USE`).

Machines: every member starts here, on this machine. A trial across machines is an executor's to place
(:mod:`bakeoff.run.executors`: Slurm, Ray), on the engines clusters already run; bakeoff has no launcher of its own
over ssh. :func:`plan` takes the machine of each worker (``hosts``) for an executor that starts each member on its
machine itself; the first is the rendezvous host (torchrun's master address, TF_CONFIG's worker 0).

GPUs: each rank of a PyTorch or JAX group takes a GPU of its own, the one at its *local rank*, its index among the
trial's ranks on its machine (NCCL refuses two ranks of a communicator on one GPU). A torchrun agent of several
ranks numbers them itself (``LOCAL_RANK``); a member that is one rank (one torchrun agent per node, a
``jax.distributed`` process, a TensorFlow worker) is told its machine-wide local rank in its
:class:`~bakeoff.core.contract.Placement` (:func:`bakeoff.measure.environment.local_rank` reads it), since
torchrun says ``LOCAL_RANK=0`` to each one-process agent. Every GPU stays visible to every rank, so NCCL can still
reach its peers directly. A group that would put more such ranks on this machine than it has visible GPUs is refused
before any process starts (:func:`unsupported_here`; a trial spread over nodes, each node's share of its ranks,
checked on that node).

Threads: on one host, the cores are shared out among the processes that compute (the placement's ``threads``, read
by :func:`bakeoff.engines.base.threads_for`), so N replicas on N cores do not oversubscribe them; more replicas
than cores is allowed on CPU and recorded as a warning.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from bakeoff.core import frameworks, registry
from bakeoff.core.contract import Placement

# The launcher contract, read from here by the parent side (PARAMETER_SERVERS and local_ranks too: re-exported).
from bakeoff.core.launching import (  # noqa: F401
    HOST,
    PARAMETER_SERVERS,
    Launcher,
    Member,
    Plan,
    Start,
    local_ranks,
    trial_command,
)
from bakeoff.core.lazy import Discovered
from bakeoff.core.result import Distributed, Energy, TrialResult
from bakeoff.core.spec import Device, Parallelism, RunSpec, Status
from bakeoff.measure.environment import cuda_build, cuda_devices, usable_cores
from bakeoff.run.process import proc_status, process_groups, processes

PORT_IN_USE = ("address already in use", "eaddrinuse", "errno 98", "address in use")
"""What a member's log says when its port was taken between :func:`free_ports` and its start."""

def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that nothing listens on at loopback now (the kernel's choice of free ports)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((HOST, 0))
            ports.append(sock.getsockname()[1])
    return ports


def _single(s: Start) -> Plan:
    return s.plan("single", [Member("trial", trial_command(s.args), s.env, True)], 1, 1)


SINGLE = Launcher("single", _single, group=False)
"""bakeoff's own launcher: one trial process (a framework that distributes within one process uses it too)."""


def _all_launchers() -> dict[str, Launcher]:
    """:data:`SINGLE` and each framework's launchers, built on each use: the modules are imported once, and the
    records may be rediscovered."""
    modules = dict.fromkeys(info.launch for info in frameworks.FRAMEWORKS.values() if info.launch)
    found = [launcher for module in modules for launcher in importlib.import_module(module).LAUNCHERS]
    return {launcher.name: launcher for launcher in (SINGLE, *found)}


LAUNCHERS: Mapping[str, Launcher] = Discovered("LAUNCHERS", _all_launchers)
"""Every launcher by name, read on first use: :data:`SINGLE` and each framework's, the ``LAUNCHERS`` of the module its
record names (``launch``: ``launch.py`` in its folder)."""


def plan(spec: RunSpec, args: Sequence[str], env: dict[str, str], ports: Sequence[int] | None = None,
         cores: int | None = None, hosts: Sequence[str] | None = None) -> Plan:
    """The process group that runs ``spec``: ``args`` are the trial's command-line arguments (its request file,
    :class:`bakeoff.core.contract.TrialRequest`), ``env`` the environment every member starts from, ``hosts`` the
    machine of each worker (default: all here, on loopback), for an executor that starts each member there."""
    launcher = LAUNCHERS[registry.launcher(spec)]
    cores = cores or usable_cores()
    n = spec.workers
    computing = n if launcher.group else 1
    threads = spec.threads or max(1, cores // computing)
    env = {**env, **Placement(threads=threads, launched_at=time.time()).env(), "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads)}
    warnings = []
    if spec.parallelism is not Parallelism.NONE and n > cores:
        warnings.append(f"{n} replicas on {cores} CPU cores: replicas share cores, so throughput measures "
                        "overhead more than speed-up")
    ports = list(ports) if ports is not None else free_ports(launcher.ports(n))
    hosts = list(hosts or [HOST] * n)
    if len(set(hosts)) > 1 and launcher.group:  # the cores of one machine are shared by the workers placed on it
        threads = spec.threads or max(1, cores // max(1, sum(h == hosts[0] for h in hosts)))
    return launcher.start(Start(spec, args, env, ports, hosts, threads, warnings))


def unsupported_here(spec: RunSpec, gpus: int | None = None, here: int | None = None) -> str:
    """Why ``spec`` cannot run on this machine ('' when it can), decided before any process starts: its mode
    is one its framework's record says a CPU cannot run (``cpu_missing``) and it would train on the CPU here; or its
    ranks cannot each have a GPU of their own. ``gpus``: the NVIDIA GPUs a trial here could see
    (default: :func:`bakeoff.measure.environment.cuda_devices`); ``here``: the trial's ranks on this machine
    (default: all of them; a trial spread over nodes, its share of this node: each node checks its own). The GPUs
    are checked only for launchers whose ranks take one GPU each (``gpu_per_rank``)."""
    not_on_cpu = registry.unsupported_on_cpu(spec)
    if not_on_cpu and _trains_on_cpu(spec, gpus):
        return f"{not_on_cpu} (this trial would train on this machine's CPU)"
    launcher = LAUNCHERS[registry.launcher(spec)]
    if not launcher.gpu_per_rank or spec.device is Device.CPU:
        return ""
    if spec.device is Device.AUTO and not cuda_build(spec.framework.value):
        return ""  # a CPU build trains on the CPU whatever GPUs the machine has
    gpus = cuda_devices()[0] if gpus is None else gpus
    here = spec.workers if here is None else here
    if gpus == 0 or here <= gpus:  # no GPU: the ranks train on the CPU (device cuda is refused by validate())
        return ""
    strategy = frameworks.get(spec.framework.value).strategies.get(spec.parallelism, spec.parallelism.value)
    advice = (f"use at most {gpus} workers here" if here == spec.workers else
              f"use at most workers-per-node={gpus}")
    return (f"{spec.parallelism.value} over {spec.workers} replicas ({strategy}) puts {here} ranks on this machine, "
            f"one GPU each (NCCL refuses two ranks on one GPU), and it has {gpus} visible GPU"
            f"{'s' * (gpus != 1)}: {advice}, or --device cpu")


def _trains_on_cpu(spec: RunSpec, gpus: int | None) -> bool:
    """Whether ``spec``'s trial would train on this machine's CPU: told to, or left to choose (``auto``) with a CPU
    build of its framework or no GPU it could see."""
    if spec.device is not Device.AUTO:
        return spec.device is Device.CPU
    return not cuda_build(spec.framework.value) or (cuda_devices()[0] if gpus is None else gpus) == 0


@dataclasses.dataclass
class GroupOutcome:
    """How a group ended: ``codes`` per member (None: killed by bakeoff), ``killed`` the reason bakeoff killed
    it ('' when every result-writing member exited by itself), ``first_failure`` the member that failed first,
    and each member's peak resident memory, read from ``/proc`` while it ran (its own process, not children)."""

    codes: dict[str, int | None]
    killed: str = ""
    first_failure: str = ""
    peak_rss_bytes: dict[str, int] = dataclasses.field(default_factory=dict)


def _session_rss(sessions: set[int]) -> int:
    """Resident memory of every process in these sessions (a member and whatever it started)."""
    return sum(proc_status(pid, "VmRSS") for pid, _, sid, _ in processes() if sid in sessions)


def run_group(plan: Plan, log_paths: Sequence[Path], timeout_s: float, memory_cap: int | None = None,
              what: str = "trial") -> GroupOutcome:
    """Run the plan's members to the end: until every result-writing member has exited, or until one member
    fails (a non-zero exit, or a server exiting at all), the deadline passes or the group's resident memory
    passes ``memory_cap``; then every member's session is killed (:func:`bakeoff.run.process.process_groups`,
    which also kills them all on an interrupt, naming ``what``). Each member writes to its own log."""
    deadline = time.monotonic() + timeout_s
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(path.open("w")) for path in log_paths]
        commands = [(m.command, {"stdout": log, "stderr": subprocess.STDOUT, "env": m.env})
                    for m, log in zip(plan.members, logs, strict=True)]
        with process_groups(commands, what) as procs:
            outcome = GroupOutcome(codes={m.name: None for m in plan.members})
            last_sample = 0.0
            while True:
                now = time.monotonic()
                if now - last_sample > 0.25:
                    last_sample = now
                    procs.discover()  # the sessions of ranks a launcher started: killed with it, memory counted
                    for member, proc in zip(plan.members, procs, strict=True):
                        if proc.poll() is None:
                            hwm = proc_status(proc.pid, "VmHWM")
                            outcome.peak_rss_bytes[member.name] = max(outcome.peak_rss_bytes.get(member.name, 0), hwm)
                for member, proc in zip(plan.members, procs, strict=True):
                    code = proc.poll()
                    if code is None or outcome.codes[member.name] is not None:
                        continue
                    outcome.codes[member.name] = code
                    if (code != 0 or not member.writes_result) and not outcome.first_failure:
                        outcome.first_failure = member.name
                if outcome.first_failure:
                    return outcome
                if all(outcome.codes[m.name] is not None for m in plan.members if m.writes_result):
                    return outcome
                if memory_cap:
                    rss = _session_rss(procs.sessions)
                    if rss > memory_cap:
                        outcome.killed = (f"resident memory {rss / 2**20:.0f} MiB passed the cap of "
                                          f"{memory_cap / 2**20:.0f} MiB; killed")
                        return outcome
                if now >= deadline:
                    outcome.killed = f"no result after {timeout_s:.0f} s; killed"
                    return outcome
                time.sleep(0.05)


def rank_results(result_path: Path, ranks: int, grace_s: float = 0.0) -> list[TrialResult | None]:
    """The results the group's ranks wrote (None for a rank that wrote none), waiting up to ``grace_s`` for those
    not there yet (a rank on another node, its file on a shared file system)."""
    from bakeoff.trial.main import rank_result_path

    paths = [rank_result_path(result_path, rank) for rank in range(ranks)]
    deadline = time.monotonic() + grace_s
    while not all(path.exists() for path in paths) and time.monotonic() < deadline:
        with contextlib.suppress(OSError):  # listing the folder refreshes an NFS client's view of it
            os.listdir(result_path.parent)
        time.sleep(0.5)
    return [TrialResult.from_dict(json.loads(path.read_text())) if path.exists() else None for path in paths]


def _rank_summary(rank: int, result: TrialResult) -> dict:
    digests = result.distributed.replica_weights_sha256 if result.distributed is not None else []
    in_step = (result.distributed.sync.get("in_step") or {}) if result.distributed is not None else {}
    return {"rank": rank, "status": result.status.value, "reason": result.reason[:300],
            "steady_step_s": result.steady_step_s, "peak_memory_bytes": result.peak_memory_bytes,
            "memory_baseline_bytes": result.memory_baseline_bytes,
            "memory_increment_bytes": result.memory_increment_bytes, "launch_s": result.setup.launch_s,
            "import_s": result.import_s, "build_s": result.build_s,
            "final_loss": result.losses[-1] if result.losses else None, "step_times_s": list(result.step_times_s),
            # this rank's synchronisation per optimizer step, timed in its training step (the group's figure is
            # rank 0's; a faster rank waits longer for the slower one)
            "sync_in_step_s": in_step.get("per_step_s"),
            "replica_weights_sha256": list(digests)}


def _group_sharing(base: TrialResult, results: Sequence[TrialResult | None]) -> None:
    """The group's :class:`bakeoff.measure.environment.CpuSharing`: rank 0 counts the other ranks' CPU as other
    processes'; the group's other work is the cores busy less every rank's own (ranks step together, so their
    windows overlap). Ranks on other hosts (``--hosts``) would be subtracted too: an underestimate there."""
    sharing = base.environment.get("cpu_sharing", {})
    owns = [r.environment.get("cpu_sharing", {}).get("own_cores") for r in results if r is not None]
    if "cores_busy" not in sharing or any(own is None for own in owns):
        return
    own = float(sum(owns))
    other = max(0.0, sharing["cores_busy"] - own)
    base.environment["cpu_sharing"] = {**sharing, "own_cores": own, "ranks": len(owns), "other_cores": other,
                                       "other_share": other / sharing.get("cores", 1)}


def _group_energy(base: TrialResult, results: Sequence[TrialResult | None]) -> None:
    """The group's energy: the sum of its ranks' (:func:`bakeoff.trial.loop.energy_meter`: each rank reads its own
    GPUs, and only each machine's local rank 0 reads RAPL, so no counter is read twice). Per example over the
    global batch. Missing, with why, when a rank that should have measured did not."""
    records = [r.energy for r in results if r is not None]
    if len(records) < 2 or any(e is None for e in records):
        return
    measured = [e for e in records if not e.missing]
    gaps = [f"rank {i}: {e.missing}" for i, e in enumerate(records) if e.missing and e.unreadable]
    if not measured or gaps:
        if measured:
            base.energy = Energy(missing="not every rank's counters were read: " + "; ".join(gaps))
        return

    def total(key: str) -> float | None:
        values = [getattr(e, key) for e in measured]
        return None if any(v is None for v in values) else float(sum(values))

    steps = max(e.steady_steps or 0 for e in measured)
    joules = total("steady_j")
    base.energy = Energy(
        steady_j=joules, steady_s=max(e.steady_s or 0.0 for e in measured), steady_steps=steps,
        per_step_j=total("per_step_j"),
        per_example_j=total("per_step_j") / base.examples_per_step if base.examples_per_step and
        total("per_step_j") is not None else None,
        mean_w=total("mean_w"), train_j=total("train_j"), to_target_j=total("to_target_j"),
        domains={f"rank {i} {d}": j for i, e in enumerate(records) for d, j in e.domains.items()},
        wraps=sum(e.wraps for e in records),
        unreadable={f"rank {i} {d}": w for i, e in enumerate(records) for d, w in e.unreadable.items()})


IMBALANCE = 0.10
"""Ranks of a synchronous group whose steady steps differ by more than this (slowest over fastest - 1) are flagged."""


def _slowest_rank(base: TrialResult, results: Sequence[TrialResult | None], dist: Distributed) -> None:
    """A synchronous group trains at the pace of its slowest rank: the merged result's steps and throughput are that
    rank's (global examples over its time; every rank's steps stay in ``dist.ranks``), and ranks whose steady
    steps differ by more than :data:`IMBALANCE` get a warning."""
    timed = [(r, res) for r, res in enumerate(results) if res is not None and res.steady_step_s]
    if len(timed) < 2 or not base.steady_step_s:
        return
    steps = [res.steady_step_s for _, res in timed]
    rank, slowest = max(timed, key=lambda t: t[1].steady_step_s)
    dist.rank_imbalance = max(steps) / min(steps) - 1
    dist.throughput_rank = rank
    if slowest.steady_step_s > base.steady_step_s:
        scale = base.steady_step_s / slowest.steady_step_s
        base.throughput = {k: v * scale for k, v in base.throughput.items()}
        base.step_times_s, base.steady_step_s = list(slowest.step_times_s), slowest.steady_step_s
    if dist.rank_imbalance > IMBALANCE:
        dist.warnings.append(
            f"ranks' steady steps differ by {dist.rank_imbalance:.0%} ({1e3 * min(steps):.3g}–"
            f"{1e3 * max(steps):.3g} ms): the throughput is the slowest rank's (rank {rank}), global examples over "
            "its time")


def merge(spec: RunSpec, plan: Plan, results: Sequence[TrialResult | None], outcome: GroupOutcome) -> TrialResult:
    """One result for the group: rank 0's, with every rank's figures in its ``distributed`` section, the start-up
    cost apart from training, and whether all replicas ended with identical weights; a synchronous group's steps
    and throughput are its slowest rank's. A rank that failed makes the trial fail with that rank's reason."""
    base = results[0]
    assert base is not None, "merge needs rank 0's result"
    ranks = [_rank_summary(r, res) for r, res in enumerate(results) if res is not None]
    digests = [d for rank in ranks for d in rank["replica_weights_sha256"]]
    startups = [sum(x or 0.0 for x in (r["launch_s"], r["import_s"], r["build_s"])) for r in ranks]
    dist = dataclasses.replace(
        base.distributed or Distributed(), parallelism=spec.parallelism.value, replicas=spec.workers,
        launcher=plan.launcher, processes=plan.processes, threads_per_process=plan.threads,
        batch_size={"global": spec.batch_size,
                    "per_replica": spec.batch_size // spec.workers if spec.parallelism.synchronous
                    else spec.batch_size},
        synchronous=spec.parallelism.synchronous, ranks=ranks, warnings=list(plan.warnings),
        # before the first step: process launch, framework import, rendezvous and strategy and model set-up
        startup_s=max(startups) if startups else None,
        launch_s=max((r["launch_s"] or 0.0) for r in ranks) if ranks else None,
        replicas_identical=(len(set(digests)) == 1) if len(digests) > 1 else None)
    if outcome.peak_rss_bytes:
        dist.member_peak_rss_bytes = dict(outcome.peak_rss_bytes)
    if spec.parallelism.synchronous:
        _slowest_rank(base, results, dist)
    _group_sharing(base, results)
    _group_energy(base, results)
    base.distributed = dist
    for rank, res in enumerate(results):
        if res is not None and res.status is not Status.OK and base.status is Status.OK:
            base.status, base.reason = res.status, f"rank {rank}: {res.reason}"
    if dist.replicas_identical is False and base.status is Status.OK:
        dist.warnings.append("replicas ended with different weights: the synchronisation did not keep them "
                                "identical")
    return base
