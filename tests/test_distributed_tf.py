"""TensorFlow distribution strategies, through real trials
(``bakeoff.run.executors.local.run_one``): MirroredStrategy over 2
logical CPU devices, MultiWorkerMirroredStrategy over 2 worker processes, a parameter-server cluster (chief, 2
workers, 1 parameter server), and a worker killed mid-trial.

Synchronous losses are compared with single-device ones on the same global batches, tf.function (graph) mode,
dropout off (each replica would draw its own masks): relative difference ≤ 1e-5 per step, the bound the parity
tests set for the same examples split differently within one framework (accumulated against plain steps). Two
replicas compute the same sums in another order (each replica's 8 examples summed, then the two halves added by
the all-reduce), so the losses differ by float32 rounding only, carried through Adam; measured over 12 steps:
MirroredStrategy 9e-8, with accumulation 1.8e-7, MultiWorkerMirroredStrategy 1.1e-7.
"""

from __future__ import annotations

import os
import signal
import subprocess
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

pytestmark = pytest.mark.skipif(not registry.installed("tensorflow"), reason="needs tensorflow")

TIMEOUT_S = 300
LOSS_RTOL = 1e-5
NO_DROPOUT = (("dropout", "0"),)


def _spec(**kw: object) -> RunSpec:
    base = dict(workload="text_classifier", framework="tensorflow", preset="tiny", execution="graph", batch_size=16,
                max_steps=12, eval_every=1000, warmup_steps=3, config=NO_DROPOUT)
    return RunSpec(**{**base, **kw})


def _run(tmp: Path, spec: RunSpec, **kw: object) -> TrialResult:
    result = run_one(spec, TIMEOUT_S, tmp / "logs", **kw)
    assert result.status is Status.OK, f"{spec.label()}: {result.reason}\n{result.extras.get('traceback', '')}"
    return result


def _assert_same_losses(distributed: TrialResult, single: TrialResult) -> None:
    a, b = np.asarray(distributed.losses), np.asarray(single.losses)
    assert a.shape == b.shape == (single.run_spec.max_steps,)
    rel = np.abs(a - b) / np.abs(b)
    assert rel.max() <= LOSS_RTOL, f"per-step relative differences {rel}"
    assert np.ptp(b) > 0.1  # the losses really move: the comparison is not vacuous


@pytest.fixture(scope="module")
def trials(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TrialResult]:
    """Each trial once per module, run on first use."""
    tmp = tmp_path_factory.mktemp("distributed")
    specs = {
        "single": _spec(),
        "single_accum2": _spec(grad_accum=2),
        "mirrored": _spec(parallelism="data_parallel", workers=2),
        "mirrored_accum2": _spec(parallelism="data_parallel", workers=2, grad_accum=2),
        "multi_worker": _spec(parallelism="multi_worker", workers=2),
    }

    class Lazy(dict):
        def __missing__(self, name: str) -> TrialResult:
            self[name] = _run(tmp, specs[name])
            return self[name]

    return Lazy()


def _sync(result: TrialResult) -> dict:
    return result.distributed.sync


def test_mirrored_two_replicas_are_identical_and_train_like_one_device(trials):
    mirrored, single = trials["mirrored"], trials["single"]
    dist = mirrored.distributed
    assert dist.strategy == "MirroredStrategy over 2 logical CPU devices (CollectiveAllReduce)"
    assert dist.replicas_identical is True and len(dist.replica_weights_sha256) == 2
    assert dist.batch_size == {"global": 16, "per_replica": 8} and dist.processes == 1
    _assert_same_losses(mirrored, single)
    sync = _sync(mirrored)
    # one all-reduce of (summed loss, count) and one of all 36 gradients, packed: counted in the traced step
    assert sync["allreduces_per_step"] == 2.0
    assert sync["gradient_bytes"] == 4 * mirrored.num_params and sync["bytes_per_step"] == 4 * mirrored.num_params + 8
    assert sync["definition"] == measure_sync.DEFINITION  # the same method as PyTorch's and JAX's
    assert len(sync["samples_s"]) == 20 and sync["per_step_s"] > 0  # its share of the step: bench/distributed.py
    assert mirrored.extras["train_step_traces"] == 1


def test_mirrored_accumulation_equals_one_device_accumulation(trials):
    accum = trials["mirrored_accum2"]
    assert accum.distributed.replicas_identical is True
    assert accum.examples_per_step == 32
    _assert_same_losses(accum, trials["single_accum2"])
    # still one gradient reduction per optimizer step: the two micro-batches are summed on each replica first
    assert _sync(accum)["allreduces_per_step"] == 2.0


def test_multi_worker_replicas_are_identical_and_train_like_one_device(trials):
    mw = trials["multi_worker"]
    dist = mw.distributed
    assert dist.strategy.startswith("MultiWorkerMirroredStrategy over 2 worker processes")
    assert dist.launcher == "tf_config" and [r["rank"] for r in dist.ranks] == [0, 1]
    assert dist.replicas_identical is True
    assert all(r["status"] == "ok" for r in dist.ranks)
    _assert_same_losses(mw, trials["single"])
    assert _sync(mw)["allreduces_per_step"] == 2.0 and dist.setup_s > 0


def test_parameter_server_trains_asynchronously(tmp_path):
    steps = 60
    ps = _run(tmp_path, _spec(parallelism="parameter_server", workers=2, max_steps=steps, config=()))
    dist = ps.distributed
    assert dist.synchronous is False and dist.launcher == "tf_parameter_server" and dist.processes == 4
    assert sorted(dist.member_peak_rss_bytes) == ["chief", "ps 0", "worker 0", "worker 1"]
    async_ = dist.asynchronous
    assert async_["in_flight"] == 2 and "not comparable" in async_["losses"]
    # the time per completed step, averaged over the steady calls: their total over the steps they completed
    steady_calls = ps.step_times_s[1 + ps.run_spec.warmup_steps:]
    assert async_["steady_mean_step_s"] == pytest.approx(sum(steady_calls) / len(steady_calls), rel=0.05)
    # ...which is the trial's steady step (not the median of bunched completions), and its throughput's basis
    assert ps.training.steady_statistic == "mean"
    assert ps.steady_step_s == pytest.approx(np.mean(steady_calls))
    assert ps.throughput["examples_per_s"] == pytest.approx(ps.examples_per_step / np.mean(steady_calls))
    losses = async_["step_losses"]
    assert len(losses) == steps and len(ps.losses) == steps  # every scheduled step completed on the clock
    # It learns: the last 20 steps' mean loss is below the first 20 steps' (measured: 0.79 -> 0.66; one-device
    # training on these batches: 0.75 -> 0.64). A mean of 20 batches of 16 varies by about 0.04.
    assert np.mean(losses[-20:]) < np.mean(losses[:20]) - 0.05, losses
    assert ps.final_metric is not None and ps.throughput["examples_per_s"] > 0
    sync = _sync(ps)
    assert sync["allreduces_per_step"] == 0.0 and sync["bytes_per_step"] == 2 * 4 * ps.num_params
    assert sync["per_step_s"] > 0


def test_parameter_server_eager_is_unsupported_before_any_process_starts(tmp_path, monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", started)  # any process start, by any launcher, fails the test
    result = run_one(_spec(parallelism="parameter_server", workers=2, execution="eager"), TIMEOUT_S, tmp_path)
    assert result.status is Status.UNSUPPORTED and "ClusterCoordinator.schedule" in result.reason
    assert not list(tmp_path.iterdir())  # no log either


def _processes(mark: str) -> dict[int, tuple[bytes, list[str]]]:
    """Processes whose environment holds ``mark``: pid -> (environment, command line)."""
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
            found[int(entry.name)] = (environ, cmdline)
    return found


def test_killed_worker_fails_the_trial_and_leaves_no_process(tmp_path, monkeypatch):
    mark = f"BAKEOFF_TEST_GROUP={uuid.uuid4().hex}"
    monkeypatch.setenv(*mark.split("="))
    spec = _spec(parallelism="multi_worker", workers=2, max_steps=5000)
    events = tmp_path / "tensorboard"
    killed: dict[str, object] = {}

    def kill_worker_1_once_training() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            # Training started: the chief's TensorBoard events hold a training loss.
            training = any(b"train/loss" in p.read_bytes() for p in events.glob("events.out.tfevents.*"))
            for pid, (environ, cmdline) in _processes(mark).items():
                if training and b"\0BAKEOFF_RANK=1\0" in b"\0" + environ and "bakeoff.trial" in cmdline:
                    killed.update(pid=pid, spec_path=cmdline[cmdline.index("bakeoff.trial") + 1])
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    killer = threading.Thread(target=kill_worker_1_once_training, daemon=True)
    killer.start()
    result = run_one(spec, TIMEOUT_S, tmp_path / "logs", tensorboard_dir=events)
    killer.join(timeout=5)
    assert killed, "worker 1 was never found training"
    assert Path(str(killed["spec_path"])).name == f"{spec.key()}.request.json"
    assert result.status is Status.FAILED
    assert result.reason.startswith("worker 1 ") and "killed by SIGKILL" in result.reason, result.reason
    assert result.distributed.first_failure.startswith("worker 1")
    # The group was stopped at once, not at its deadline: worker 0 did not train on through its 5,000 steps and exit 0
    # (the time it took is no test's business on a shared machine).
    assert result.distributed.exit_codes["worker 0"] != 0
    deadline = time.monotonic() + 5
    while _processes(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {pid: cmd for pid, (_, cmd) in _processes(mark).items() if str(killed["spec_path"]) in " ".join(cmd)}
    assert not _processes(mark), f"processes of the group left: {left or _processes(mark)}"
