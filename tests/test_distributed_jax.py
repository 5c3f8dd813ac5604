"""JAX data parallel, through real trials
(``bakeoff.run.executors.local.run_one``): one process over a mesh of 2 CPU devices
(``jax_num_cpu_devices``) and 2 processes joined by ``jax.distributed`` (bakeoff's ``jax_distributed`` launcher,
gloo collectives), and a process killed mid-trial.

JAX shards the global batch over the mesh and jit compiles the unchanged step into an SPMD program, so losses
equal single-device ones on the same global batches up to the order of additions: relative difference ≤ 1e-5 per
step, the bound the other frameworks' distributed tests use. Dropout stays on here: in JAX a replica's masks are
the global batch's masks (one key, one global shape), so they equal a single device's — unlike DDP and
MirroredStrategy, whose replicas draw their own. Measured on MNIST, 8 steps of 32: ≤ 1.3e-7.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from bakeoff.core import registry
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec, Status
from bakeoff.measure import sync as measure_sync
from bakeoff.run.executors.local import run_one

pytestmark = pytest.mark.skipif(not registry.installed("jax"), reason="needs jax")

TIMEOUT_S = 300
LOSS_RTOL = 1e-5


def _spec(**kw: object) -> RunSpec:
    base = dict(workload="mnist", framework="jax", preset="tiny", execution="graph", batch_size=32, max_steps=8,
                eval_every=1000, warmup_steps=3)
    return RunSpec(**{**base, **kw})


def _run(tmp: Path, spec: RunSpec, **kw: object) -> TrialResult:
    result = run_one(spec, TIMEOUT_S, tmp / "logs", **kw)
    assert result.status is Status.OK, f"{spec.label()}: {result.reason}\n{result.extras.get('traceback', '')}"
    return result


@pytest.fixture(scope="module")
def trials(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrialResult]:
    tmp = tmp_path_factory.mktemp("jax_distributed")
    specs = {"single": _spec(), "single_accum2": _spec(grad_accum=2, batch_size=16),
             "mesh": _spec(parallelism="data_parallel", workers=2),
             "mesh_accum2": _spec(parallelism="data_parallel", workers=2, grad_accum=2, batch_size=16),
             "processes": _spec(parallelism="multi_worker", workers=2)}

    class Lazy(dict):
        def __missing__(self, name: str) -> TrialResult:
            self[name] = _run(tmp, specs[name])
            return self[name]

    return Lazy()


def _assert_same_losses(distributed: TrialResult, single: TrialResult) -> None:
    a, b = np.asarray(distributed.losses), np.asarray(single.losses)
    assert a.shape == b.shape == (single.run_spec.max_steps,)
    rel = np.abs(a - b) / np.abs(b)
    assert rel.max() <= LOSS_RTOL, f"per-step relative differences {rel}"
    assert np.ptp(b) > 0.05  # the losses really move


def test_a_mesh_of_two_devices_trains_like_one_device_with_identical_replicas(trials):
    mesh = trials["mesh"]
    dist = mesh.distributed
    assert dist.strategy == "SPMD data parallel over a 2-device mesh (one process, XLA CPU (one process))"
    assert dist.replicas_identical is True and len(dist.replica_weights_sha256) == 2
    assert dist.batch_size == {"global": 32, "per_replica": 16} and dist.processes == 1
    _assert_same_losses(mesh, trials["single"])
    sync = dist.sync
    # XLA combines the step's gradient all-reduces into one; timed on its own after training
    assert sync["compiled_collectives_per_step"] == {"all-reduce": 1}
    assert sync["gradient_bytes"] == 4 * mesh.num_params and sync["bytes_per_step"] == 4 * mesh.num_params + 8
    assert sync["definition"] == measure_sync.DEFINITION and len(sync["samples_s"]) == measure_sync.REPEATS
    assert mesh.training.graph_builds == 1  # the figures' extra compile is not a training graph build


def test_accumulation_over_a_mesh_equals_accumulation_on_one_device(trials):
    # (each micro-batch draws its own dropout key, so it is compared with the same micro-batches on one device)
    accum, single = trials["mesh_accum2"], trials["single_accum2"]
    assert accum.distributed.replicas_identical is True and accum.examples_per_step == 32
    _assert_same_losses(accum, single)


def test_jax_distributed_processes_train_like_one_device(trials):
    processes = trials["processes"]
    dist = processes.distributed
    assert dist.launcher == "jax_distributed" and [r["rank"] for r in dist.ranks] == [0, 1]
    assert dist.strategy == "SPMD data parallel over a 2-device mesh (jax.distributed, gloo)"
    assert dist.replicas_identical is True and dist.setup_s > 0
    assert dist.setup_parts_s["rendezvous_s"] > 0
    _assert_same_losses(processes, trials["single"])
    assert dist.sync["compiled_collectives_per_step"] == {"all-reduce": 1}


def _processes(mark: str) -> dict[int, list[str]]:
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
            cmdline = Path(entry.path, "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if mark.encode() in environ:
            found[int(entry.name)] = [environ.decode(errors="replace"), *cmdline]
    return found


def test_a_killed_process_fails_the_trial_and_leaves_none_behind(tmp_path, monkeypatch):
    mark = f"BAKEOFF_TEST_GROUP={uuid.uuid4().hex}"
    monkeypatch.setenv(*mark.split("="))
    events = tmp_path / "tensorboard"
    killed: dict[str, int] = {}

    def kill_process_1_once_training() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            training = any(b"train/loss" in p.read_bytes() for p in events.glob("events.out.tfevents.*"))
            for pid, (environ, *cmdline) in _processes(mark).items():
                if training and "\0JAX_PROCESS_ID=1\0" in "\0" + environ and "bakeoff.trial" in cmdline:
                    killed["pid"] = pid
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    killer = threading.Thread(target=kill_process_1_once_training, daemon=True)
    killer.start()
    result = run_one(_spec(parallelism="multi_worker", workers=2, max_steps=100_000,
                           eval_every=1), TIMEOUT_S, tmp_path / "logs", tensorboard_dir=events)
    killer.join(5)
    assert killed, "process 1 was never seen training"
    assert result.status is Status.FAILED and "process 1 of the trial's 2 processes" in result.reason
    assert "SIGKILL" in result.reason
    # Process 0 was stopped with the group, not left to train on through its 100,000 steps and exit 0.
    assert result.distributed.exit_codes["process 0"] != 0
    deadline = time.monotonic() + 5
    while _processes(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _processes(mark), "a process of the group outlived it"
