"""Training modes as spec fields: mixed precision and gradient accumulation run through the real trial path."""

from __future__ import annotations

import pytest

from bakeoff.core import registry
from bakeoff.core.spec import RunSpec, SpecError
from bakeoff.measure.environment import usable_cores
from bakeoff.predict import capacity
from bakeoff.results.store import Store
from bakeoff.run import runner

BOTH = pytest.mark.skipif(not (registry.installed("torch") and registry.installed("tensorflow")),
                          reason="needs torch and tensorflow")


def _spec(**kw) -> RunSpec:
    return RunSpec(**{"workload": "text_classifier", "framework": "torch", "max_steps": 4, "eval_every": 4,
                      "batch_size": 16, "device": "cpu", **kw})


@BOTH
def test_bf16_runs_and_fp16_on_cpu_is_unsupported(tmp_path):
    specs = [_spec(framework=fw, precision=p, grad_accum=2 if p == "bf16" else 1)
             for fw in ("torch", "tensorflow") for p in ("bf16", "fp16")]
    with Store(tmp_path / "r.sqlite") as store:
        summary = runner.run(specs, store, "modes", timeout_s=600, log_dir=tmp_path / "logs")
    by = {(r.run_spec.framework.value, r.run_spec.precision.value): r for r in summary.ran}
    for fw, mixed in (("torch", "torch.autocast(torch.bfloat16)"), ("tensorflow", "mixed_bfloat16")):
        bf16 = by[(fw, "bf16")]
        assert bf16.status.value == "ok", bf16.reason
        assert bf16.environment["mixed_precision"] == mixed
        # the same thread pools in both frameworks: intra-op and inter-op, all cores (spec.threads = 0)
        assert bf16.environment["intra_op_threads"] == bf16.environment["inter_op_threads"] == usable_cores()
        assert bf16.examples_per_step == 32 and len(bf16.losses) == 4  # 2 micro-batches of 16 per step
        assert 0.3 < bf16.losses[0] < 1.5  # a real binary cross-entropy, not garbage
        # what the capacity plan's calibration reads of a stored trial: the Transformer it trained
        assert capacity.trial_shape(bf16) == capacity.shape_from({"preset": "tiny"})
        fp16 = by[(fw, "fp16")]
        assert fp16.status.value == "unsupported" and "fp16 with loss scaling needs a" in fp16.reason


def test_contradictory_accumulation_is_rejected_before_running():
    with pytest.raises(SpecError, match="batch_size × grad_accum = 1024 × 4 = 4096 examples, more than the 4000"):
        runner.validate([_spec(batch_size=1024, grad_accum=4)])


DIE_AT_STEP = """
import os
limit = os.environ.get("BAKEOFF_TEST_DIE_AT_STEP")
if limit:
    import bakeoff.trial.loop as loop

    calls, units = [0], loop._units

    def counting_units(workload, micro_batches):  # called once per step, just before train_step
        calls[0] += 1
        if calls[0] == int(limit):
            os._exit(7)
        return units(workload, micro_batches)

    loop._units = counting_units
"""


@BOTH
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_interrupted_trial_resumes_to_the_same_losses(tmp_path, monkeypatch, framework):
    # dropout stays on (the tiny preset's 0.1): resuming must restore the RNG streams too
    spec = _spec(framework=framework, max_steps=8, eval_every=8, checkpoint_every=4)
    with Store(tmp_path / "straight" / "r.sqlite") as store:
        [straight] = runner.run([spec], store, "s", timeout_s=600).ran
    assert straight.status.value == "ok"

    (tmp_path / "sitecustomize.py").write_text(DIE_AT_STEP)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{__import__('os').environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("BAKEOFF_TEST_DIE_AT_STEP", "6")
    with Store(tmp_path / "resumed" / "r.sqlite") as store:
        [killed] = runner.run([spec], store, "s", timeout_s=600).ran
        assert killed.status.value == "failed" and "exited with code 7" in killed.reason
        key = killed.key  # keyed by content (bakeoff.core.identity), as its checkpoint folder is
        assert (tmp_path / "resumed" / "r" / "checkpoints" / key / "loop.json").exists()  # the store's folder
        monkeypatch.delenv("BAKEOFF_TEST_DIE_AT_STEP")
        [resumed] = runner.run([spec], store, "s", timeout_s=600, retry_failed=True).ran
    assert resumed.status.value == "ok" and resumed.training.resumed_at_steps == [4]
    assert resumed.losses == straight.losses  # bit-for-bit on CPU, steps 5-8 computed after the restore
    assert not (tmp_path / "resumed" / "r" / "checkpoints" / key).exists()  # cleaned up after success
    logdir = tmp_path / "resumed" / "r" / "tensorboard" / "text_classifier" / "tiny" / f"{framework}-eager" / "seed0"
    assert resumed.execution.tensorboard == str(logdir)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir))
    events.Reload()

    def steps(tag: str) -> list[int]:  # torch writes classic scalars, tf.summary writes v2 tensor summaries
        records = events.Scalars(tag) if tag in events.Tags()["scalars"] else events.Tensors(tag)
        return sorted({e.step for e in records})

    assert steps("train/loss") == list(range(1, 9))  # both attempts wrote into the same run
    assert steps("eval/accuracy") == [0, 8]  # the step-0 evaluation (first attempt) and the last (resumed)


def test_batch_size_candidates_and_memory_sizes():
    from bakeoff.plan.suite_checks import parse_size
    from bakeoff.run.batch_search import _sizes

    assert _sizes(8, None, 100) == [8, 16, 32, 64]
    assert _sizes(8, 24, 100) == [24, 48, 72, 96]
    assert _sizes(8, None, 5) == [5]  # a training set smaller than the first candidate
    assert parse_size("6GiB") == 6 * 2**30 and parse_size("512 MiB") == 512 * 2**20 and parse_size("2g") == 2**31
    assert parse_size("1000") == 1000
    with pytest.raises(SpecError, match="cannot read memory size 'lots'"):
        parse_size("lots")


@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
def test_auto_batch_size_finds_the_largest_power_of_two_under_the_cap(tmp_path):
    import sqlite3
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "bakeoff.cli", "run", "--workload", "text_classifier", "--framework",
                        "torch", "--execution", "eager", "--batch-size", "auto", "--memory-cap", "900MiB",
                        "--max-steps", "3", "--store", "r.sqlite", "--no-report"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert r.returncode in (0, 1), r.stderr
    [(raw,)] = sqlite3.connect(tmp_path / "r.sqlite").execute("SELECT result FROM trials").fetchall()
    result = __import__("json").loads(raw)
    search = result["batch_search"]
    found, probes = search["batch_size"], search["probes"]
    assert found >= 8 and found & (found - 1) == 0  # a power of two
    assert [p["batch_size"] for p in probes] == [8 * 2**i for i in range(len(probes))]
    assert all(p["status"] == "ok" for p in probes[:-1]) and probes[-1]["batch_size"] == 2 * found
    assert probes[-1]["status"] == "out_of_memory" and "passed the cap of 900 MiB" in probes[-1]["reason"]
    assert search["peak_memory_bytes"] <= 900 * 2**20
    assert result["spec"]["batch_size"] == found and result["examples_per_step"] == found
    assert f"batch size for torch/eager: {found}" in r.stdout
