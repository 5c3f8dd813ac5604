"""``bakeoff run --executor slurm[=PARTITION]``: each trial one Slurm job, submitted with ``sbatch``; this process
polls ``squeue`` and stores every result, so it stays the only writer of the store.

Why ``sbatch`` and not ``submitit``: the job script is the contract a cluster's admins read, so we write its
``#SBATCH`` lines ourselves (``--exclusive`` for a trial that uses every core, ``--no-requeue`` so that no timed
trial is measured twice — submitit requeues preempted and timed-out jobs by design); no dependency to install on
the login node and every compute node; and ``squeue``/``sacct``/``scancel`` are what we would call under
submitit anyway (its local executor, offered for CI, runs no Slurm at all, so it would test none of this).

A multi-node trial (``slurm=PARTITION,workers-per-node=K``: a ``multi_worker`` trial of more than K workers) is
one job across ``ceil(workers / K)`` nodes: its batch step, on the first node, starts the same process group with
the job's nodes as the trial's hosts (K workers each, :mod:`bakeoff.run.launchers`), each node's K members one
unit (:mod:`bakeoff.run.executors.node`), the first node's here and each other node's as one job step (``srun``)
asking for every CPU the job has on that node (#51: a step per member asked for them K times, and the second
waited for ever): torchrun agents with their rendezvous on the first node, TensorFlow workers with their
``TF_CONFIG``, ``jax.distributed`` processes with the coordinator on the first node. The result is stored under the
trial's own spec (its key does not depend on where it ran); its hosts are in ``execution.hosts``.

Why one job per trial and not a job array: an array's tasks share one resource request, while trials differ in
CPUs, GPUs and time limit; one job per trial is also what ``squeue`` and ``scancel`` show the user, named
``bakeoff-<position>-<key>``. Every trial the run needs is submitted at once (the scheduler decides what runs
beside what; a trial that uses all its node's cores asks for the node whole, ``--exclusive``).

On the node, the job runs ``python -m bakeoff.run.executors.slurm_executor JOB_FILE``: the trial's process group,
started exactly as the local executor starts it (:func:`~bakeoff.run.executors.local.run_here`, its own deadline
included), and the result written atomically (a temporary file, then a rename) to
``<store folder>/slurm/<key>.result.json``. The
store's folder (``results/bakeoff/`` for ``results/bakeoff.sqlite``) must therefore be on a file system that the
compute nodes share with the submitting machine, at the same path (trial logs, checkpoints, TensorBoard runs are
there too); the SQLite store itself is only ever opened here. A result file present wins over any job state. A
job that ends without one (cancelled, preempted, timed out, out of memory, its node lost, its runner crashed) is
recorded with its Slurm state, job id and the end of its output. Ctrl-C or SIGTERM here cancels every job of the
run (``scancel``) and waits, bounded, until Slurm has ended them (it kills every process of a job: cgroup or
process-tree tracking) before the interrupt propagates; nothing of them is stored.

Other ``sbatch`` options (account, QOS, memory) come from sbatch's own input environment variables
(``SBATCH_ACCOUNT``, ``SBATCH_QOS``, ``SBATCH_MEM_PER_NODE``...), which this process passes on.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from bakeoff.core.result import TrialResult
from bakeoff.core.spec import SpecError, Status
from bakeoff.run.executors.executor import (
    Done,
    Executor,
    Started,
    TrialJob,
    executor_record,
    parse_options,
    resources,
    spread,
)
from bakeoff.run.executors.local import remove_shared, run_here
from bakeoff.run.executors.slurm_job import Paths, job_from_dict, job_script, job_to_dict
from bakeoff.run.launchers import Member

log = logging.getLogger("bakeoff.run.executors.slurm")

POLL_S = 2.0
"""Seconds between two looks at the result files and ``squeue``."""
RESULT_GRACE_S = {"COMPLETED": 60.0}
"""How long a job that ended is given for its result file to appear here: a network file system may show a file
renamed on another machine only after its attribute cache expires (NFS: up to 60 s); other states: DEFAULT_GRACE_S."""
DEFAULT_GRACE_S = 5.0
SILENCE_S = 600.0
"""How long ``squeue`` may fail to answer (a controller restarting or overloaded) before the run gives up: until then
a look without an answer decides nothing, it does not fail the jobs."""
CANCEL_WAIT_S = 90.0
"""How long an interrupted run waits for its cancelled jobs to end (Slurm's KillWait, 30 s by default, and more)."""
ACTIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
                    "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"})
"""Job states that are not over yet (``squeue``'s long names); every other state is an end."""
NEVER = frozenset({"PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints", "InvalidAccount", "InvalidQOS",
                   "QOSMaxNodePerJobLimit", "QOSMaxWallDurationPerJobLimit", "QOSMaxCpuPerJobLimit",
                   "QOSMaxGRESPerJob"})
"""Reasons a job waits that its own request causes (more nodes, time or GPUs than its partition or QOS allows):
it would wait for ever, so it is cancelled and its trial recorded failed with the reason."""
STATUS_OF = {"TIMEOUT": Status.TIMEOUT, "DEADLINE": Status.TIMEOUT, "OUT_OF_MEMORY": Status.OUT_OF_MEMORY}
"""The trial status of a job that ended without a result, by its state; any other state: failed."""
START_HINT = ("start a single-machine Slurm on this machine with `sudo scripts/slurm-local` (from bakeoff's "
              "repository), or run where sbatch reaches your cluster")


@dataclasses.dataclass(frozen=True)
class JobState:
    """What Slurm says of one job: its state (long name, first word: ``CANCELLED by 0`` is CANCELLED), its node
    and the reason it waits or ended."""

    state: str
    node: str = ""
    reason: str = ""

    @property
    def over(self) -> bool:
        return self.state not in ACTIVE


def parse_squeue(text: str) -> dict[str, JobState]:
    """``squeue -h -t all -o '%i|%T|%N|%r'`` lines by job id."""
    states = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0]:
            states[parts[0]] = JobState(parts[1].split()[0], *(p.strip() for p in parts[2:4]))
    return states


def parse_sacct(text: str) -> dict[str, JobState]:
    """``sacct -n -P -X -o JobID,State,NodeList,Reason`` lines by job id (``CANCELLED by 0`` is CANCELLED)."""
    return parse_squeue(text)


def settle(job: TrialJob, job_id: str, state: JobState | None, result: TrialResult | None) -> TrialResult | None:
    """The result to store for ``job`` (Slurm job ``job_id``) now, or None while it is not over: its result file
    when it wrote one, whatever Slurm says; else, once Slurm says it ended (or has forgotten it: ``state`` None),
    a result with the matching status and a reason naming the state and the job."""
    if result is not None:
        return result
    spec = job.spec
    if state is not None and state.state == "PENDING" and state.reason in NEVER:
        return TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.FAILED,
                           reason=f"Slurm job {job_id} can never start ({state.reason}: the trial asks for more than "
                                  "its partition or QOS allows); cancelled")
    if state is not None and not state.over:
        return None
    if state is None:
        status, reason = Status.FAILED, f"Slurm job {job_id} is gone (neither squeue nor sacct knows it)"
    else:
        status = STATUS_OF.get(state.state, Status.FAILED)
        on = f" on {state.node}" if state.node and state.node != "(null)" else ""
        why = f" ({state.reason})" if state.reason and state.reason != "None" else ""
        reason = f"Slurm job {job_id} ended {state.state}{why}{on}"
    failed = TrialResult(spec=spec.to_dict(), key=spec.key(), status=status, reason=f"{reason} without a result")
    if status is Status.TIMEOUT:
        failed.execution.timeout_s = job.timeout_s  # a later run with a longer timeout runs it again (to_run)
    return failed


def _slurm(*command: str, check: bool = True) -> str:
    """A Slurm command's standard output; its error as :class:`SlurmError` (``check``)."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if check and done.returncode:
        raise SlurmError(f"{' '.join(command)}: {(done.stderr or done.stdout).strip()}")
    return done.stdout


class SlurmError(RuntimeError):
    """A Slurm command failed."""


@dataclasses.dataclass
class _Submitted:
    job: TrialJob
    job_id: str
    paths: Paths
    submitted_at: float
    started: bool = False
    node: str = ""
    over_since: float | None = None  # when Slurm first said it ended (its result file may still be on its way)


ACCEPTED = ("slurm=PARTITION[,workers-per-node=K], e.g. slurm=gpu, slurm=gpu,workers-per-node=4 or "
            "slurm,workers-per-node=4 (the default partition; K a positive integer)")
"""The forms ``--executor slurm=...`` accepts (:func:`bakeoff.run.executors.executor.parse_options`)."""


class SlurmExecutor(Executor):
    """Each trial a Slurm job on the partition ``options`` names (the cluster's default partition when empty);
    ``workers-per-node=K`` spreads a multi_worker trial of more than K workers over nodes."""

    name = "slurm"
    remote = True  # even on scripts/slurm-local: Slurm shares the cores out among the jobs

    def __init__(self, options: str = "") -> None:
        partition, self.workers_per_node = parse_options("slurm", options, ACCEPTED)  # "": the default one
        missing = [tool for tool in ("sbatch", "squeue", "scancel", "sinfo") if shutil.which(tool) is None]
        if missing:
            raise SpecError(f"--executor slurm: {', '.join(missing)} not found on PATH; {START_HINT}")
        try:
            partitions = _slurm("sinfo", "-h", "-o", "%P").split()
        except (SlurmError, subprocess.TimeoutExpired) as exc:
            raise SpecError(f"--executor slurm: no Slurm controller answers ({exc}); {START_HINT}") from None
        names = [p.rstrip("*") for p in partitions]
        if partition and partition not in names:
            raise SpecError(f"--executor slurm={partition}: no such partition; accepted: {', '.join(names)}")
        self.partition = partition
        self.default = next((p.rstrip("*") for p in partitions if p.endswith("*")), names[0] if names else "")

    def describe(self) -> str:
        return (f"slurm: each trial a job on partition {self.partition or self.default}, submitted with sbatch; "
                "results come back through the store's folder, which the nodes must share at the same path")

    def cluster_gpus(self) -> bool:
        """Whether the partition's nodes have GPUs (``--device auto`` asks for them only then)."""
        where = ("-p", self.partition) if self.partition else ()
        return "gpu" in _slurm("sinfo", "-h", *where, "-o", "%G", check=False).lower()

    def submit(self, job: TrialJob, gpus: bool) -> _Submitted | TrialResult:
        """Write ``job``'s files and submit it; a submission Slurm refuses is the trial's failed result."""
        folder = (job.log_dir.parent / "slurm").absolute()
        folder.mkdir(parents=True, exist_ok=True)
        paths = Paths.of(folder, job.spec.key())
        paths.result.unlink(missing_ok=True)  # an earlier attempt's result must not stand for this one
        paths.job.write_text(json.dumps({**job_to_dict(job), "workers_per_node": self.workers_per_node}))
        paths.script.write_text(job_script(job, paths, resources(job.spec), self.partition, gpus,
                                           workers_per_node=self.workers_per_node))
        submitted_at = time.time()
        try:
            job_id = _slurm("sbatch", "--parsable", str(paths.script)).strip().split(";")[0]
        except SlurmError as exc:
            spec = job.spec
            return TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.FAILED,
                               reason=f"Slurm refused the job ({exc}); its script: {paths.script}")
        log.info("%s: Slurm job %s", job.what, job_id)
        return _Submitted(job, job_id, paths, submitted_at)

    def run(self, jobs: Iterable[TrialJob], started: Started, done: Done) -> None:
        self._silent_since = time.time()
        gpus: bool | None = None
        waiting: dict[str, _Submitted] = {}
        try:
            for job in jobs:
                if gpus is None:
                    gpus = self.cluster_gpus()
                submitted = self.submit(job, gpus)
                if isinstance(submitted, TrialResult):
                    started(job)
                    done(job, submitted)
                else:
                    waiting[submitted.job_id] = submitted
            while waiting:
                self._look(waiting, started, done)
                if waiting:
                    time.sleep(POLL_S)
        except BaseException as exc:  # Ctrl-C, SIGTERM, a store that cannot take a result: no job runs on unowned
            from bakeoff.run.process import Interrupted, hold

            cut = list(waiting)
            with hold():
                self.cancel(cut)
                for sub in waiting.values():
                    remove_shared(sub.job)
            if isinstance(exc, Interrupted) and exc.stopped is None and cut:
                exc.stopped = f"the run's {len(cut)} Slurm job(s) still queued or running ({', '.join(cut)}: scancel)"
            raise

    def _look(self, waiting: dict[str, _Submitted], started: Started, done: Done) -> None:
        """Store what has ended; say what has started."""
        answer = self.states(list(waiting))
        now = time.time()
        if answer is None and now - self._silent_since > SILENCE_S:
            raise SlurmError(f"squeue has not answered for {SILENCE_S:.0f} s; the run's jobs are cancelled")
        if answer is not None:
            self._silent_since = now
        for job_id, sub in list(waiting.items()):
            state = (answer or {}).get(job_id)
            if answer is None and not sub.paths.result.exists():
                continue  # Slurm did not answer: only a result file decides
            if state is not None and state.node and state.state != "PENDING":
                sub.node = state.node
            result = read_result(sub.paths.result)
            if result is None and (state is None or state.over):  # give its result file time to show here
                sub.over_since = sub.over_since or now
                grace = RESULT_GRACE_S.get(state.state if state else "", DEFAULT_GRACE_S)
                if now - sub.over_since < grace:
                    continue
            final = settle(sub.job, job_id, state, result)
            if result is None and final is not None and state is not None and not state.over:  # can never start
                _slurm("scancel", job_id, check=False)
            if (final is not None or (state is not None and state.state != "PENDING")) and not sub.started:
                sub.started = True
                started(sub.job)
            if final is None:
                continue
            if result is None:
                final.reason += f"; its output: {_tail(sub.paths.output)}"
                remove_shared(sub.job)  # a job killed before its trial could remove its folder on the store's
            final.execution.executor = executor_record(
                self.name, submitted_at=sub.submitted_at, started_at=final.setup.started_at, job_id=job_id,
                node=sub.node or final.execution.host or None, partition=self.partition or self.default)
            del waiting[job_id]
            done(sub.job, final)

    def states(self, job_ids: list[str]) -> dict[str, JobState] | None:
        """What Slurm says of each job: ``squeue`` (which keeps ended jobs for the cluster's MinJobAge), then
        ``sacct`` for the jobs squeue has forgotten (nothing where the cluster keeps no accounting); a job
        neither knows is absent. None when squeue did not answer."""
        if not job_ids:
            return {}
        try:
            text = _slurm("squeue", "-h", "-t", "all", "-j", ",".join(job_ids), "-o", "%i|%T|%N|%r")
        except (SlurmError, subprocess.TimeoutExpired) as exc:
            if "Invalid job id" not in str(exc):  # squeue's answer when it has forgotten every job asked
                log.warning("no answer from Slurm this time: %s", exc)
                return None
            text = ""
        states = parse_squeue(text)
        forgotten = [j for j in job_ids if j not in states]
        if forgotten and shutil.which("sacct"):
            states.update(parse_sacct(_slurm("sacct", "-n", "-P", "-X", "-j", ",".join(forgotten),
                                             "-o", "JobID,State,NodeList,Reason", check=False)))
        return states

    def cancel(self, job_ids: list[str]) -> None:
        """Cancel ``job_ids`` and wait (at most :data:`CANCEL_WAIT_S`) until Slurm has ended every one."""
        if not job_ids:
            return
        log.warning("cancelling %d Slurm job(s) of this run: %s", len(job_ids), " ".join(job_ids))
        _slurm("scancel", *job_ids, check=False)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while time.monotonic() < deadline:
            states = self.states(job_ids)
            left = job_ids if states is None else [j for j, s in states.items() if not s.over]
            if not left:
                return
            time.sleep(0.5)
        log.error("Slurm jobs %s have not ended %.0f s after scancel", " ".join(left), CANCEL_WAIT_S)


def read_result(path: Path) -> TrialResult | None:
    """The result a job wrote, or None (not there yet; a rename makes it appear whole)."""
    try:
        return TrialResult.from_dict(json.loads(path.read_text()))
    except (FileNotFoundError, ValueError):  # not there yet, or unreadable: the job's state decides
        return None


def _tail(path: Path, lines: int = 4) -> str:
    """The last lines of a job's output, on one line (a reason is one line in the console and the report)."""
    try:
        last = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()][-lines:]
    except OSError:
        return f"{path} was not written"
    return " | ".join(line[:300] for line in last) or f"{path} is empty"


def cpus_per_node(nodes: list[str], text: str) -> dict[str, str]:
    """Each of the job's ``nodes`` (in its node list's order) with the CPUs the job has there, from
    ``SLURM_JOB_CPUS_PER_NODE`` (``2(x3),1``: 2 on each of the first three nodes, 1 on the fourth)."""
    counts: list[str] = []
    for part in filter(None, text.split(",")):
        count, _, times = part.partition("(x")
        counts += [count] * (int(times.rstrip(")")) if times else 1)
    return dict(zip(nodes, counts, strict=False))


def job_step(node: str, cpus: Mapping[str, str], member: Member) -> Member:
    """``member`` (a node's unit, :mod:`bakeoff.run.executors.node`) started on its host from the batch step on
    ``node``: here when its host is this node, else as one step of the job on its node (``srun``), which passes it
    the whole environment, gives it every CPU the job has there (``cpus``: one step a node, holding all its
    members) and which Slurm ends with the job."""
    if not member.host or member.host == node:
        return member
    step = ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={member.host}",
            f"--cpus-per-task={cpus.get(member.host, '1')}", "--kill-on-bad-exit=1", "--quiet", *member.command]
    return dataclasses.replace(member, name=f"{member.name} on {member.host}", command=step)


def main(argv: list[str] | None = None) -> int:
    """On the node: run the trial ``JOB_FILE`` describes and write its result beside it (write, then rename)."""
    from bakeoff.run.process import Interrupted, interruptible

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    (job_file,) = argv if argv is not None else sys.argv[1:]
    path = Path(job_file)
    raw = json.loads(path.read_text())
    per_node = raw.pop("workers_per_node", None)
    job = job_from_dict(raw)
    log.info("%s on %s (Slurm job %s)", job.what, socket.gethostname(), os.environ.get("SLURM_JOB_ID", "?"))
    hosts, place = None, None
    if int(os.environ.get("SLURM_JOB_NUM_NODES", "1")) > 1:  # the trial's hosts are the job's nodes
        nodes = _slurm("scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]).split()
        hosts = spread(nodes, job.spec.workers, per_node or 1)
        cpus = cpus_per_node(nodes, os.environ.get("SLURM_JOB_CPUS_PER_NODE", ""))
        place = functools.partial(job_step, os.environ.get("SLURMD_NODENAME", nodes[0]), cpus)
    try:
        with interruptible():  # scancel's SIGTERM (or Slurm's time limit) kills the trial's group, as Ctrl-C locally
            result = run_here(job, hosts=hosts, place=place)
    except Interrupted as exc:
        log.error("%s: %s; its processes were killed, no result written", job.what, exc.signal_name)
        return exc.exit_code
    if hosts is not None:
        result.execution.hosts = hosts
    result.execution.host = result.execution.host or socket.gethostname()
    target = path.with_name(path.name.replace(".job.json", ".result.json"))
    partial = target.with_suffix(".part")
    partial.write_text(json.dumps(result.to_dict()))
    partial.replace(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
