"""Launchers: how a trial's process group is planned, run, killed and merged (framework-free, but for the last test,
which runs a real 2-process PyTorch trial through a port that is taken)."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest

from bakeoff.core import registry
from bakeoff.core.result import Distributed, Setup, TrialResult
from bakeoff.core.spec import RunSpec, Status
from bakeoff.measure import environment
from bakeoff.run import launchers
from bakeoff.run.executors import local
from bakeoff.run.launchers import Member, Plan

ARGS = ["spec.json", "result.json", "", ""]


def _spec(framework: str = "torch", parallelism: str = "data_parallel", workers: int = 2, **fields) -> RunSpec:
    fields = {"max_steps": 6, "eval_every": 100, "batch_size": 32, **fields}
    return RunSpec(workload="mnist", framework=framework, parallelism=parallelism, workers=workers, **fields)


def test_single_process_gets_every_core() -> None:
    plan = launchers.plan(RunSpec(workload="mnist", framework="torch", max_steps=2), ARGS, {}, cores=8)
    (member,) = plan.members
    assert plan.launcher == "single" and member.command[1:3] == ["-m", "bakeoff.trial"]
    assert member.env["BAKEOFF_THREADS"] == "8" and plan.ranks == 1
    assert float(member.env["BAKEOFF_LAUNCHED_AT"]) <= time.time()


def test_replicas_share_the_cores_and_more_replicas_than_cores_is_a_warning() -> None:
    plan = launchers.plan(_spec(), ARGS, {}, ports=[29555], cores=2)
    (agent,) = plan.members
    assert plan.launcher == "torchrun" and plan.ranks == 2 and plan.threads == 1
    assert agent.command[1:3] == ["-m", "torch.distributed.run"]
    assert "--nproc-per-node" in agent.command and agent.command[agent.command.index("--nproc-per-node") + 1] == "2"
    assert agent.command[agent.command.index("--master-port") + 1] == "29555"
    assert plan.warnings == []
    crowded = launchers.plan(_spec(workers=4), ARGS, {}, ports=[29555], cores=2)
    assert crowded.threads == 1
    assert crowded.warnings == ["4 replicas on 2 CPU cores: replicas share cores, so throughput measures overhead "
                                "more than speed-up"]
    # TensorFlow's MirroredStrategy runs its replicas in one process, which keeps every core
    mirrored = launchers.plan(_spec("tensorflow"), ARGS, {}, cores=2)
    assert mirrored.launcher == "single" and mirrored.threads == 2


def test_multi_worker_is_one_process_per_worker() -> None:
    torch_plan = launchers.plan(_spec(parallelism="multi_worker"), ARGS, {}, ports=[29600], cores=2)
    assert [m.name for m in torch_plan.members] == ["node 0", "node 1"]
    node1 = torch_plan.members[1].command
    assert node1[node1.index("--node-rank") + 1] == "1" and node1[node1.index("--nnodes") + 1] == "2"
    tf_plan = launchers.plan(_spec("tensorflow", "multi_worker"), ARGS, {}, ports=[29601, 29602], cores=2)
    configs = [json.loads(m.env["TF_CONFIG"]) for m in tf_plan.members]
    assert configs[1] == {"cluster": {"worker": ["127.0.0.1:29601", "127.0.0.1:29602"]},
                          "task": {"type": "worker", "index": 1}}
    assert [m.env["BAKEOFF_RANK"] for m in tf_plan.members] == ["0", "1"]


def test_parameter_server_cluster_is_a_chief_workers_and_a_ps() -> None:
    plan = launchers.plan(_spec("tensorflow", "parameter_server"), ARGS, {}, ports=[1, 2, 3, 4], cores=2)
    assert [m.name for m in plan.members] == ["chief", "worker 0", "worker 1", "ps 0"]
    assert [m.writes_result for m in plan.members] == [True, False, False, False]
    cluster = json.loads(plan.members[3].env["TF_CONFIG"])
    assert cluster == {"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"],
                                   "ps": ["127.0.0.1:4"]}, "task": {"type": "ps", "index": 0}}
    from bakeoff.frameworks.tensorflow.launch import SERVER_MODULE

    assert plan.members[1].command[-2:] == ["-m", SERVER_MODULE]


def test_workers_placed_on_machines_by_an_executor_rendezvous_at_the_first() -> None:
    """An executor that places workers on machines gives their hosts; every member is started where the executor
    starts it (no ssh: bakeoff has no launcher of its own across machines)."""
    spec = _spec(parallelism="multi_worker")
    first, second = launchers.plan(spec, ARGS, {}, ports=[29700], cores=2, hosts=["10.0.0.1", "10.0.0.2"]).members
    assert first.command[0] == second.command[0] == sys.executable
    assert "--master-addr" in second.command and second.command[second.command.index("--master-addr") + 1] == \
        "10.0.0.1"
    assert [first.env["BAKEOFF_LOCAL_RANK"], second.env["BAKEOFF_LOCAL_RANK"]] == ["0", "0"]  # one per machine
    tf = launchers.plan(_spec("tensorflow", "multi_worker"), ARGS, {}, ports=[1, 2], cores=2,
                        hosts=["10.0.0.1", "10.0.0.2"])
    assert json.loads(tf.members[0].env["TF_CONFIG"])["cluster"]["worker"] == ["10.0.0.1:1", "10.0.0.2:2"]


def test_a_spec_stored_with_hosts_by_an_older_bakeoff_still_reads() -> None:
    spec = _spec(parallelism="multi_worker")
    assert "hosts" not in spec.to_dict()
    assert RunSpec.from_dict({**spec.to_dict(), "hosts": []}) == spec
    assert RunSpec.from_dict({**spec.to_dict(), "hosts": ["a", "b"]}).key() == spec.key()


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = launchers.free_ports(4)
    assert len(set(ports)) == 4
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_unsupported_strategies_start_no_process(tmp_path, monkeypatch) -> None:
    def started(*_args, **_kwargs):
        raise AssertionError("a process group was started")

    monkeypatch.setattr(launchers, "run_group", started)
    ps = local.run_one(_spec("torch", "parameter_server"), 30, tmp_path)
    assert ps.status is Status.UNSUPPORTED and "no built-in parameter-server strategy" in ps.reason
    assert registry.unsupported(_spec("torch", "data_parallel", checkpoint_every=2)).startswith("checkpoints")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone(pid: int, within_s: float = 5.0) -> bool:
    """Whether ``pid`` has exited within ``within_s`` (a SIGKILLed process takes a moment to be torn down)."""
    deadline = time.monotonic() + within_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


SLEEPER = ("import os, subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', "
           "'import time; time.sleep(120)']); open(sys.argv[1], 'w').write(f'{os.getpid()} {child.pid}'); "
           "time.sleep(120)")


def test_a_member_that_stops_kills_the_whole_group(tmp_path) -> None:
    pids = tmp_path / "pids"
    members = [Member("worker 0", [sys.executable, "-c", SLEEPER, str(pids)], dict(os.environ), True),
               Member("ps 0", [sys.executable, "-c", "import time, sys; time.sleep(1.5); sys.exit(3)"],
                      dict(os.environ), False)]
    outcome = launchers.run_group(Plan("test", members, 1, 2, 1), [tmp_path / "a.log", tmp_path / "b.log"], 60)
    assert outcome.first_failure == "ps 0" and outcome.codes["ps 0"] == 3 and not outcome.killed
    assert outcome.codes["worker 0"] is None  # killed by the group, not left to finish its 120 s sleep
    for pid in map(int, pids.read_text().split()):  # the sleeping worker and the child it started: both gone
        assert _gone(pid)
    assert outcome.peak_rss_bytes["worker 0"] > 0


def test_a_group_past_its_deadline_is_killed(tmp_path) -> None:
    pids = tmp_path / "pids"
    members = [Member("node 0", [sys.executable, "-c", SLEEPER, str(pids)], dict(os.environ), True)]
    outcome = launchers.run_group(Plan("test", members, 1, 1, 1), [tmp_path / "a.log"], 2.0)
    assert outcome.killed == "no result after 2 s; killed"
    for pid in map(int, pids.read_text().split()):
        assert _gone(pid)


LAUNCHER = ("import os, subprocess, sys, time; rank = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(120)'], start_new_session=True); "
            "open(sys.argv[1], 'w').write(f'{os.getpid()} {rank.pid}'); time.sleep(float(sys.argv[2])); sys.exit(3)")
"""A launcher that starts its rank in a session of its own, as torchrun does, then lives ``argv[2]`` seconds."""


@pytest.mark.parametrize("launcher_lives_s, ends", [(120, "deadline"), (1.5, "launcher fails")])
def test_a_rank_in_a_session_of_its_own_dies_with_its_group(tmp_path, launcher_lives_s, ends) -> None:
    """torchrun's ranks are not in its process group: a timed-out DDP trial once left them training through the
    next trial. Past the deadline, or after the launcher died and left its rank to init, the rank is killed."""
    pids = tmp_path / "pids"
    members = [Member("node 0", [sys.executable, "-c", LAUNCHER, str(pids), str(launcher_lives_s)],
                      dict(os.environ), True)]
    outcome = launchers.run_group(Plan("test", members, 1, 1, 1), [tmp_path / "a.log"], 4.0)
    if ends == "deadline":
        assert outcome.killed == "no result after 4 s; killed"
    else:
        assert outcome.first_failure == "node 0" and outcome.codes["node 0"] == 3 and not outcome.killed
    launcher, rank = map(int, pids.read_text().split())
    assert os.getsid(0) != rank  # the rank was in a session of its own, as the test means
    assert _gone(launcher) and _gone(rank)


def _rank(rank: int, digest: str, status: Status = Status.OK, reason: str = "", step: float = 0.1) -> TrialResult:
    spec = _spec()
    return TrialResult(spec=spec.to_dict(), key=spec.key(), status=status, reason=reason, import_s=1.0, build_s=0.5,
                       steady_step_s=step, step_times_s=[1.0] + [step] * 8, examples_per_step=32,
                       throughput={"examples_per_s": 32 / step}, losses=[0.5], peak_memory_bytes=(300 + rank) * 2**20,
                       setup=Setup(launch_s=0.8 + rank),
                       distributed=Distributed(strategy="DDP", replica_weights_sha256=[digest]))


def test_merge_keeps_every_rank_and_checks_the_replicas() -> None:
    spec = _spec()
    plan = launchers.plan(spec, ARGS, {}, ports=[1], cores=2)
    outcome = launchers.GroupOutcome(codes={"torchrun": 0})
    merged = launchers.merge(spec, plan, [_rank(0, "aa"), _rank(1, "aa")], outcome)
    dist = merged.distributed
    assert merged.status is Status.OK and dist.replicas_identical is True
    assert [r["rank"] for r in dist.ranks] == [0, 1]
    assert dist.startup_s == pytest.approx(1.8 + 1.5)  # the slower rank: launch 1.8 + import 1 + build 0.5
    assert dist.batch_size == {"global": 32, "per_replica": 16} and dist.synchronous is True
    differ = launchers.merge(spec, plan, [_rank(0, "aa"), _rank(1, "bb")], outcome)
    assert differ.distributed.replicas_identical is False
    assert any("different weights" in w for w in differ.distributed.warnings)
    failed = launchers.merge(spec, plan, [_rank(0, "aa"), _rank(1, "", Status.FAILED, "RuntimeError: boom")],
                             outcome)
    assert failed.status is Status.FAILED and failed.reason == "rank 1: RuntimeError: boom"


def test_a_synchronous_group_trains_at_its_slowest_ranks_pace_and_an_imbalance_is_flagged() -> None:
    spec = _spec()
    plan = launchers.plan(spec, ARGS, {}, ports=[1], cores=2)
    outcome = launchers.GroupOutcome(codes={"torchrun": 0})
    # rank 0 at 5.8 ms a step, rank 1 at 21.9 ms (a run seen on this machine): the group's pace is rank 1's
    merged = launchers.merge(spec, plan, [_rank(0, "aa", step=0.0058), _rank(1, "aa", step=0.0219)], outcome)
    dist = merged.distributed
    assert merged.steady_step_s == 0.0219 and merged.throughput["examples_per_s"] == pytest.approx(32 / 0.0219)
    assert merged.step_times_s == [1.0] + [0.0219] * 8 and dist.ranks[0]["step_times_s"][1] == 0.0058
    assert dist.throughput_rank == 1 and dist.rank_imbalance == pytest.approx(0.0219 / 0.0058 - 1)
    assert any("differ by 278% (5.8–21.9 ms): the throughput is the slowest rank's (rank 1)" in w
               for w in dist.warnings)
    even = launchers.merge(spec, plan, [_rank(0, "aa", step=0.1), _rank(1, "aa", step=0.105)], outcome)
    assert even.steady_step_s == 0.105 and not any("differ by" in w for w in even.distributed.warnings)


@pytest.mark.skipif(not registry.installed("torch"), reason="needs PyTorch")
def test_a_taken_port_is_replaced_by_another(tmp_path, monkeypatch) -> None:
    """The first port handed out is already listened on: torchrun's store cannot bind it, and the group is started
    again on a free one."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    handed: list[list[int]] = []
    real = launchers.free_ports

    def ports(count: int) -> list[int]:
        handed.append([taken.getsockname()[1]] * count if not handed else real(count))
        return handed[-1]

    monkeypatch.setattr(launchers, "free_ports", ports)
    try:
        result = local.run_one(_spec(max_steps=3), 300, tmp_path)
    finally:
        taken.close()
    assert len(handed) == 2, handed
    assert result.status is Status.OK, result.reason
    assert result.execution.port_retries == 1
    assert Path(result.execution.log).exists()


def test_an_interrupt_kills_every_member(tmp_path) -> None:
    import signal
    import threading

    from bakeoff.run import process

    files = [tmp_path / "pids0", tmp_path / "pids1"]
    members = [Member(f"worker {i}", [sys.executable, "-c", SLEEPER, str(f)], dict(os.environ), True)
               for i, f in enumerate(files)]
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a test run may inherit SIGINT ignored
    try:
        def interrupt() -> None:  # once both members and their children are up
            deadline = time.monotonic() + 30
            while not all(f.exists() for f in files) and time.monotonic() < deadline:
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)

        with process.interruptible(), pytest.raises(process.Interrupted):
            threading.Thread(target=interrupt, daemon=True).start()
            launchers.run_group(Plan("test", members, 2, 2, 1), [tmp_path / "a.log", tmp_path / "b.log"], 60)
    finally:
        signal.signal(signal.SIGINT, previous)
    for f in files:
        for pid in map(int, f.read_text().split()):
            assert _gone(pid)


def test_flags_cross_a_single_device_baseline_with_distributed_trials() -> None:
    from bakeoff.plan.suite import adhoc_suite

    suite = adhoc_suite({"workload": "mnist", "framework": ["torch"], "execution": ["eager"],
                         "parallelism": ["none", "multi_worker"], "workers": [2], "max_steps": 4})
    by_mode = {(s.parallelism.value, s.workers) for s in suite.specs}
    # without parallelism a trial has one worker; the matrix's workers go to the others
    assert by_mode == {("none", 1), ("multi_worker", 2)}


def _gpus(tmp_path: Path, count: int, visible: str | None = None) -> int:
    """The GPUs a machine described by ``count`` /dev/nvidiaN devices shows a trial, read as the runner reads them."""
    dev = tmp_path / f"dev{count}"
    dev.mkdir()
    for i in range(count):
        (dev / f"nvidia{i}").touch()
    (dev / "nvidiactl").touch()  # not a GPU
    gpus, _ = environment.cuda_devices(dev=dev, environ={} if visible is None else {"CUDA_VISIBLE_DEVICES": visible})
    return gpus


def _rank_envs(plan: Plan) -> list[dict[str, str]]:
    """Each rank's environment as its process sees it: a torchrun agent of k ranks gives them LOCAL_RANK 0..k-1
    (torchrun's own numbering, read from the agent's --nproc-per-node)."""
    envs = []
    for member in plan.members:
        command = member.command
        if "torch.distributed.run" in command:
            per_node = int(command[command.index("--nproc-per-node") + 1])
            envs += [{**member.env, "LOCAL_RANK": str(i)} for i in range(per_node)]
        else:
            envs.append(member.env)
    return envs


@pytest.mark.parametrize(("framework", "parallelism"), [("torch", "data_parallel"), ("torch", "multi_worker"),
                                                        ("jax", "multi_worker"), ("tensorflow", "multi_worker")])
def test_ranks_on_one_machine_with_8_gpus_take_distinct_gpus(tmp_path, framework, parallelism) -> None:
    from bakeoff.measure.environment import local_rank

    gpus = _gpus(tmp_path, 8)
    assert gpus == 8
    spec = _spec(framework, parallelism, workers=4)
    assert launchers.unsupported_here(spec, gpus) == ""
    plan = launchers.plan(spec, ARGS, {}, ports=[1, 2, 3, 4], cores=8)
    # the GPU each rank takes (cuda:<local rank>): one each, none shared, all on the machine
    assert sorted(local_rank(env) for env in _rank_envs(plan)) == [0, 1, 2, 3]


def test_local_ranks_count_the_workers_of_each_machine(monkeypatch) -> None:
    monkeypatch.setattr(launchers, "cuda_build", lambda framework: True)  # the CUDA builds the README names
    assert launchers.local_ranks(["a", "b", "a", "b", "a"]) == [0, 0, 1, 1, 2]
    spec = _spec(parallelism="multi_worker", workers=3, batch_size=30)
    plan = launchers.plan(spec, ARGS, {}, ports=[29700], cores=2, hosts=["a", "b", "a"])
    assert [m.env["BAKEOFF_LOCAL_RANK"] for m in plan.members] == ["0", "0", "1"]
    # three ranks on this machine: two GPUs are too few, three are enough
    assert "puts 3 ranks on this machine" in launchers.unsupported_here(spec, 2)
    assert launchers.unsupported_here(spec, 3) == ""


def test_a_trial_over_two_8_gpu_nodes_is_checked_against_each_nodes_share_not_all_its_ranks(tmp_path, monkeypatch):
    """#51: 16 workers over two nodes of 8 GPUs, 8 a node, were refused as '16 ranks on this machine'."""
    monkeypatch.setattr(launchers, "cuda_build", lambda framework: True)  # the CUDA builds the README names
    eight = _gpus(tmp_path, 8)
    spec = _spec("torch", "multi_worker", workers=16)
    assert "puts 16 ranks on this machine" in launchers.unsupported_here(spec, eight)  # all on one machine: no
    assert launchers.unsupported_here(spec, eight, here=8) == ""  # its share of one node: yes
    refused = launchers.unsupported_here(spec, eight, here=9)
    assert "puts 9 ranks on this machine" in refused and "use at most workers-per-node=8" in refused

    def started(*_args, **_kwargs):
        raise AssertionError("a process group was started")

    monkeypatch.setattr(launchers, "run_group", started)
    monkeypatch.setattr(launchers, "cuda_devices", lambda: (eight, ""))
    hosts = ["n1"] * 9 + ["n2"] * 7  # the first node's share decides here, before anything starts
    result = local.run_one(spec, 30, tmp_path, hosts=hosts)
    assert result.status is Status.UNSUPPORTED and "puts 9 ranks on this machine" in result.reason


def test_more_replicas_than_gpus_are_refused_before_any_process_starts(tmp_path, monkeypatch) -> None:
    def started(*_args, **_kwargs):
        raise AssertionError("a process group was started")

    monkeypatch.setattr(launchers, "run_group", started)
    one = _gpus(tmp_path, 1)
    monkeypatch.setattr(launchers, "cuda_devices", lambda: (one, ""))
    # a CPU build (this machine's: torch +cpu, no JAX CUDA plugin) trains on the CPU, whatever GPUs there are
    assert launchers.unsupported_here(_spec("torch", "data_parallel"), one) == ""
    monkeypatch.setattr(launchers, "cuda_build", lambda framework: True)  # the CUDA builds the README names
    result = local.run_one(_spec("torch", "data_parallel"), 30, tmp_path)
    assert result.status is Status.UNSUPPORTED
    assert result.reason == ("data_parallel over 2 replicas (DDP) puts 2 ranks on this machine, one GPU each (NCCL "
                             "refuses two ranks on one GPU), and it has 1 visible GPU: use at most 1 workers here, "
                             "or --device cpu")
    assert "2 ranks" in local.run_one(_spec("jax", "multi_worker"), 30, tmp_path).reason
    # on the CPU, or where the ranks share GPUs by design (TensorFlow's workers), nothing is refused
    assert launchers.unsupported_here(_spec("torch", "data_parallel", device="cpu"), one) == ""
    assert launchers.unsupported_here(_spec("tensorflow", "multi_worker"), one) == ""
    assert launchers.unsupported_here(_spec("torch", "data_parallel"), 0) == ""
    # CUDA_VISIBLE_DEVICES narrows what the machine has: 8 GPUs, 1 visible
    assert launchers.unsupported_here(_spec("torch", "multi_worker"), _gpus(tmp_path, 8, "3")) != ""


def test_a_framework_build_says_whether_it_can_use_a_gpu(monkeypatch) -> None:
    from bakeoff.measure import environment

    versions = {"torch": "2.13.0+cpu", "tensorflow-cpu": "2.21.0"}
    monkeypatch.setattr(environment, "package_version", versions.get)
    assert not any(environment.cuda_build(f) for f in ("torch", "jax", "tensorflow"))
    versions.update({"torch": "2.13.0+cu126", "jax-cuda12-plugin": "0.10.2", "tensorflow": "2.21.0"})
    assert all(environment.cuda_build(f) for f in ("torch", "jax", "tensorflow"))
    versions["torch"] = "2.13.0"  # PyPI's default torch wheel is a CUDA build
    assert environment.cuda_build("torch")


def test_a_mode_its_framework_cannot_run_on_a_cpu_is_refused_before_any_process_starts_where_it_would(tmp_path,
                                                                                                       monkeypatch):
    # Paddle's eager bf16: its dygraph AMP does nothing on a CPU, so its record lists the mode in cpu_missing.
    def started(*_args, **_kwargs):
        raise AssertionError("a process group was started")

    monkeypatch.setattr(launchers, "run_group", started)
    monkeypatch.setattr(launchers, "cuda_devices", lambda: (0, "no NVIDIA GPU on this machine"))
    eager_bf16 = {"execution": "eager", "precision": "bf16"}
    result = local.run_one(_spec("paddle", "none", workers=1, **eager_bf16), 30, tmp_path)
    assert result.status is Status.UNSUPPORTED
    assert result.reason.startswith("Paddle's dygraph AMP (paddle.amp.auto_cast) runs on GPU, XPU and custom devices "
                                    "only") and result.reason.endswith("(this trial would train on this machine's CPU)")
    for device, gpus, build in (("cpu", 8, True), ("auto", 0, True), ("auto", 8, False)):  # on the CPU all three
        monkeypatch.setattr(launchers, "cuda_build", lambda framework, build=build: build)
        spec = _spec("paddle", "none", workers=1, device=device, **eager_bf16)
        assert "would train on this machine's CPU" in launchers.unsupported_here(spec, gpus), (device, gpus, build)
    # on a GPU it may run; graph bf16 (to_static's AMP casts on a CPU too) and PyTorch's eager bf16 run anywhere
    monkeypatch.setattr(launchers, "cuda_build", lambda framework: True)
    assert launchers.unsupported_here(_spec("paddle", "none", workers=1, device="auto", **eager_bf16), 8) == ""
    cpu = {"device": "cpu", "precision": "bf16"}
    assert launchers.unsupported_here(_spec("paddle", "none", workers=1, execution="graph", **cpu), 0) == ""
    assert launchers.unsupported_here(_spec("torch", "none", workers=1, execution="eager", **cpu), 0) == ""
