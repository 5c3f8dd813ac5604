"""The Slurm executor (#27): ``bakeoff run --executor slurm``.

Everywhere, CI included (no Slurm needed, under a second): the job scripts it writes for representative specs,
exact ``#SBATCH`` lines (whole node, threads given, GPUs, multi-worker on one node and across nodes); the
executor's argument; what it records from ``squeue``/``sacct`` states (recorded outputs), a result file winning
over any state; its whole polling loop against a fake ``sbatch``/``squeue``/``scancel`` (started before done,
each job stored once, a look without an answer deciding nothing, every job cancelled when the run is interrupted);
the launchers' placement inside a multi-node job (each other node one ``srun`` step, with the CPUs the job has
there); no Slurm module imported by ``bakeoff --help``.

With a real Slurm: the one that answers ``sinfo``, or else, as root where Debian's ``slurm-wlm`` and ``munge`` are
installed, two nodes on this machine that the tests start with ``BAKEOFF_SLURM_NODES=2 scripts/slurm-local`` (it
writes /etc/slurm/slurm.conf and a line of /etc/hosts) and stop after; otherwise these tests are skipped with the
reason (installing the packages, ~30 s of apt and a system change, is left to whoever runs them — CI does not).
Through the real CLI: a small suite, every trial ok with its job id, stored once, resumed without a job; a job
cancelled with ``scancel`` recorded so, no trial process left; Ctrl-C cancelling every job (exit 130, none left in
``squeue``, no process); ``multi_worker`` x4 trials two workers on each of two nodes (torch, TensorFlow, JAX),
every rank read, then a torch one cancelled, and one whose rank on the second node is killed, leaving nothing.
Measured on 2 shared cores before the two-per-node tests (#51): 80 s of wall time (10 s starting Slurm, 6 s
stopping it, the rest mostly waiting on the trials), 38 s of CPU in all (trials, daemons, CLIs: a cpuacct cgroup
around pytest); with them, 172 s of wall time on a running Slurm (they add about 90 s).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec, SpecError, Status
from bakeoff.run.executors import parse, slurm_job
from bakeoff.run.executors import slurm_executor as slurm
from bakeoff.run.executors.executor import TrialJob, nodes_for, parse_options, resources
from bakeoff.run.process import Interrupted

ROOT = Path(__file__).resolve().parent.parent


def _job(tmp_path: Path, **spec: object) -> TrialJob:
    fields = {"workload": "mnist", "framework": "torch", "max_steps": 3, **spec}
    return TrialJob(RunSpec(**fields), position=3, timeout_s=600, log_dir=tmp_path / "logs")


def _script(tmp_path: Path, job: TrialJob, cluster_gpus: bool = False, partition: str = "") -> list[str]:
    paths = slurm_job.Paths.of(tmp_path / "slurm", job.spec.key())
    text = slurm_job.job_script(job, paths, resources(job.spec), partition, cluster_gpus, workdir=Path("/work/dir"),
                            python="/venv/bin/python")
    return [line for line in text.splitlines() if line.startswith("#SBATCH")]


def _common(tmp_path: Path, job: TrialJob) -> list[str]:
    key = job.spec.key()
    return [f"#SBATCH --job-name=bakeoff-3-{key[:12]}", f"#SBATCH --output={tmp_path}/slurm/{key}.out",
            "#SBATCH --nodes=1", "#SBATCH --ntasks=1", "#SBATCH --time=12", "#SBATCH --no-requeue"]


def test_a_trial_using_every_core_asks_for_its_node_whole(tmp_path):
    job = _job(tmp_path, device="cpu")
    assert _script(tmp_path, job, cluster_gpus=True) == _common(tmp_path, job) + [
        "#SBATCH --exclusive", "#SBATCH --mem=0", "#SBATCH --chdir=/work/dir"]


def test_a_trial_with_its_threads_asks_for_those_cores_on_its_partition(tmp_path):
    job = _job(tmp_path, device="cpu", threads=2)
    assert _script(tmp_path, job, partition="short") == _common(tmp_path, job) + [
        "#SBATCH --cpus-per-task=2", "#SBATCH --partition=short", "#SBATCH --chdir=/work/dir"]


def test_gpus_are_asked_for_by_device_cuda_and_by_auto_where_the_cluster_has_them(tmp_path):
    cuda = _job(tmp_path, device="cuda", threads=4)
    assert _script(tmp_path, cuda)[6:] == ["#SBATCH --cpus-per-task=4", "#SBATCH --gpus-per-node=1",
                                           "#SBATCH --chdir=/work/dir"]
    auto = _job(tmp_path, threads=4)
    assert "#SBATCH --gpus-per-node=1" in _script(tmp_path, auto, cluster_gpus=True)
    assert not any("--gpus-per-node" in line for line in _script(tmp_path, auto, cluster_gpus=False))


def test_a_multi_worker_trial_is_one_task_holding_every_rank_and_its_cores(tmp_path):
    job = _job(tmp_path, parallelism="multi_worker", workers=2, threads=1)
    assert _script(tmp_path, job, cluster_gpus=True) == _common(tmp_path, job) + [
        "#SBATCH --cpus-per-task=2", "#SBATCH --gpus-per-node=2", "#SBATCH --chdir=/work/dir"]


def test_a_multi_node_trial_is_one_job_a_task_per_node_each_asking_for_its_workers(tmp_path):
    job = _job(tmp_path, parallelism="multi_worker", workers=4, threads=3, device="cuda")
    paths = slurm_job.Paths.of(tmp_path / "slurm", job.spec.key())
    text = slurm_job.job_script(job, paths, resources(job.spec), workdir=Path("/w"), workers_per_node=2)
    lines = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert lines[2:] == ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --time=12",
                         "#SBATCH --no-requeue", "#SBATCH --cpus-per-task=6", "#SBATCH --gpus-per-node=2",
                         "#SBATCH --chdir=/w"]
    assert slurm.spread(["a", "b"], 4, 2) == ["a", "a", "b", "b"]
    assert slurm.spread(["a", "b", "c"], 3, 1) == ["a", "b", "c"]
    assert [nodes_for(job.spec, k) for k in (4, 3, 1, None)] == [1, 2, 4, 1]
    assert nodes_for(_job(tmp_path, parallelism="data_parallel", workers=4).spec, 1) == 1


def test_the_executor_argument_names_a_partition_and_workers_per_node():
    def parsed(options: str) -> tuple[str, int | None]:
        return parse_options("slurm", options, slurm.ACCEPTED)

    assert parsed("") == ("", None)
    assert parsed("gpu") == ("gpu", None)
    assert parsed("gpu,workers-per-node=4") == ("gpu", 4)
    assert parsed("workers-per-node=1") == ("", 1)
    for bad in ("gpu,cpu", "gpu,workers-per-node=0", "gpu,nodes=2"):
        with pytest.raises(SpecError, match=r"accepted: slurm=PARTITION\[,workers-per-node=K\]"):
            parsed(bad)


def test_inside_a_multi_node_job_each_other_node_is_one_job_step_holding_the_cpus_the_job_has_there(tmp_path):
    from bakeoff.run import launchers
    from bakeoff.run.executors import node

    # K=2 workers on each of two nodes: one unit per node, the second node's one srun step
    spec = RunSpec(workload="mnist", framework="torch", parallelism="multi_worker", workers=4, max_steps=2)
    plan = launchers.plan(spec, ["a"], {"A": "1"}, ports=[29500], cores=2, hosts=["n1", "n1", "n2", "n2"])
    units, _ = node.fold(plan.members, [tmp_path / f"{i}.log" for i in range(4)], tmp_path, tmp_path, "k", False)
    cpus = slurm.cpus_per_node(["n1", "n2"], "3,5")  # this node's count is not the other's
    here, there = (slurm.job_step("n1", cpus, unit) for unit in units)
    assert here == units[0]  # on this node: started as it is
    assert there.command[:7] == ["srun", "--nodes=1", "--ntasks=1", "--nodelist=n2", "--cpus-per-task=5",
                                 "--kill-on-bad-exit=1", "--quiet"]
    assert there.command[7:] == units[1].command and there.name == "host 1 on n2"
    assert there.env["A"] == "1"
    ranks_there = json.loads(Path(units[1].command[-1]).read_text())["members"]
    command = ranks_there[0]["command"]
    assert command[command.index("--master-addr") + 1] == "n1"  # rendezvous at the first node
    assert [m["name"] for m in ranks_there] == ["node 2", "node 3"]


def test_the_cpus_a_job_has_on_each_node_are_read_from_slurms_compressed_list():
    assert slurm.cpus_per_node(["a", "b", "c", "d"], "2(x3),1") == {"a": "2", "b": "2", "c": "2", "d": "1"}
    assert slurm.cpus_per_node(["a", "b"], "8(x2)") == {"a": "8", "b": "8"}


def test_the_script_runs_the_job_file_on_the_node_and_the_time_limit_has_a_margin(tmp_path):
    job = _job(tmp_path, device="cpu")
    paths = slurm_job.Paths.of(tmp_path, job.spec.key())
    last = slurm_job.job_script(job, paths, resources(job.spec), python="/venv/bin/python").splitlines()[-1]
    assert last == f"exec /venv/bin/python -m bakeoff.run.executors.slurm_executor {paths.job}"
    assert slurm_job.time_limit(1) == "3" and slurm_job.time_limit(900) == "17"


def test_a_job_file_round_trips_to_the_same_trial(tmp_path):
    from bakeoff.trial.profile import Request

    job = TrialJob(RunSpec(workload="mnist", framework="jax", max_steps=3, seed=4), 2, 90.0, tmp_path / "logs",
                   tmp_path / "ck", None, keep_dir=tmp_path / "keep", profile=Request(tmp_path / "prof", 3))
    again = slurm_job.job_from_dict(json.loads(json.dumps(slurm_job.job_to_dict(job))))
    assert again == job and again.spec.key() == job.spec.key()


SQUEUE = """\
101|PENDING|(null)|Resources
102|RUNNING|node7|None
103|COMPLETED|node7|None
104|CANCELLED|node8|None
105|TIMEOUT|node8|TimeLimit
106|OUT_OF_MEMORY|node9|OutOfMemory
107|NODE_FAIL|node9|NodeDown
108|PREEMPTED|node9|None
109|FAILED|node7|NonZeroExitCode
112|PENDING|(null)|PartitionNodeLimit
"""
SACCT = "110|CANCELLED by 0|node3|None\n111|BOOT_FAIL|node4|None\n"


def test_each_state_squeue_reports_becomes_the_matching_status_with_the_job_named(tmp_path):
    job = _job(tmp_path)
    states = slurm.parse_squeue(SQUEUE) | slurm.parse_sacct(SACCT)
    assert slurm.settle(job, "101", states["101"], None) is None
    assert slurm.settle(job, "102", states["102"], None) is None
    expected = {"103": Status.FAILED, "104": Status.FAILED, "105": Status.TIMEOUT, "106": Status.OUT_OF_MEMORY,
                "107": Status.FAILED, "108": Status.FAILED, "109": Status.FAILED, "110": Status.FAILED,
                "111": Status.FAILED}
    for job_id, status in expected.items():
        result = slurm.settle(job, job_id, states[job_id], None)
        assert result is not None and result.status is status, job_id
        assert f"Slurm job {job_id} ended {states[job_id].state}" in result.reason
        assert result.key == job.spec.key()
    assert states["110"].state == "CANCELLED"
    assert "(TimeLimit) on node8" in slurm.settle(job, "105", states["105"], None).reason
    assert slurm.settle(job, "105", states["105"], None).execution.timeout_s == 600
    never = slurm.settle(job, "112", states["112"], None)
    assert never.status is Status.FAILED and never.reason.startswith("Slurm job 112 can never start "
                                                                     "(PartitionNodeLimit")
    gone = slurm.settle(job, "113", None, None)
    assert gone.status is Status.FAILED and "Slurm job 113 is gone" in gone.reason


def test_a_result_file_wins_over_any_state(tmp_path):
    job = _job(tmp_path)
    ok = TrialResult(spec=job.spec.to_dict(), key=job.spec.key(), status=Status.OK)
    for state in (slurm.JobState("RUNNING"), slurm.JobState("CANCELLED"), slurm.JobState("TIMEOUT"), None):
        assert slurm.settle(job, "7", state, ok) is ok


class FakeSlurm:
    """``sbatch``, ``squeue``, ``scancel`` and ``sinfo`` as a dict of job states; each call can change them."""

    def __init__(self) -> None:
        self.states: dict[str, str] = {}
        self.scripts: dict[str, Path] = {}
        self.cancelled: list[str] = []
        self.step = lambda fake: None  # what happens on the cluster between two looks

    def __call__(self, *command: str, check: bool = True) -> str:
        tool = command[0]
        if tool == "sbatch":
            job_id = str(100 + len(self.states))
            self.states[job_id], self.scripts[job_id] = "PENDING", Path(command[-1])
            return f"{job_id};cluster\n"
        if tool == "squeue":
            self.step(self)
            asked = command[command.index("-j") + 1].split(",")
            return "".join(f"{j}|{self.states[j]}|node1|None\n" for j in asked if j in self.states)
        if tool == "scancel":
            self.cancelled += command[1:]
            self.states.update({j: "CANCELLED" for j in command[1:] if self.states[j] in slurm.ACTIVE})
            return ""
        if tool == "sinfo":
            return "(null)\n"
        return ""

    def finish(self, job_id: str, status: Status = Status.OK) -> None:
        """The job ran on its node and wrote its result, as the entry point does."""
        raw = json.loads(self.scripts[job_id].with_suffix("").with_suffix(".job.json").read_text())
        assert raw.pop("workers_per_node") is None
        job = slurm_job.job_from_dict(raw)
        result = TrialResult(spec=job.spec.to_dict(), key=job.spec.key(), status=status)
        result.setup.started_at = time.time()
        slurm_job.Paths.of(self.scripts[job_id].parent, job.spec.key()).result.write_text(json.dumps(result.to_dict()))
        self.states[job_id] = "COMPLETED"


@pytest.fixture
def fake(monkeypatch):
    cluster = FakeSlurm()
    monkeypatch.setattr(slurm, "_slurm", cluster)
    monkeypatch.setattr(slurm, "POLL_S", 0.0)
    monkeypatch.setattr(slurm, "DEFAULT_GRACE_S", 0.0)
    monkeypatch.setattr(slurm, "RESULT_GRACE_S", {})
    executor = object.__new__(slurm.SlurmExecutor)
    executor.partition, executor.default, executor.workers_per_node = "", "local", None
    return cluster, executor


def test_the_driver_stores_each_job_once_started_before_done_and_records_its_job(tmp_path, fake):
    cluster, executor = fake
    jobs = [_job(tmp_path, seed=seed, device="cpu", threads=1) for seed in range(3)]
    looks = iter(range(100))

    def step(fake: FakeSlurm) -> None:  # 100 runs, 101 writes its result, 102 is cancelled: one state per look
        look = next(looks)
        if look == 0:
            fake.states["100"] = fake.states["101"] = "RUNNING"
        elif look == 1:
            fake.finish("100")
            fake.finish("101", Status.FAILED)
            fake.states["101"] = "FAILED"  # a result file wins over the state
        elif look == 2:
            fake.states["102"] = "CANCELLED"

    cluster.step = step
    events: list[tuple[str, int]] = []
    stored: dict[int, TrialResult] = {}

    def done(job: TrialJob, result: TrialResult) -> None:
        events.append(("done", job.spec.seed))
        stored[job.spec.seed] = result

    executor.run(iter(jobs), lambda job: events.append(("start", job.spec.seed)), done)
    assert sorted(events) == sorted([("start", s) for s in range(3)] + [("done", s) for s in range(3)])
    assert all(events.index(("start", s)) < events.index(("done", s)) for s in range(3))
    assert [stored[s].status for s in range(3)] == [Status.OK, Status.FAILED, Status.FAILED]
    assert stored[1].reason == ""  # its own result, not the job's state
    assert stored[2].reason.startswith("Slurm job 102 ended CANCELLED on node1 without a result")
    record = stored[0].execution.executor
    assert (record["name"], record["job_id"], record["node"]) == ("slurm", "100", "node1")
    assert record["scheduling_s"] >= 0
    assert cluster.cancelled == []


def test_an_interrupt_cancels_every_job_and_stores_nothing_of_them(tmp_path, fake):
    cluster, executor = fake
    jobs = [_job(tmp_path, seed=seed, device="cpu", threads=1) for seed in range(3)]

    def step(fake: FakeSlurm) -> None:
        if "100" in fake.states and fake.states["100"] == "PENDING":
            fake.finish("100")
            fake.states["101"] = "RUNNING"
        elif fake.states.get("100") == "COMPLETED" and not fake.cancelled:
            raise Interrupted(signal.SIGINT)  # Ctrl-C while the driver polls

    cluster.step = step
    stored = []
    with pytest.raises(Interrupted) as caught:
        executor.run(iter(jobs), lambda job: None, lambda job, result: stored.append(job.spec.seed))
    assert stored == [0]
    assert sorted(cluster.cancelled) == ["101", "102"]
    assert caught.value.stopped == "the run's 2 Slurm job(s) still queued or running (101, 102: scancel)"


def test_a_look_without_an_answer_decides_nothing_and_a_forgotten_job_is_failed(tmp_path, fake, monkeypatch):
    cluster, executor = fake
    answers = iter(["silent", "silent", "running", "forgotten"])

    def flaky(*command: str, check: bool = True) -> str:
        if command[0] == "squeue":
            answer = next(answers)
            if answer == "silent":  # a controller restarting: no state of any job
                raise slurm.SlurmError("squeue: error: Socket timed out on send/recv operation")
            if answer == "forgotten":  # past MinJobAge, no accounting: squeue's own words
                raise slurm.SlurmError("slurm_load_jobs error: Invalid job id specified")
            cluster.states["100"] = "RUNNING"
        return cluster(*command, check=check)

    monkeypatch.setattr(slurm, "_slurm", flaky)
    stored = []
    executor.run(iter([_job(tmp_path, device="cpu")]), lambda job: None, lambda job, result: stored.append(result))
    (result,) = stored
    assert result.status is Status.FAILED
    assert result.reason.startswith("Slurm job 100 is gone (neither squeue nor sacct knows it) without a result")
    assert result.execution.executor["node"] == "node1"


def test_a_submission_slurm_refuses_is_that_trial_failed_and_the_run_goes_on(tmp_path, fake, monkeypatch):
    cluster, executor = fake

    def refusing(*command: str, check: bool = True) -> str:
        if command[0] == "sbatch" and not cluster.states:
            cluster.states["skip"] = "COMPLETED"  # the next submission is accepted
            raise slurm.SlurmError("sbatch: error: Requested node configuration is not available")
        return cluster(*command, check=check)

    monkeypatch.setattr(slurm, "_slurm", refusing)
    cluster.step = lambda fake: fake.finish("101") if fake.states["101"] == "PENDING" else None
    stored = {}
    jobs = [_job(tmp_path, seed=seed, device="cpu", threads=1) for seed in range(2)]
    executor.run(iter(jobs), lambda job: None, lambda job, result: stored.update({job.spec.seed: result}))
    assert stored[0].status is Status.FAILED and "Requested node configuration is not available" in stored[0].reason
    assert stored[1].status is Status.OK


def test_a_suite_through_run_suite_is_stored_from_the_jobs_without_this_machines_gpu_check_or_lock(
        tmp_path, fake, monkeypatch):
    from bakeoff.plan.suite import adhoc_suite
    from bakeoff.results.store import Store
    from bakeoff.run import machine, runner, session

    cluster, executor = fake
    cluster.step = lambda fake: [fake.finish(j) for j, s in list(fake.states.items()) if s == "PENDING"]
    monkeypatch.setattr(runner, "cuda_devices", lambda: (0, "no NVIDIA GPU is visible"))
    monkeypatch.setattr(machine, "measuring", lambda *a, **k: pytest.fail("a remote executor took the local lock"))
    suite = adhoc_suite({"workload": "mnist", "framework": ["torch", "jax"], "execution": ["eager"], "max_steps": 3,
                         "device": "cuda"})
    with pytest.raises(SpecError, match="--device cuda: no NVIDIA GPU"):
        runner.validate(suite.specs)
    done = session.run_suite(suite, tmp_path / "s.sqlite", executor=executor)
    assert sorted(r.run_spec.framework.value for r in done.summary.ran) == ["jax", "torch"]
    stored = Store(tmp_path / "s.sqlite", readonly=True).results()
    assert sorted(r.execution.executor["job_id"] for r in stored) == ["100", "101"]
    assert all(r.status is Status.OK and r.order.of == 2 for r in stored)


def test_without_sbatch_the_run_stops_before_anything_runs_saying_how_to_start_slurm(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SpecError, match=r"sbatch, squeue, scancel, sinfo not found on PATH.*scripts/slurm-local"):
        parse("slurm")
    from bakeoff.cli.main import main

    assert main(["run", "--workload", "mnist", "--max-steps", "1", "--executor", "slurm=gpu",
                 "--store", str(tmp_path / "s.sqlite")]) == 2
    assert not (tmp_path / "s.sqlite").exists()


def test_bakeoff_help_imports_nothing_of_slurm():
    code = ("import sys; from bakeoff.cli.main import build_parser; build_parser().format_help(); "
            "print(sorted(m for m in sys.modules if 'slurm' in m))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# With a real Slurm ------------------------------------------------------------------------------------------------


def _answers() -> bool:
    try:
        return shutil.which("sinfo") is not None and subprocess.run(
            ["sinfo", "-h"], capture_output=True, timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture(scope="module")
def real_slurm():
    """A Slurm that answers: the one running, or a single-machine one started here (and stopped after)."""
    if _answers():
        yield
        return
    if os.geteuid() != 0 or shutil.which("slurmctld") is None or shutil.which("munged") is None:
        pytest.skip("no Slurm answers (sinfo) and slurm-wlm/munge are not installed to start one as root: "
                    "sudo scripts/slurm-local installs and starts a single-machine Slurm")
    # Two nodes on this machine, so that a trial across nodes runs for real (one node each: 1 CPU here on 2).
    start = subprocess.run([str(ROOT / "scripts" / "slurm-local")], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "BAKEOFF_SLURM_NODES": "2"})
    if start.returncode:
        pytest.skip(f"scripts/slurm-local could not start a Slurm here: {start.stderr.strip()[-500:]}")
    yield
    subprocess.run([str(ROOT / "scripts" / "slurm-local"), "stop"], capture_output=True, timeout=60)


def _two_nodes() -> None:
    """Skip unless this Slurm has two nodes."""
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()
    if len(nodes) < 2:
        pytest.skip(f"this Slurm has one node ({nodes}): BAKEOFF_SLURM_NODES=2 scripts/slurm-local makes two")


def _two_on_each_of_two_nodes(tmp_path: Path) -> TrialResult:
    """The store's one result: ok, its four ranks two on each of two nodes."""
    from bakeoff.results.store import Store

    (result,) = Store(tmp_path / "s.sqlite", readonly=True).results()
    assert result.status is Status.OK, result.reason
    first, second = result.execution.hosts[0], result.execution.hosts[2]
    assert result.execution.hosts == [first, first, second, second] and first != second
    return result


def _bakeoff(tmp_path: Path, *flags: str, threads: bool = True) -> subprocess.Popen:
    """``bakeoff run`` of the tiny MNIST on the CPU, one thread a process unless not ``threads`` (then each node's
    cores, shared by its workers: two workers on a node of one CPU)."""
    command = [sys.executable, "-m", "bakeoff.cli", "run", "--workload", "mnist", "--preset", "tiny", "--execution",
               "eager", "--device", "cpu", *(("--threads", "1") if threads else ()), "--executor", "slurm", "--store",
               str(tmp_path / "s.sqlite"), "--no-report", "--concurrent", *flags]
    return subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _processes_of(tmp_path: Path, but: int | None = None) -> list[str]:
    """Command lines of the processes whose arguments name ``tmp_path`` (each trial's do: its checkpoint folder)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            line = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(tmp_path) in line and int(proc.name) != but:
            found.append(line)
    return found


def _our_jobs(tmp_path: Path) -> list[str]:
    """Job ids of this test's jobs that Slurm has not ended."""
    out = subprocess.run(["squeue", "-h", "-o", "%i|%T|%o"], capture_output=True, text=True).stdout
    return [line.split("|")[0] for line in out.splitlines() if str(tmp_path) in line]


def test_a_suite_runs_as_slurm_jobs_each_trial_stored_once_with_its_job(tmp_path, real_slurm):
    from bakeoff.results.store import Store

    dry = _bakeoff(tmp_path, "--framework", "torch,jax", "--max-steps", "3", "--dry-run")
    out, _ = dry.communicate(timeout=300)
    assert "executor (would run them): slurm: each trial a job on partition" in out, out
    assert "2 to run" in out and _our_jobs(tmp_path) == []
    run = _bakeoff(tmp_path, "--framework", "torch,jax", "--max-steps", "3")
    out, _ = run.communicate(timeout=600)
    assert run.returncode == 0, out
    assert "ran 2 trials" in out
    results = Store(tmp_path / "s.sqlite", readonly=True).results()
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()
    assert sorted(r.run_spec.framework.value for r in results) == ["jax", "torch"]
    for result in results:
        assert result.status is Status.OK, result.reason
        record = result.execution.executor
        assert record["name"] == "slurm" and record["job_id"].isdigit()
        assert record["node"] in nodes and record["scheduling_s"] >= 0
    again = _bakeoff(tmp_path, "--framework", "torch,jax", "--max-steps", "3")
    out, _ = again.communicate(timeout=300)
    assert "ran 0 trials, skipped 2 already in the store" in out, out
    assert _processes_of(tmp_path) == []


def test_scancel_is_recorded_and_ctrl_c_cancels_every_job_leaving_no_process(tmp_path, real_slurm):
    from bakeoff.results.store import Store

    run = _bakeoff(tmp_path, "--framework", "torch", "--repeats", "2", "--max-steps", "100000",
                   "--max-seconds", "300")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until a job's trial process runs
        trials = [line for line in _processes_of(tmp_path, but=run.pid) if "-m bakeoff.trial " in line]
        if trials:
            break
        time.sleep(0.5)
    assert trials, "no trial process started"
    running = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-o", "%i|%o"], capture_output=True,
                             text=True).stdout
    victim = next(line.split("|")[0] for line in running.splitlines() if str(tmp_path) in line)
    subprocess.run(["scancel", victim], check=True)
    with Store(tmp_path / "s.sqlite", readonly=True) as store:
        while time.monotonic() < deadline and not store.results():
            time.sleep(0.5)
        (cancelled,) = store.results()
    assert cancelled.status is Status.FAILED
    assert cancelled.reason.startswith(f"Slurm job {victim} ended CANCELLED"), cancelled.reason
    assert cancelled.execution.executor["job_id"] == victim
    assert not any(cancelled.key in line for line in _processes_of(tmp_path, but=run.pid))
    run.send_signal(signal.SIGINT)
    out, _ = run.communicate(timeout=150)
    assert run.returncode == 130, out
    assert "cancelling 1 Slurm job(s)" in out
    assert _our_jobs(tmp_path) == []
    assert _processes_of(tmp_path) == []
    assert [r.key for r in Store(tmp_path / "s.sqlite", readonly=True).results()] == [cancelled.key]


def test_a_multi_worker_trial_spans_two_nodes_two_workers_on_each_and_a_cancelled_one_leaves_no_rank(
        tmp_path, real_slurm):
    """workers-per-node=2: each node's two workers started by one job step (#51: a step per worker asked for the
    node's every CPU twice, and the second waited for ever)."""

    _two_nodes()
    flags = ("--framework", "torch", "--parallelism", "multi_worker", "--workers", "4", "--executor",
             "slurm,workers-per-node=2")  # the form without a partition, as the README writes it
    run = _bakeoff(tmp_path, *flags, "--max-steps", "3", threads=False)
    out, _ = run.communicate(timeout=600)
    assert run.returncode == 0, out
    result = _two_on_each_of_two_nodes(tmp_path)
    assert result.distributed.launcher == "torchrun_nodes" and len(result.distributed.ranks) == 4
    log = Path(result.execution.log)
    assert "node 2 on cpus" in log.with_name(log.stem + ".host1.log").read_text()  # the second node's unit

    run = _bakeoff(tmp_path, *flags, "--max-steps", "100000", "--seed", "1", threads=False)  # no --max-seconds
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until the four ranks train, two on each node
        ranks = [line for line in _processes_of(tmp_path, but=run.pid) if "-m bakeoff.trial " in line
                 and "torch.distributed.run" not in line]
        if len(ranks) >= 4:
            break
        time.sleep(0.5)
    assert len(ranks) >= 4, ranks
    (job_id,) = _our_jobs(tmp_path)
    subprocess.run(["scancel", job_id], check=True)
    out, _ = run.communicate(timeout=150)
    assert run.returncode == 1, out  # a trial that failed: the run's exit code says so
    assert f"Slurm job {job_id} ended CANCELLED" in out
    assert _our_jobs(tmp_path) == [] and _processes_of(tmp_path) == []
    assert list((tmp_path / "s" / "tmp").glob("bakeoff-trial-*")) == []  # nothing of it on the shared storage


@pytest.mark.parametrize("framework", ["tensorflow", "jax"])
def test_tensorflow_and_jax_workers_run_two_on_each_of_two_nodes_every_rank_read(tmp_path, real_slurm, framework):
    """The same shape for TF_CONFIG workers and jax.distributed processes (torch's is above)."""
    from bakeoff.core import registry

    if not registry.installed(framework):
        pytest.skip(f"{framework} is not installed")
    _two_nodes()
    run = _bakeoff(tmp_path, "--framework", framework, "--parallelism", "multi_worker", "--workers", "4",
                   "--executor", "slurm,workers-per-node=2", "--max-steps", "3", threads=False)
    out, _ = run.communicate(timeout=600)
    assert run.returncode == 0, out
    result = _two_on_each_of_two_nodes(tmp_path)
    assert [rank["rank"] for rank in result.distributed.ranks] == [0, 1, 2, 3]
    assert _our_jobs(tmp_path) == [] and _processes_of(tmp_path) == []


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def test_a_rank_killed_on_the_second_node_fails_its_trial_at_once_naming_it_and_leaves_nothing(tmp_path, real_slurm):
    """#51: a dying step's rank was no failure; the trial trained on to its deadline."""
    from bakeoff.results.store import Store

    _two_nodes()
    run = _bakeoff(tmp_path, "--framework", "torch", "--parallelism", "multi_worker", "--workers", "4",
                   "--executor", "slurm,workers-per-node=2", "--max-steps", "100000", "--timeout", "400",
                   threads=False)
    deadline = time.monotonic() + 120
    victim = None
    while time.monotonic() < deadline and victim is None:  # rank 3: the second node's second, under its agent
        agents = {int(p.name) for p in Path("/proc").glob("[0-9]*") if _cmdline(p).count("--node-rank 3 ")
                  and str(tmp_path) in _cmdline(p) and "torch.distributed.run" in _cmdline(p)}
        victim = next((int(p.name) for p in Path("/proc").glob("[0-9]*") if "-m bakeoff.trial " in _cmdline(p)
                       and "torch.distributed.run" not in _cmdline(p) and _safe_parent(p) in agents), None)
        time.sleep(0.5)
    assert victim is not None, "rank 3 did not start"
    time.sleep(2)  # it trains
    os.kill(victim, signal.SIGKILL)
    out, _ = run.communicate(timeout=300)
    (result,) = Store(tmp_path / "s.sqlite", readonly=True).results()
    assert result.status is Status.FAILED, out  # not a timeout: the group ended when its rank died
    assert "rank 3" in result.reason and "SIGKILL" in result.reason, result.reason  # torchrun's root cause
    if result.reason.startswith("rank 3 of 4"):  # named by torchrun's report: the node it ran on, not this one's cgroup
        assert f"killed by SIGKILL on {result.execution.hosts[3]}" in result.reason, result.reason
    assert _our_jobs(tmp_path) == [] and _processes_of(tmp_path) == []
    assert list((tmp_path / "s" / "tmp").glob("bakeoff-trial-*")) == []


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _safe_parent(proc: Path) -> int:
    try:
        return _parent(int(proc.name))
    except (OSError, ValueError, IndexError):
        return 0


def test_a_trial_past_its_timeout_is_killed_on_its_node_recorded_timeout_and_leaves_no_process(tmp_path, real_slurm):
    """The trial's deadline is kept on the node (the local executor's own); Slurm's time limit, a margin later, is
    only the backstop (its TIMEOUT state is read in test_each_state_squeue_reports...)."""
    from bakeoff.results.store import Store

    run = _bakeoff(tmp_path, "--framework", "torch", "--max-steps", "100000", "--max-seconds", "300",
                   "--timeout", "15")
    out, _ = run.communicate(timeout=300)
    (result,) = Store(tmp_path / "s.sqlite", readonly=True).results()
    assert result.status is Status.TIMEOUT and "no result after 15 s; killed" in result.reason, out
    assert result.execution.executor["name"] == "slurm"
    assert _our_jobs(tmp_path) == [] and _processes_of(tmp_path) == []
