"""The Ray executor (:mod:`bakeoff.run.executors.ray_executor`) on a real Ray cluster: a head and a second node
process, both on loopback, started here (``ray start``) and stopped here (by pid, scoped to this module's folder:
nobody else's Ray is touched).

Through the real CLI (``bakeoff run --executor ray=ADDRESS``): a small suite fanned out over both nodes, every
result stored once by the driver with its executor record and host, then resumed (nothing runs again); a trial
whose Ray worker is killed (``kill -9``) recorded failed with Ray's reason, and no process of it left; Ctrl-C
(SIGTERM) of the run while two trials train: exit 130 (143), no trial process left, nothing stored; the run killed
outright (``kill -9``): no trial process left. Plus fast checks of what a trial asks the cluster for, of a missing
Ray and of an address where nothing answers.

A ``multi_worker`` x4 trial two workers on each node, and one interrupted, leaving nothing on either node.

Cost, measured on the team's 2-core machine with other work beside it: about 50 s of wall time and 47 s of CPU,
every process of the tree counted (Ray's daemons and workers, the trials; sampled every 0.2 s, since the raylet
reaps its workers without accounting). The cluster starts in about 8 s; the suite's 4 trials are most of the rest
(that was before the multi-node tests; with them, two workers a node since #51, the file took 122 s of wall time).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bakeoff.core import registry
from bakeoff.core.spec import RunSpec, SpecError
from bakeoff.run.executors.executor import TrialJob, parse_options

RAY = shutil.which("ray", path=str(Path(sys.executable).parent))
CLUSTER = pytest.mark.skipif(RAY is None or not registry.installed("torch") or not registry.installed("jax"),
                             reason="needs Ray (pip install 'bakeoff[ray]'), torch and jax")


# --- fast: what a trial asks for, a missing Ray ------------------------------------------------------------------

def job(**fields) -> TrialJob:
    spec = RunSpec(**{"workload": "mnist", "framework": "torch", "max_steps": 2, **fields})
    return TrialJob(spec, 1, 60, Path("logs"))


def test_a_trial_asks_for_its_threads_or_a_whole_node_and_gpus_only_where_there_are_any():
    pytest.importorskip("ray")
    from bakeoff.run.executors.ray_executor import Cluster

    cpus_only = Cluster(address="a", each=((8, 0), (4, 0)))
    assert cpus_only.ask(job(threads=2)) == ({"num_cpus": 2.0, "num_gpus": 0.0}, 1, None)
    assert cpus_only.ask(job()) == ({"num_cpus": 8.0, "num_gpus": 0.0}, 1, None)  # all cores: the largest node, alone
    assert cpus_only.ask(job(threads=3, parallelism="data_parallel", workers=2, device="cpu"))[0]["num_cpus"] == 6
    _, _, refused = cpus_only.ask(job(device="cuda"))
    assert "needs 8 CPUs and 1 GPUs on one node" in refused and "most GPUs on one node are 0" in refused
    with_gpus = Cluster(address="a", each=((16, 2),))
    assert with_gpus.ask(job(threads=4)) == ({"num_cpus": 4.0, "num_gpus": 1.0}, 1, None)  # --device auto
    assert with_gpus.ask(job(threads=4, device="cpu")) == ({"num_cpus": 4.0, "num_gpus": 0.0}, 1, None)


def test_a_multi_worker_trial_of_more_than_k_workers_asks_for_one_bundle_a_node_and_that_many_nodes():
    pytest.importorskip("ray")
    from bakeoff.run.executors.ray_executor import Cluster
    from bakeoff.run.executors.ray_node import Group

    cluster = Cluster(address="a", each=((4, 1), (4, 1), (4, 0)))
    four = job(parallelism="multi_worker", workers=4, threads=1, device="cpu")
    assert cluster.ask(four, 2) == ({"num_cpus": 2.0, "num_gpus": 0.0}, 2, None)  # 2 workers x 1 thread a node
    assert cluster.ask(four, None)[1] == 1 and cluster.ask(four, 4)[1] == 1  # K not given, or K >= workers
    assert cluster.ask(job(parallelism="data_parallel", workers=4, threads=1), 1)[1] == 1  # one process: one node
    three = {"parallelism": "multi_worker", "workers": 3, "batch_size": 30}
    whole = cluster.ask(job(**three, device="cpu"), 1)  # no --threads: whole nodes
    assert whole == ({"num_cpus": 4.0, "num_gpus": 0.0}, 3, None)
    _, nodes, refused = cluster.ask(job(**three, threads=1), 1)  # --device auto on a cluster with GPUs: 1 a node
    assert nodes == 3 and "spans 3 nodes (workers-per-node=1), each with 1 CPUs and 1 GPUs, and 2 of its 3" in refused
    assert Group("g", 2, 1, {"num_cpus": 2.0, "num_gpus": 0.0}).bundles() == [{"CPU": 2.0}, {"CPU": 2.0}]


def test_a_member_on_another_node_starts_through_a_proxy_in_its_bundle_and_the_rest_as_they_are():
    pytest.importorskip("ray")
    from bakeoff.run.executors.ray_node import Group, _proxied, _Proxy
    from bakeoff.run.launchers import Member

    proxy = _Proxy("10.0.0.1:6379", Group("g1", 2, 1, {"num_cpus": 1.0, "num_gpus": 0.0}),
                   {"10.0.0.1": 0, "10.0.0.2": 1})
    here = Member("node 0", ["torchrun", "a"], {}, True, "10.0.0.1")
    assert _proxied("10.0.0.1", proxy, here) is here
    there = _proxied("10.0.0.1", proxy, Member("node 1", ["torchrun", "b"], {"X": "1"}, True, "10.0.0.2"))
    assert there.name == "node 1 on 10.0.0.2" and there.env == {"X": "1"} and there.writes_result
    assert there.command[1:3] == ["-m", "bakeoff.run.executors.ray_executor"]
    assert there.command[3:] == ["member", "--address", "10.0.0.1:6379", "--group", "g1", "--bundle", "1",
                                 "--cpus", "1.0", "--gpus", "0.0", "--", "torchrun", "b"]


@pytest.mark.parametrize(("given", "parsed"), [("", ("", None)), ("auto", ("auto", None)),
                                               ("10.0.0.1:6379,workers-per-node=2", ("10.0.0.1:6379", 2)),
                                               ("workers-per-node=1", ("", 1))])
def test_the_ray_argument_is_an_address_and_workers_per_node(given, parsed):
    from bakeoff.run.executors.ray_executor import ADDRESSES

    assert parse_options("ray", given, ADDRESSES) == parsed


@pytest.mark.parametrize("given", ["auto,workers-per-node=0", "a,b", "auto,nodes=2"])
def test_a_ray_argument_not_understood_exits_2_listing_the_accepted_forms(given):
    from bakeoff.run.executors.ray_executor import ADDRESSES

    with pytest.raises(SpecError, match=r"is not understood; accepted: ray .* ,workers-per-node=K"):
        parse_options("ray", given, ADDRESSES)


def test_without_ray_the_executor_names_the_extra_to_install(monkeypatch):
    from bakeoff.run.executors import parse

    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` sees when Ray is not installed
    with pytest.raises(SpecError, match=r"--executor ray: Ray is not installed .*pip install 'bakeoff\[ray\]'"):
        parse("ray=auto")


def test_options_may_follow_the_executors_name_after_a_comma_as_the_readme_writes_them():
    pytest.importorskip("ray")
    from bakeoff.run.executors import parse

    executor = parse("ray,workers-per-node=2")  # was "unknown executor" (#51); ray= and a comma: the same
    assert (executor.address, executor.workers_per_node) == ("", 2)
    assert (parse("ray=,workers-per-node=2").workers_per_node, parse("ray").workers_per_node) == (2, None)


def test_a_bad_executor_argument_lists_ray_among_the_accepted():
    from bakeoff.run.executors import parse

    accepted = r"unknown executor; accepted: local: .*; ray\[=ADDRESS\]\[,workers-per-node=K\]: each trial a Ray"
    with pytest.raises(SpecError, match=accepted):
        parse("dask")


def test_an_address_where_nothing_answers_is_refused_at_once_with_exit_2(tmp_path):
    pytest.importorskip("ray")
    port = free_port()  # closed again: nothing listens there
    r = subprocess.run([sys.executable, "-m", "bakeoff.cli", "run", "--workload", "mnist", "--framework", "torch",
                        "--max-steps", "2", "--executor", f"ray=127.0.0.1:{port}", "--store", "r.sqlite"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert f"--executor ray=127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}" in r.stderr
    assert "accepted: ray (a Ray instance on this machine for the run), ray=auto" in r.stderr
    assert not (tmp_path / "r.sqlite").exists()


# --- the cluster -------------------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_mentioning(text: str) -> dict[int, str]:
    """Live processes whose command line contains ``text`` (zombies have none)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if text in cmdline:
                    found[int(entry.name)] = cmdline
    return found


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def wait_for(condition: Callable[[], object], timeout: float = 240, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Ray:
    """The test cluster: its address, the environment its nodes (and drivers) share, and the folder every trial
    makes its temporary folder in (the worker's ``TMPDIR``), which names the processes of this module's trials."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.trials = root / "t"  # TMPDIR of the nodes' workers: the trials' spec files are under it
        self.trials.mkdir()
        self.env = {**os.environ, "RAY_AUTH_MODE": "disabled", "TMPDIR": str(self.trials)}
        self.address = f"127.0.0.1:{free_port()}"

    def start(self, *args: str, ip: str = "127.0.0.1") -> None:
        subprocess.run([RAY, "start", "--num-cpus=1", f"--node-ip-address={ip}", "--disable-usage-stats",
                        f"--dashboard-agent-listen-port={free_port()}", f"--temp-dir={self.root / 'r'}", *args],
                       env=self.env, cwd=self.root, check=True, capture_output=True, text=True, timeout=180)

    def processes(self) -> set[int]:
        """Every live process of this cluster: those whose command line names its folder or its port, and their
        descendants (Ray renames its workers and agents, ``ray::IDLE``, so their command lines do not say)."""
        table: dict[int, tuple[int, str]] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError):
                    ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
                    table[int(entry.name)] = ppid, (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                        errors="replace")
        port = f":{self.address.rpartition(':')[2]} "
        found = {pid for pid, (_, cmd) in table.items() if str(self.root) in cmd or ("ray" in cmd and port in cmd)}
        grown = True
        while grown:
            children = {pid for pid, (ppid, _) in table.items() if ppid in found} - found
            found |= children
            grown = bool(children)
        return found - {os.getpid()}

    def stop(self) -> None:
        """Kill every process of this cluster, and only those."""
        for _ in range(3):
            for pid in self.processes():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)

    def trial_processes(self) -> dict[int, str]:
        """The live processes of this module's trials: bakeoff's, started by the nodes' workers (whose ``TMPDIR``
        is this module's folder; a trial's command line names only its request file, under the test's store)."""
        marker = f"TMPDIR={self.trials}".encode()
        found = {}
        for pid, command in processes_mentioning("-m bakeoff.trial").items():
            with contextlib.suppress(OSError):
                if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    found[pid] = command
        return found

    def bakeoff(self, *args: str, cwd: Path, options: str = "", **popen) -> subprocess.Popen:
        command = [sys.executable, "-m", "bakeoff.cli", "run", "--executor", f"ray={self.address}{options}",
                   "--concurrent",
                   "--no-report", *args]
        # SIGINT as a terminal gives it: a test run started in the background of a non-interactive shell inherits
        # it ignored (as the fresh-clone check did), and a run that keeps an inherited SIG_IGN cannot be Ctrl-C'd.
        return subprocess.Popen(command, cwd=cwd, env={**self.env, "TMPDIR": tempfile.gettempdir()},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **popen)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Ray]:
    root = Path(tempfile.mkdtemp(prefix="bkray-", dir="/tmp"))  # short: Ray's socket paths live under it
    cluster = Ray(root)
    try:
        port = cluster.address.rpartition(":")[2]
        cluster.start("--head", f"--port={port}", "--include-dashboard=false",
                      f"--ray-client-server-port={free_port()}")
        cluster.start(f"--address={cluster.address}", ip="127.0.0.2")  # loopback too: a machine of its own
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def stored(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    query = "SELECT key, label, seed, status, reason, result FROM trials ORDER BY label, seed"
    return sqlite3.connect(db).execute(query).fetchall()


SUITE = ("--workload", "mnist", "--framework", "torch,jax", "--execution", "eager", "--max-steps", "3",
         "--repeats", "2", "--threads", "1")


@CLUSTER
def test_a_suite_fans_out_over_the_cluster_each_result_stored_once_then_resumed(ray_cluster, tmp_path):
    run = ray_cluster.bakeoff(*SUITE, "--store", "r.sqlite", cwd=tmp_path)
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, out + err
    assert "executor: ray at 127.0.0.1" in out and "2 nodes, 2 CPUs" in out
    rows = stored(tmp_path / "r.sqlite")
    assert [(label, seed, status) for _, label, seed, status, _, _ in rows] == [
        ("jax/eager", 0, "ok"), ("jax/eager", 1, "ok"), ("torch/eager", 0, "ok"), ("torch/eager", 1, "ok")]
    assert len({key for key, *_ in rows}) == 4  # stored once each, by the driver
    nodes = set()
    for *_, text in rows:
        result = json.loads(text)
        record = result["execution"]["executor"]
        assert record["name"] == "ray" and record["address"] == ray_cluster.address
        assert record["resources"] == {"num_cpus": 1.0, "num_gpus": 0.0}
        assert record["main_thread"] is True  # the tether holds: its members die with the worker, not a thread
        assert record["nice"] == 0 or os.geteuid() != 0  # Ray's niceness 15 undone where allowed (root here)
        assert record["submitted_at"] <= record["started_at"] and record["scheduling_s"] >= 0
        assert record["host"] == result["environment"]["host"]
        assert Path(tmp_path, result["execution"]["log"]).is_file()  # in the run's folder, not the worker's
        nodes.add(record["node"])
    assert len(nodes) == 2  # both nodes ran trials (one CPU each: two trials at once need both)
    again = ray_cluster.bakeoff(*SUITE, "--store", "r.sqlite", cwd=tmp_path)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, out + err
    assert "ran 0 trials, skipped 4 already in the store" in out
    assert stored(tmp_path / "r.sqlite") == rows


LONG = ("--workload", "mnist", "--framework", "torch", "--execution", "eager", "--max-seconds", "300",
        "--stop-at-target", "--threads", "1", "--timeout", "400")


@CLUSTER
def test_a_trial_whose_worker_is_killed_is_recorded_failed_and_leaves_no_process(ray_cluster, tmp_path):
    run = ray_cluster.bakeoff(*LONG, "--no-stop-at-target", "--store", "r.sqlite", cwd=tmp_path)
    try:
        [trial] = wait_for(ray_cluster.trial_processes, what="the trial to start")
        worker = parent(trial)  # the trial process was started (tethered) by the task's Ray worker
        assert Path(f"/proc/{worker}/cmdline").read_bytes().startswith(b"ray::_trial")  # Ray names it by its task
        os.kill(worker, signal.SIGKILL)
        out, err = run.communicate(timeout=300)
    finally:
        run.kill()
    [(_, label, _, status, reason, text)] = stored(tmp_path / "r.sqlite")
    assert (label, status) == ("torch/eager", "failed")
    assert reason.startswith("Ray: WorkerCrashedError: The worker died unexpectedly while executing this task")
    assert json.loads(text)["execution"]["executor"]["worker_pid"] == worker
    wait_for(lambda: not ray_cluster.trial_processes(), timeout=30, what="the trial's processes to end")
    assert run.returncode == 1, out + err


@CLUSTER
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_cancels_the_running_trials_leaves_no_process_and_stores_nothing(ray_cluster, tmp_path, sig, code):
    """Ray turns a signal that interrupts its calls into a bare KeyboardInterrupt: SIGTERM's 143 says it did not."""
    run = ray_cluster.bakeoff(*LONG, "--no-stop-at-target", "--repeats", "2", "--store", "r.sqlite", cwd=tmp_path)
    try:
        trials = wait_for(lambda: len(ray_cluster.trial_processes()) == 2 and ray_cluster.trial_processes(),
                          what="two trials running at once")
        os.kill(run.pid, sig)
        out, err = run.communicate(timeout=120)
    finally:
        run.kill()
    assert run.returncode == code, out + err
    trial = r"mnist/tiny torch/eager seed [01]"
    said = rf"interrupted by {sig.name}; stopped 2 trials \({trial}; {trial}\)"
    assert re.search(said, " ".join(err.split())), err
    assert not ray_cluster.trial_processes(), trials
    assert stored(tmp_path / "r.sqlite") == []


@CLUSTER
def test_a_run_killed_outright_leaves_no_trial_process_on_the_cluster(ray_cluster, tmp_path):
    """kill -9 of the submitting run: Ray ends its job's workers, and each trial dies with its worker."""
    run = ray_cluster.bakeoff(*LONG, "--no-stop-at-target", "--store", "r.sqlite", cwd=tmp_path)
    try:
        wait_for(ray_cluster.trial_processes, what="the trial to start")
        os.kill(run.pid, signal.SIGKILL)
        run.communicate(timeout=60)
    finally:
        run.kill()
    wait_for(lambda: not ray_cluster.trial_processes(), timeout=60, what="the trial's processes to end")
    assert stored(tmp_path / "r.sqlite") == []


MULTI = ("--workload", "mnist", "--framework", "torch", "--execution", "eager", "--parallelism", "multi_worker",
         "--workers", "4")  # two on each node of one CPU (no --threads: each node's, whole, shared by its two)


def member_log(folder: Path) -> Path | None:
    """The log of the trial's unit on the other node (its proxy's: ``<key>.host1.log``)."""
    return next(iter(folder.rglob("*.host1.log")), None)


@CLUSTER
def test_a_multi_worker_trial_spans_both_nodes_two_workers_on_each_through_a_placement_group(ray_cluster, tmp_path):
    """workers-per-node=2: two workers on each node, the second node's two started there by one proxy, as one task
    in the trial's bundle (#51: one task per worker asked for the bundle twice and never started)."""
    run = ray_cluster.bakeoff(*MULTI, "--max-steps", "3", "--store", str(tmp_path / "r.sqlite"),  # paths name it
                              options=",workers-per-node=2", cwd=tmp_path)
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, out + err
    [(_, label, _, status, reason, text)] = stored(tmp_path / "r.sqlite")
    assert (label, status) == ("torch/eager/multi_workerx4", "ok"), reason
    result = json.loads(text)
    execution = result["execution"]
    assert len(result["distributed"]["ranks"]) == 4  # every rank's result read
    # Two workers on each node, whichever holds the first bundle (the head's address is this machine's, not loopback)
    first, second = execution["hosts"][0], execution["hosts"][2]
    assert execution["hosts"] == [first, first, second, second] and "127.0.0.2" in (first, second) and first != second
    assert len(set(execution["nodes"])) == 2 and execution["executor"]["node"] == execution["nodes"][0]
    assert execution["executor"]["resources"] == {"num_cpus": 1.0, "num_gpus": 0.0}  # each bundle: its node's one CPU
    # the ranks' network: met at the first node; each node's interface the one its route to the other leaves from
    assert execution["network"]["rendezvous"] == first
    assert [n["host"] for n in execution["network"]["nodes"]] == [first, second]
    assert {n["how"] for n in execution["network"]["nodes"]} == {f"the route to {second}", f"the route to {first}"}
    log = member_log(tmp_path)
    assert log is not None and f"on Ray node {execution['nodes'][1]} (" in log.read_text()
    wait_for(lambda: not processes_mentioning(str(tmp_path)), timeout=30, what="the trial's processes to end")


@CLUSTER
def test_ctrl_c_of_a_multi_node_trial_leaves_no_rank_on_either_node(ray_cluster, tmp_path):
    """The run's Ctrl-C cancels the trial's task: its proxy dies with its worker, Ray then ends the proxy's task on
    the second node, and the member there dies with that task's worker."""
    run = ray_cluster.bakeoff(*MULTI, "--max-steps", "100000", "--no-stop-at-target", "--timeout", "400",
                              "--store", str(tmp_path / "r.sqlite"), options=",workers-per-node=2", cwd=tmp_path)
    try:
        wait_for(lambda: (log := member_log(tmp_path)) is not None and "on Ray node" in log.read_text(),
                 what="the member on the second node to start")
        there = int(re.search(r", worker (\d+)", member_log(tmp_path).read_text())[1])
        wait_for(lambda: [p for p in processes_mentioning(str(tmp_path)) if parent(p) == there],
                 what="the second node's worker to run its unit")  # which starts its two torchrun agents
        wait_for(lambda: len(processes_mentioning(str(tmp_path))) >= 11,
                 what="4 agents, 4 ranks, 2 units and the proxy")
        time.sleep(3)  # the ranks train
        os.kill(run.pid, signal.SIGINT)
        out, err = run.communicate(timeout=120)
    finally:
        run.kill()
    assert run.returncode == 130, out + err
    wait_for(lambda: not processes_mentioning(str(tmp_path)), timeout=60, what="every rank on both nodes to end")
    assert stored(tmp_path / "r.sqlite") == []
    assert list((tmp_path / "r" / "tmp").glob("bakeoff-trial-*")) == []  # its folder on the shared storage too
