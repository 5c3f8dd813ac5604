"""The local executor: each trial on this machine, one after another; and :func:`run_one`, one trial as a fresh
process group (:mod:`bakeoff.run.launchers`), which every executor starts on the node it picks (:func:`run_here`).

A crash, hang or kill of any member of the group becomes the trial's result, never an exception; only an interrupt
(:class:`bakeoff.run.process.Interrupted`) propagates, once the group is killed. The trial's logs are
``<key>.log`` in its log folder (``<key>.<member>.log`` for the other members of a group); its checkpoint
directory is deleted once it succeeds.

A trial that dies of SIGKILL is out of memory only with evidence: the memory cap :func:`run_one` was given, or the
kernel's OOM-kill counter of this process's memory cgroup having risen during the trial
(:func:`bakeoff.run.process.read_oom_kills`).

Which trials run, in which order, and how their results are stored is the runner's (:mod:`bakeoff.run.runner`).
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import signal
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from bakeoff.core import frameworks, registry
from bakeoff.core.contract import TrialRequest, progress_every
from bakeoff.core.files import sweep_orphans, temporary_folder
from bakeoff.core.result import Distributed, TrialResult
from bakeoff.core.spec import Parallelism, RunSpec, Status
from bakeoff.measure.environment import usable_cores
from bakeoff.run import launchers
from bakeoff.run.executors import node
from bakeoff.run.executors.executor import Done, Executor, MemberPlacer, Started, TrialJob, executor_record
from bakeoff.run.process import OomKills, read_oom_kills
from bakeoff.trial.profile import Request as ProfileRequest

log = logging.getLogger("bakeoff.run.executors.local")


class LocalExecutor(Executor):
    """Each trial on this machine, one after another, nothing else running beside it: it takes the next job only
    when the last one's result is stored."""

    name = "local"

    def describe(self) -> str:
        return "local: on this machine, one trial after another"

    def run(self, jobs: Iterable[TrialJob], started: Started, done: Done) -> None:
        for job in jobs:
            started(job)
            submitted = time.time()
            result = run_here(job)
            result.execution.executor = executor_record(self.name, submitted_at=submitted,
                                                        started_at=result.setup.started_at)
            done(job, result)


def run_here(job: TrialJob, hosts: Sequence[str] | None = None, place: MemberPlacer | None = None) -> TrialResult:
    """Run ``job``'s trial process group from this machine, now (:func:`run_one`); never raises for a trial that
    fails, only for an interrupt. A multi-node executor gives each worker's ``hosts`` and how a member is started
    on its host (``place``: a Slurm job step, a Ray proxy); by default every member starts here."""
    return run_one(job.spec, job.timeout_s, job.log_dir, job.checkpoint_dir, job.tensorboard_dir,
                   keep_dir=job.keep_dir, probe_ceiling=job.probe_ceiling, profile=job.profile,
                   evaluate=job.evaluate, hosts=hosts, place=place)


def _trial_env(spec: RunSpec, tmp: str) -> dict[str, str]:
    """The environment a trial's group starts from: this one, with fresh compile caches, its threads and its
    framework record's settings. What the trial is asked is its request (:class:`TrialRequest`), not this."""
    env = dict(os.environ)
    # Compile caches start empty in every trial, so graph-mode compile time is the cold cost, measured the same
    # way on every run, rather than whatever an earlier trial left on disk: every framework's caches (its record's
    # cache_env), whichever framework this trial is, as before.
    env.update({name: os.path.join(tmp, folder) for info in frameworks.FRAMEWORKS.values()
                for name, folder in info.cache_env.items()})
    threads = str(spec.threads or usable_cores())
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONUNBUFFERED="1")
    env.update(frameworks.get(spec.framework.value).env)  # its record's settings (KERAS_BACKEND, XLA's allocator)
    if spec.device.value == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def request_file(log_dir: Path, spec: RunSpec) -> Path:
    """Where a trial's request (:class:`TrialRequest`) is while its group runs: ``<key>.request.json`` beside its
    log."""
    return log_dir / f"{spec.key()}.request.json"


def shared_prefix(spec: RunSpec) -> str:
    """How the folder of a trial spread over nodes begins, under ``<store folder>/tmp``: named by its key, so that
    an executor whose trial was killed before it could remove it (a cancelled job or task) finds it
    (:func:`remove_shared`)."""
    return f"bakeoff-trial-{spec.key()}-"


def remove_shared(job: TrialJob) -> None:
    """Remove what a trial of ``job`` spread over nodes left in the store's folder when it was killed (its spec, its
    nodes' files, its ranks' results): nothing of a finished trial is left there."""
    for path in (job.log_dir.parent / "tmp").glob(shared_prefix(job.spec) + "*"):
        shutil.rmtree(path, ignore_errors=True)


def _says(paths: Sequence[Path], text: str) -> bool:
    """Whether any of these logs holds ``text``."""
    return any(path.exists() and text in path.read_text(errors="replace") for path in paths)


def _failure(spec: RunSpec, status: Status, reason: str) -> TrialResult:
    return TrialResult(spec=spec.to_dict(), key=spec.key(), status=status, reason=reason)


def _sigkill_failure(spec: RunSpec, before: OomKills, elapsed: float, tail: str) -> TrialResult:
    """A trial killed by SIGKILL, not for its deadline or memory cap: out of memory only if the kernel's counter
    says so."""
    after = read_oom_kills()
    if before.count is not None and after.count is not None and after.source == before.source:
        if after.count > before.count:
            return _failure(spec, Status.OUT_OF_MEMORY,
                            f"killed by SIGKILL after {elapsed:.0f} s by the kernel's out-of-memory killer "
                            f"(oom_kill in {after.source} rose from {before.count} to {after.count} during the "
                            f"trial); last output: {tail[-300:]}")
        evidence = f"oom_kill in {after.source} stayed at {after.count} during the trial"
    elif before.count is not None and after.count is not None:
        evidence = f"the OOM-kill counter read before ({before.source}) and after ({after.source}) differ"
    else:
        evidence = after.source if after.count is None else before.source
    return _failure(spec, Status.FAILED, f"killed by SIGKILL (no evidence of out-of-memory: {evidence}) after "
                                         f"{elapsed:.0f} s; last output: {tail[-300:]}")


def safe_name(name: str) -> str:
    """``name`` as one part of a file name: ``/`` a dash, anything but letters, digits and ``._=+-`` an underscore."""
    return "".join(c if c.isalnum() or c in "._=+-" else "_" for c in name.replace("/", "-"))


def _log_paths(log_dir: Path, spec: RunSpec, plan: launchers.Plan) -> list[Path]:
    """``logs/<key>.log`` for the group's first member, ``logs/<key>.<member>.log`` for the others."""
    key = spec.key()
    return [log_dir / (f"{key}.log" if i == 0 else f"{key}.{safe_name(m.name).replace('_', '')}.log")
            for i, m in enumerate(plan.members)]


def _tail(paths: Sequence[Path], first: str, names: Sequence[str]) -> str:
    """The last output of the member that failed first (else of the first member)."""
    path = paths[names.index(first)] if first in names else paths[0]
    return path.read_text(errors="replace")[-1500:].strip() if path.exists() else ""


def run_one(spec: RunSpec, timeout_s: float, log_dir: Path, checkpoint_dir: Path | None = None,
            tensorboard_dir: Path | None = None, memory_cap: int | None = None,
            keep_dir: Path | None = None, probe_ceiling: bool = False,
            profile: ProfileRequest | None = None, evaluate: bool = True, hosts: Sequence[str] | None = None,
            place: MemberPlacer | None = None) -> TrialResult:
    """Run one spec as a fresh process group (:mod:`bakeoff.run.launchers`); a crash, hang or kill of any
    member becomes a result, never an exception.

    A checkpoint left in ``checkpoint_dir`` by an interrupted attempt is resumed from; it is deleted once the
    trial succeeds. ``tensorboard_dir`` receives the trial's TensorBoard event files. With ``memory_cap`` (bytes),
    the trial is killed and recorded as out of memory when its group's resident set grows past it. A group whose
    port was taken before it bound it is started again on new ports (``execution.port_retries``). With
    ``keep_dir``, a trial that succeeds keeps its trained model there (:mod:`bakeoff.results.model_dir`). With
    ``probe_ceiling``, the trial probes the matmul ceiling after its result (:mod:`bakeoff.measure.ceiling`). With
    ``profile``, a trial that succeeds profiles a few more steps after its result (:mod:`bakeoff.trial.profile`).
    Without ``evaluate``, the trial never evaluates its model (:func:`bakeoff.trial.loop.train`).
    ``hosts`` and ``place``: the machine of each worker and how a member starts on its machine, from an executor
    that spreads a trial over nodes (:func:`run_here`).
    """
    # A trial spread over nodes puts its share of ranks on this one (the first: the most); each node's own share
    # is checked on that node, by its unit (bakeoff.run.executors.node).
    here = max(collections.Counter(hosts).values()) if hosts else None
    reason = registry.unsupported(spec) or launchers.unsupported_here(spec, here=here)
    if reason:
        return _failure(spec, Status.UNSUPPORTED, reason)
    missing = registry.not_installed(spec.framework.value)
    if missing:
        return _failure(spec, Status.UNSUPPORTED, missing)
    log_dir.mkdir(parents=True, exist_ok=True)
    retries = 0
    while True:
        result, port_in_use = _run_group(spec, timeout_s, log_dir, checkpoint_dir, tensorboard_dir, memory_cap,
                                         keep_dir, probe_ceiling, profile, evaluate, hosts, place)
        if not port_in_use or retries + 1 >= PORT_ATTEMPTS:
            break
        retries += 1
        log.warning("%s: a port was taken before the group bound it; starting again on new ports", spec.label())
    if retries:
        result.execution.port_retries = retries
    return result


PORT_ATTEMPTS = 3
"""Starts of a group whose port turns out to be in use (the ports are free when chosen, but not reserved)."""
RANK_GRACE_S = 60.0
"""How long a group spread over nodes is given for its ranks' result files to show here once every member exited 0:
a network file system may show a file written on another node only after its attribute cache expires (NFS: up to
60 s), as the Slurm executor gives a job's result file."""


def _run_group(spec: RunSpec, timeout_s: float, log_dir: Path, checkpoint_dir: Path | None,
               tensorboard_dir: Path | None, memory_cap: int | None,
               keep_dir: Path | None = None, probe_ceiling: bool = False,
               profile: ProfileRequest | None = None, evaluate: bool = True, hosts: Sequence[str] | None = None,
               place: MemberPlacer | None = None) -> tuple[TrialResult, bool]:
    """One start of the group: its result, and whether it failed because a port was in use. A group spread over
    machines keeps its spec and rank results under the store's folder, which its nodes share (a node's ``/tmp`` is
    its own); otherwise in this machine's temporary folder."""
    shared = None
    if hosts is not None and len(set(hosts)) > 1:
        shared = log_dir.parent / "tmp"
        shared.mkdir(parents=True, exist_ok=True)
    # removed even when bakeoff is killed; across nodes named by its key, for an executor to remove (remove_shared)
    with temporary_folder(shared_prefix(spec) if shared else "bakeoff-trial-", shared) as tmp:
        result_path = Path(tmp) / "result.json"
        request = TrialRequest(spec, result_path, checkpoint_dir, tensorboard_dir, keep_dir, probe_ceiling,
                               evaluate=evaluate, progress_s=progress_every(),
                               **(profile.asked() if profile is not None else {}))
        # Beside the trial's log, in the store's folder: every node sees it, and a trial's processes name the store
        # on their command line (``ps`` finds a run's processes by its folder, as they named their checkpoints).
        request_path = request_file(log_dir, spec)
        request.write(request_path)
        try:
            started, oom_before = time.perf_counter(), read_oom_kills()
            group = launchers.plan(spec, [str(request_path)], _trial_env(spec, tmp), hosts=hosts)
            logs = rank_logs = _log_paths(log_dir, spec, group)
            if shared is not None:  # one unit per node starts its members there (a Slurm job step, a Ray task)
                group.members, logs = node.fold(group.members, rank_logs, Path(tmp), log_dir, spec.key(),
                                                fixed_threads=spec.threads is not None, request_file=request_path)
            if place is not None:  # units on other nodes start there, the first node's here
                group.members = [place(member) for member in group.members]
            names = [m.name for m in group.members]
            what = spec.title()
            outcome = launchers.run_group(group, logs, timeout_s, memory_cap, what)
        finally:  # the group is over: nothing reads the request again (the result and the log say what ran)
            request_path.unlink(missing_ok=True)
        if shared is not None:  # this node's units' compile caches, if a job step's end killed their janitors too
            sweep_orphans(node.NODE_FOLDER)
        # where the ranks meet (the first node: torchrun's store, TF's worker 0, JAX's coordinator), and what each
        # node's unit chose for its ranks' interface
        network = {"rendezvous": hosts[0], "nodes": node.networks(Path(tmp))} if shared is not None and hosts else {}
        if outcome.killed:
            status = Status.TIMEOUT if outcome.killed.startswith("no result") else Status.OUT_OF_MEMORY
            failed = _failure(spec, status, f"{outcome.killed} (log: {rank_logs[0]})")
            failed.execution.timeout_s = timeout_s  # a later run with a longer timeout runs it again (to_run)
            return failed, False
        # A rank on another node wrote its result there: a shared file system may show it here only later.
        grace = RANK_GRACE_S if shared is not None and not outcome.first_failure else 0.0
        results = launchers.rank_results(result_path, group.ranks, grace)
        tail = _tail(logs, outcome.first_failure, names)
        missing = [rank for rank, res in enumerate(results) if res is None]
        if missing and not outcome.first_failure and group.ranks > 1:  # every member exited 0: a rank is lost
            lost = ", ".join(map(str, missing))
            failed = _failure(spec, Status.FAILED, f"rank{'s' * (len(missing) > 1)} {lost} of {group.ranks} wrote "
                                                   f"no result{f' within {grace:.0f} s' if grace else ''} although "
                                                   f"every process exited 0 (logs: {log_dir})")
            failed.distributed = Distributed(launcher=group.launcher, first_failure=f"rank {missing[0]}",
                                             exit_codes=outcome.codes, logs=[str(p) for p in (*rank_logs, *logs)])
            return failed, False
        if not missing and not outcome.first_failure:
            result = launchers.merge(spec, group, results, outcome) if spec.parallelism is not Parallelism.NONE \
                else results[0]
            result.execution.log = str(rank_logs[0])
            if network:
                result.execution.network = network
            if tensorboard_dir is not None:
                result.execution.tensorboard = str(tensorboard_dir)
            if result.status is Status.OK and checkpoint_dir is not None:
                shutil.rmtree(checkpoint_dir, ignore_errors=True)
            return result, False
    return _diagnose(spec, group, outcome, logs, rank_logs, tail, time.perf_counter() - started, oom_before, hosts,
                     shared, network)


def _diagnose(spec: RunSpec, group: launchers.Plan, outcome: launchers.GroupOutcome, logs: Sequence[Path],
              rank_logs: Sequence[Path], tail: str, elapsed: float, oom_before: OomKills,
              hosts: Sequence[str] | None, shared: Path | None, network: dict[str, object]) -> tuple[TrialResult, bool]:
    """A group that wrote no result (or a member that failed): the failure it becomes, and whether a port in use
    caused it (the start is then tried again)."""
    names = [m.name for m in group.members]
    first = outcome.first_failure or names[0]
    code = outcome.codes.get(first)
    who = "trial process" if len(names) == 1 else f"{first} of the trial's {len(names)} processes"
    launcher = launchers.LAUNCHERS[group.launcher]
    if launcher.group and any(marker in tail.lower() for marker in launchers.PORT_IN_USE):
        return _failure(spec, Status.FAILED, f"{who}: a port was in use: {tail[-300:]}"), True
    cause = launcher.root_cause(tail)
    # the failing rank's node, when it is not this one (whose cgroup says nothing of it): its unit's, or its own
    failing = group.members[names.index(first)] if first in names else None
    elsewhere = failing.host if shared and failing is not None and hosts and failing.host != hosts[0] else ""
    if cause is not None:  # the launcher ended the group for a rank that failed: the rank is the first failure
        rank, code = cause
        who = f"rank {rank} of {spec.workers} ({launcher.program}'s first observed failure)"
        if hosts and len(set(hosts)) > 1 and rank < len(hosts) and hosts[rank] != hosts[0]:
            elsewhere = hosts[rank]
    if code == node.UNSUPPORTED_EXIT and node.UNSUPPORTED_SAYS in tail:  # another node's share: refused there
        said = tail[tail.index(node.UNSUPPORTED_SAYS):].splitlines()[0]
        result = _failure(spec, Status.UNSUPPORTED, said.removeprefix("bakeoff: "))
    elif code and (node.OUT_OF_MEMORY_SAYS in tail or (elsewhere and _says(logs, node.OUT_OF_MEMORY_SAYS))):
        said = f"killed {node.OUT_OF_MEMORY_SAYS} on its node (its unit's log says so)"  # read there, by its unit
        result = _failure(spec, Status.OUT_OF_MEMORY, f"{who}: {said}: {tail[-600:]}")
    elif code == -signal.SIGKILL and elsewhere:  # its node's unit would have said if the kernel's OOM killer did it
        result = _failure(spec, Status.FAILED, f"{who} was killed by SIGKILL on {elsewhere} after {elapsed:.0f} s "
                                               f"(its node's unit, which reads that node's OOM-kill counter, saw "
                                               f"none): {tail}")
    elif code == -signal.SIGKILL:
        result = _sigkill_failure(spec, oom_before, elapsed, tail)
        result.reason = f"{who} " + result.reason if who != "trial process" else result.reason
    elif code is not None and code < 0:
        result = _failure(spec, Status.FAILED, f"{who} was killed by {signal.Signals(-code).name} after "
                                               f"{elapsed:.0f} s and wrote no result: {tail}")
    elif code == 0:  # a parameter server or worker that stopped serving, or a rank that wrote nothing
        result = _failure(spec, Status.FAILED, f"{who} exited after {elapsed:.0f} s before the trial ended: {tail}")
    else:
        result = _failure(spec, Status.FAILED, f"{who} exited with code {code} and wrote no result: {tail}")
    if network:
        result.execution.network = network
    if launcher.group:
        result.distributed = Distributed(launcher=group.launcher, first_failure=who, exit_codes=outcome.codes,
                                         logs=[str(p) for p in dict.fromkeys((*rank_logs, *logs))])
    return result, False
