"""Paddle data parallel, end to end: real process groups started by ``paddle.distributed.launch`` through the
runner (``bakeoff.run.executors.local.run_one``) — one launcher of 2 ranks (``data_parallel``) and one launcher per
node (``multi_worker``), gloo on CPU — a rank killed mid-training, and parameter servers refused before any process
starts.

Every trial is MNIST (tiny), global batch 16, 8 steps, dropout 0: each replica draws its own dropout masks, which no
single device draws for the same examples. Two shards summed and then all-reduced add in a different order than one
batch, so the losses are checked with the project's training-loss tolerances (tests/parity_checks.py,
``check_losses``: fp32 1e-4 relative per step; bf16 u = 2^-8 at the first step, 8u after) against one Paddle
process on the whole batch, and the fp32 multi-worker run against PyTorch's (two torchrun agents) on the same
weights and batches. Measured worst (8 steps, 2 CPUs): fp32 2.1e-7 relative (eager, graph, accumulation,
multi-worker, and Paddle's multi-worker against PyTorch's), bf16 (graph) 1.5e-4 (0.04u).

Runtime: 112 s on 2 shared cores (ten Paddle trials of 5–15 s, one PyTorch multi-worker trial, the killed group).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bakeoff.core import frameworks, registry
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import Parallelism, RunSpec, Status
from bakeoff.measure import sync as measure_sync
from bakeoff.measure.environment import usable_cores
from bakeoff.run import launchers
from bakeoff.run.executors import local
from parity_checks import check_losses

pytestmark = pytest.mark.skipif(not registry.installed("paddle"), reason="needs paddlepaddle")

TIMEOUT_S = 300
BASE = dict(workload="mnist", framework="paddle", preset="tiny", batch_size=16, max_steps=8, eval_every=1000,
            config={"dropout": "0"}, device="cpu")
DP2 = dict(parallelism="data_parallel", workers=2)


@pytest.fixture(scope="module")
def trials(tmp_path_factory):
    """Runs each spec once per module (the eager two-replica trial serves several tests)."""
    logs = tmp_path_factory.mktemp("logs")
    done: dict[RunSpec, TrialResult] = {}

    def run(**fields) -> TrialResult:
        spec = RunSpec(**{**BASE, **fields})
        if spec not in done:
            done[spec] = local.run_one(spec, TIMEOUT_S, logs)
            assert done[spec].status is Status.OK, f"{spec.label()}: {done[spec].reason}"
        return done[spec]

    return run


def assert_losses_close(got: TrialResult, want: TrialResult) -> None:
    assert len(got.losses) == len(want.losses) == BASE["max_steps"]
    assert got.spec["precision"] == want.spec["precision"]
    check_losses(np.asarray(got.losses), np.asarray(want.losses), got.spec["precision"])


def test_two_replicas_complete_identical_with_their_figures(trials):
    result = trials(**DP2)
    dist = result.distributed
    assert dist.replicas_identical is True  # gloo sums the same two numbers on both ranks: bitwise equal
    assert [r["rank"] for r in dist.ranks] == [0, 1] and all(r["status"] == "ok" for r in dist.ranks)
    assert dist.ranks[0]["final_loss"] == dist.ranks[1]["final_loss"]  # every rank reports the global loss
    assert dist.launcher == "paddle_launch" and dist.processes == 2
    assert dist.batch_size == {"global": 16, "per_replica": 8}
    assert dist.strategy == "paddle.DataParallel (gloo), 2 ranks"
    assert 0 < dist.setup_s < dist.startup_s
    assert set(dist.setup_parts_s) == {"process_group_s", "replica_s"}
    assert sum(dist.setup_parts_s.values()) == pytest.approx(dist.setup_s)
    sync = dist.sync
    assert sync["definition"] == measure_sync.DEFINITION  # the same method as the other frameworks'
    assert len(sync["samples_s"]) == measure_sync.REPEATS and sync["per_step_s"] == float(np.median(sync["samples_s"]))
    assert sync["gradient_bytes"] == 4 * result.num_params and sync["bytes_per_step"] == 4 * result.num_params + 8
    assert "in_step_missing" in sync  # inside DataParallel's reducer: not timed in the step, and said so
    assert result.environment["distributed"] == "gloo, rank 0 of 2"
    # the cores shared out among the ranks reached each through Paddle's launcher (Placement's threads)
    assert result.environment["intra_op_threads"] == dist.threads_per_process == max(1, usable_cores() // 2)
    assert result.setup.rank == 0 and result.examples_per_step == 16
    assert set(result.environment["frameworks_loaded"]) == {"paddle"}  # a launched rank loads no other framework
    # the ranks' output stays beside the trial's log; Paddle's copies of the whole environment do not
    launch = next(Path(result.execution.log).parent.glob(f"{result.key}.paddle-launch"))
    assert sorted(p.name for p in launch.glob("first-rank0/workerlog.*")) == ["workerlog.0", "workerlog.1"]
    assert not list(launch.glob("*/envlog.*")) and not list(launch.glob("*/backup_env.*"))


def test_two_replicas_train_as_one_device(trials):
    assert_losses_close(trials(**DP2), trials())


def test_accumulation_under_data_parallel(trials):
    result = trials(grad_accum=2, **DP2)
    assert result.distributed.replicas_identical is True
    assert_losses_close(result, trials(grad_accum=2))


def test_graph_mode_allreduces_once_per_step_and_trains_as_one_device(trials):
    # to_static cannot hold DataParallel's forward: the gradients are averaged by one fused all-reduce after the
    # step's last backward (distributed.DataParallel's docstring), counted and timed in the step.
    result = trials(execution="graph", grad_accum=2, **DP2)
    dist = result.distributed
    assert dist.replicas_identical is True
    assert dist.strategy == "paddle.DataParallel's all-reduce outside to_static (gloo), 2 ranks"
    assert dist.sync["rounds_per_step"] == 1  # not 2: no all-reduce on the first micro-batch
    in_step = dist.sync["in_step"]
    assert len(in_step["samples_s"]) == BASE["max_steps"] and all(t > 0 for t in in_step["samples_s"])
    assert dist.ranks[0]["sync_in_step_s"] == in_step["per_step_s"]
    assert_losses_close(result, trials(execution="graph", grad_accum=2))


def test_bf16_graph_under_data_parallel(trials):
    result = trials(execution="graph", precision="bf16", **DP2)
    assert result.distributed.replicas_identical is True
    assert_losses_close(result, trials(execution="graph", precision="bf16"))
    fp32 = np.asarray(trials(**DP2).losses)
    assert np.abs(np.asarray(result.losses) - fp32).max() > 1e-5  # it really ran in bf16


def test_multi_worker_two_launchers_trains_as_one_device_and_as_pytorch(trials):
    result = trials(parallelism="multi_worker", workers=2)
    dist = result.distributed
    assert dist.launcher == "paddle_launch_nodes" and set(dist.member_peak_rss_bytes) == {"node 0", "node 1"}
    assert dist.replicas_identical is True and [r["rank"] for r in dist.ranks] == [0, 1]
    assert_losses_close(result, trials())
    if not registry.installed("torch"):
        pytest.skip("PyTorch not installed: the cross-framework half needs it")
    torch_run = trials(framework="torch", parallelism="multi_worker", workers=2)
    check_losses(np.asarray(result.losses), np.asarray(torch_run.losses), "fp32")


def test_parameter_server_is_unsupported_before_any_process_starts(tmp_path, monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", started)  # any process start, by any launcher, fails the test
    spec = RunSpec(**{**BASE, "parallelism": "parameter_server", "workers": 2})
    result = local.run_one(spec, TIMEOUT_S, tmp_path)
    said = frameworks.get("paddle").missing_strategies[Parallelism.PARAMETER_SERVER]
    assert result.status is Status.UNSUPPORTED and said in result.reason
    assert not list(tmp_path.iterdir())  # no log either


# What Paddle 3.3.1's launcher printed when rank 1 of a 2-process launch exited with code 3 (run by hand).
LAUNCHER_SAID = """LAUNCH INFO 2026-12-07 04:34:06,482 Pod failed
LAUNCH ERROR 2026-12-07 04:34:06,482 Container failed !!!
Container rank 1 status failed cmd ['/venv/bin/python', 't.py', 'fail'] code 3 log /tmp/x/first-rank0/workerlog.1
LAUNCH INFO 2026-12-07 04:34:06,482 ------------------------- ERROR LOG DETAIL -------------------------
init 0.34627223014831543 rank 1 world 2
LAUNCH INFO 2026-12-07 04:34:06,482 Exit code 3
"""


def test_root_cause_from_the_launchers_own_words():
    from bakeoff.frameworks.paddle.launch import FIRST_FAILURE_SAYS, paddle_root_cause

    assert paddle_root_cause(LAUNCHER_SAID) == (1, 3)
    # one launcher per node: its one rank is container 0 of the launcher whose first rank is 3
    assert paddle_root_cause(LAUNCHER_SAID.replace("rank 1 status", "rank 0 status")
                             .replace("first-rank0", "first-rank3")) == (3, 3)
    # the failed rank's own account of the first failure comes first: the launcher names the first in its list
    said = FIRST_FAILURE_SAYS.format(rank=1, code=-9)
    assert paddle_root_cause(LAUNCHER_SAID.replace("init 0.34", said + "\ninit 0.34")) == (1, -9)
    assert paddle_root_cause("Traceback ...\n" + said + "\nExit code -6") == (1, -9)
    assert paddle_root_cause("LAUNCH INFO Pod completed\nLAUNCH INFO Exit code 0") is None


def test_launch_plans_name_paddles_launcher_and_one_log_folder_each(tmp_path):
    request = str(tmp_path / "abc.request.json")
    single = launchers.plan(RunSpec(**{**BASE, **DP2}), [request], {"CUDA_VISIBLE_DEVICES": ""}, cores=2)
    (member,) = single.members
    assert member.command[1:3] == ["-m", "paddle.distributed.launch"] and single.ranks == 2
    assert member.command[member.command.index("--nproc_per_node") + 1] == "2" and "--master" not in member.command
    assert member.command[-3:] == ["-m", "bakeoff.frameworks.paddle.launched_rank", request]
    # the launcher cannot run with CUDA_VISIBLE_DEVICES="" (it counts one device, named ''): the ranks get it back
    assert "CUDA_VISIBLE_DEVICES" not in member.env
    assert member.env["CUDA_VISIBLE_DEVICES_OF_PADDLE_RANKS"] == ""
    nodes = launchers.plan(RunSpec(**{**BASE, "parallelism": "multi_worker", "workers": 2}), [request], {},
                           ports=[4321], cores=2)
    folders = [m.command[m.command.index("--log_dir") + 1] for m in nodes.members]
    assert folders == [str(tmp_path / "abc.paddle-launch" / f"first-rank{i}") for i in (0, 1)]
    for i, m in enumerate(nodes.members):
        assert m.command[m.command.index("--rank") + 1] == str(i)
        assert m.command[m.command.index("--master") + 1] == "127.0.0.1:4321"
        assert m.env["BAKEOFF_LOCAL_RANK"] == str(i)  # the machine-wide local rank: Paddle says 0 to each
    # the first node's launcher serves the rendezvous: a node checks its port is free before starting it
    launcher = launchers.LAUNCHERS["paddle_launch_nodes"]
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert launcher.served_port({**nodes.members[0].env, "MASTER_PORT_OF_PADDLE_LAUNCH": str(port)}) == port
    assert launcher.served_port(nodes.members[1].env) is None  # the other nodes serve nothing of their own


def test_a_rank_takes_paddles_rank_in_bakeoffs_terms():
    from bakeoff.frameworks.paddle.launched_rank import place

    env = {"PADDLE_TRAINER_ID": "3", "PADDLE_LOCAL_RANK": "0", "BAKEOFF_LOCAL_RANK": "1", "FLAGS_selected_gpus": "0",
           "CUDA_VISIBLE_DEVICES_OF_PADDLE_RANKS": ""}
    assert place(env) == 3
    assert env["BAKEOFF_RANK"] == "3" and env["BAKEOFF_LOCAL_RANK"] == "1" and env["FLAGS_selected_gpus"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "" and "CUDA_VISIBLE_DEVICES_OF_PADDLE_RANKS" not in env


def _rank_process(rank: int, mentions: str) -> int | None:
    """The live trial process of Paddle's rank ``rank`` (``PADDLE_TRAINER_ID``; the child of its ``launched_rank``)
    whose command line mentions ``mentions``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
            if (b"bakeoff.trial" in cmdline and f"PADDLE_TRAINER_ID={rank}".encode()
                    in environ and any(mentions.encode() in arg for arg in cmdline)):
                return int(entry.name)
    return None


def _mentioning(text: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if text.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
    return pids


def test_rank_killed_mid_training_fails_the_trial_and_ends_the_group(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    spec = RunSpec(**{**BASE, **DP2, "max_steps": 100000})  # far more steps than run before the kill
    logs = tmp_path / "logs"
    killed: dict[str, object] = {}

    def kill_rank_1() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            pid = _rank_process(1, str(logs))
            if pid is not None:
                time.sleep(3)  # into training, most likely (set-up takes ~2 s); killed in set-up, it fails alike
                os.kill(pid, signal.SIGKILL)
                killed.update(pid=pid)
                return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_rank_1, daemon=True)
    killer.start()
    try:
        result = local.run_one(spec, 150, logs)
        killer.join(timeout=5)
        assert killed, "rank 1 was never found training"
        assert result.status is Status.FAILED
        assert result.reason.startswith("rank 1 of 2 (paddle.distributed.launch's first observed failure) killed by "
                                        "SIGKILL"), result.reason
        deadline = time.monotonic() + 5
        while _mentioning(str(logs)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _mentioning(str(logs)) == [], "processes of the killed trial's group remain"
    finally:
        for pid in _mentioning(str(logs)):  # whatever a failing test left behind
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
