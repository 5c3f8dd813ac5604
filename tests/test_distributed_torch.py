"""PyTorch DistributedDataParallel trials, end to end: real process groups started by torchrun through the runner.

Every trial is the tiny text classifier (MNIST under torch.compile), global batch 16, 12 steps, on gloo (CPU).
Exactness against one device needs dropout 0: each replica draws its own dropout masks, which no single device
draws for the same examples.

Tolerances are the project's training-loss ones (tests/parity_checks.py, ``check_losses``): fp32 losses within 1e-4
relative per step of one device's; bf16 within u = 2^-8 at the first step and 8u after. Two shards summed and then
all-reduced add in a different order than one batch, so the first loss already differs in its last bits, and 12
Adam steps carry that rounding on. Measured worst: fp32 3.5e-6 (with accumulation; 1.1e-7 between compiled and
eager under DDP), bf16 1.3e-3 (0.33u): autocast's bf16 roundings are not all the same on a shard as in the batch.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bakeoff.core import registry
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec, Status
from bakeoff.measure import sync as measure_sync
from bakeoff.measure.environment import usable_cores
from bakeoff.run.executors import local
from parity_checks import check_losses

pytestmark = pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")

TIMEOUT_S = 300
BASE = dict(workload="text_classifier", framework="torch", preset="tiny", batch_size=16, max_steps=12,
            eval_every=1000, config={"dropout": "0"})
DDP2 = dict(parallelism="data_parallel", workers=2)


@pytest.fixture(scope="module")
def trials(tmp_path_factory):
    """Runs each spec once per module (the eager two-replica trial serves three tests)."""
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
    result = trials(**DDP2)
    dist = result.distributed
    assert dist.replicas_identical is True  # gloo sums the same two numbers on both ranks: bitwise equal
    assert [r["rank"] for r in dist.ranks] == [0, 1]
    assert all(r["status"] == "ok" for r in dist.ranks)
    assert dist.ranks[0]["final_loss"] == dist.ranks[1]["final_loss"]  # every rank reports the global loss
    assert dist.launcher == "torchrun" and dist.batch_size == {"global": 16, "per_replica": 8}
    cores = usable_cores()  # a pytest-xdist worker has its share of the machine's cores
    # Ranks more than 10% apart are warned of too: timing, which a test does not assert (on 2 busy cores they were
    # 14% apart once); the imbalance rule itself is tested on given step times in test_launchers.
    timing = "ranks' steady steps differ by"
    assert [w for w in dist.warnings if not w.startswith(timing)] == ([] if cores >= 2 else [  # 2 cores, 1 thread each
        f"2 replicas on {cores} CPU cores: replicas share cores, so throughput measures overhead more than speed-up"])
    assert dist.strategy.startswith("DistributedDataParallel (gloo)")
    assert 0 < dist.setup_s < dist.startup_s
    parts = dist.setup_parts_s  # joining the process group, then wrapping the module in DDP
    assert set(parts) == {"process_group_s", "ddp_wrap_s"} and sum(parts.values()) == pytest.approx(dist.setup_s)
    sync = dist.sync
    assert len(sync["samples_s"]) == 20 and sync["per_step_s"] == float(np.median(sync["samples_s"]))
    assert sync["per_step_s"] > 0 and all(t > 0 for t in sync["samples_s"])  # its share of the step: a bench figure
    # One round of DDP's buckets per step; the buffers hold every gradient (fp32) once.
    assert sync["rounds_per_step"] == 1 and sync["allreduces_per_step"] == sync["buckets"]
    assert sync["gradient_bytes"] == 4 * result.num_params and sync["bytes_per_step"] == 4 * result.num_params + 8
    assert sync["definition"] == measure_sync.DEFINITION  # the same method as TensorFlow's and JAX's
    # The same synchronisation timed in the training step: one figure per optimizer step (the gradients' wait after
    # the backward's compute, and the loss totals' all-reduce), the median over the steady ones
    in_step = sync["in_step"]
    steady = in_step["samples_s"][1 + RunSpec(**BASE).warmup_steps:]
    assert len(in_step["samples_s"]) == BASE["max_steps"] and in_step["steps"] == len(steady)
    assert in_step["per_step_s"] == pytest.approx(float(np.median(steady))) and all(t > 0 for t in in_step["samples_s"])
    assert in_step["gradients_exposed_s"] > 0 and in_step["loss_totals_s"] > 0
    assert dist.ranks[0]["sync_in_step_s"] == in_step["per_step_s"] and dist.ranks[1]["sync_in_step_s"] > 0
    assert result.environment["distributed"] == "gloo, rank 0 of 2"
    assert result.examples_per_step == 16


def test_two_replicas_train_as_one_device(trials):
    assert_losses_close(trials(**DDP2), trials())


def test_accumulation_allreduces_once_per_step(trials):
    result = trials(grad_accum=2, **DDP2)
    assert_losses_close(result, trials(grad_accum=2))
    sync = result.distributed.sync
    # Without no_sync on the first micro-batch, this would be 2 rounds (and 2 all-reduces) per step.
    assert sync["allreduces_per_step"] == 1 and sync["rounds_per_step"] == 1 and sync["buckets"] == 1
    assert result.distributed.replicas_identical is True
    # Timed in the step once per optimizer step (the synchronising micro-batch), not per micro-batch
    assert len(sync["in_step"]["samples_s"]) == BASE["max_steps"]


def test_bf16_autocast_under_ddp(trials):
    result = trials(precision="bf16", **DDP2)
    assert result.environment["mixed_precision"] == "torch.autocast(torch.bfloat16)"
    assert result.distributed.replicas_identical is True
    assert_losses_close(result, trials(precision="bf16"))
    fp32 = np.asarray(trials(**DDP2).losses)
    assert np.abs(np.asarray(result.losses) - fp32).max() > 1e-5  # it really ran in bf16


def test_multi_worker_two_torchrun_agents(trials):
    result = trials(parallelism="multi_worker", workers=2)
    dist = result.distributed
    assert dist.launcher == "torchrun_nodes" and set(dist.member_peak_rss_bytes) == {"node 0", "node 1"}
    assert dist.replicas_identical is True
    assert_losses_close(result, trials())


def test_compiled_under_ddp_matches_eager(trials):
    # On MNIST: two ranks compiling share one core here, and its step compiles in about half the text classifier's
    # time. Both models fit DDP's first bucket, so what torch.compile meets under DDP is the same: one bucket's
    # all-reduce per step, through the compiled backward.
    mnist = dict(workload="mnist", **DDP2)
    result = trials(execution="graph", **mnist)
    assert result.training.graph_builds > 0 and result.distributed.replicas_identical is True
    assert result.distributed.sync["rounds_per_step"] == 1
    assert_losses_close(result, trials(**mnist))


def _rank_process(rank: int, mentions: str) -> int | None:
    """The live trial process with ``RANK=rank`` in its environment whose command line mentions ``mentions``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
            if (b"bakeoff.trial" in cmdline and f"RANK={rank}".encode() in environ
                    and any(mentions.encode() in arg for arg in cmdline)):
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
    # The runner's temporary folder (spec file included) goes under tmp_path, so this trial's processes are the
    # ones whose command line mentions it.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    spec = RunSpec(**{**BASE, **DDP2, "max_steps": 5000})  # far more steps than run before the kill
    events = tmp_path / "tb"
    killed: dict[str, object] = {}

    def kill_rank_1() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            # The chief's event file is buffered: bytes on disk mean dozens of training steps have been logged.
            if any(f.stat().st_size > 0 for f in events.glob("events.*")):
                pid = _rank_process(1, str(tmp_path))
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    killed.update(pid=pid)
                    return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_rank_1, daemon=True)
    killer.start()
    try:
        result = local.run_one(spec, 150, tmp_path / "logs", tensorboard_dir=events)
        killer.join(timeout=5)
        assert killed, "rank 1 was never found training"
        assert result.status is Status.FAILED
        assert result.reason.startswith("rank 1 of 2 (torchrun's first observed failure) killed by SIGKILL (no "
                                        "evidence of out-of-memory"), result.reason
        # torchrun's own account of the root cause: rank 1, exit code -9, SIGKILL
        assert re.search(r"rank\s*:\s*1\b.*exitcode\s*:\s*-9.*SIGKILL", result.reason, re.S), \
            result.reason
        deadline = time.monotonic() + 5
        while _mentioning(str(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _mentioning(str(tmp_path)) == [], "processes of the killed trial's group remain"
    finally:
        for pid in _mentioning(str(tmp_path)):  # whatever a failing test left behind
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

