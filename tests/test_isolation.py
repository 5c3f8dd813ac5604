"""One trial, one process, one framework: the guard that finds another framework loaded, the framework-free
TensorBoard writer that keeps TensorFlow out of PyTorch trials, and real trials of each framework checked by it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bakeoff.core import registry
from bakeoff.core.spec import RunSpec, Status
from bakeoff.measure.events import EventWriter, crc32c
from bakeoff.measure.isolation import foreign_frameworks, loaded_frameworks
from bakeoff.run.executors import local

TF_LIBS = ["/venv/site-packages/tensorflow/libtensorflow_cc.so.2",
           "/venv/site-packages/tensorflow/libtensorflow_framework.so.2"]
TORCH_LIBS = ["/venv/site-packages/torch/lib/libtorch_cpu.so", "/venv/site-packages/torch/lib/libc10.so"]


def test_loaded_frameworks_reads_modules_and_mapped_libraries():
    found = loaded_frameworks(modules=["torch", "torch.nn", "numpy"], mapped=TORCH_LIBS + TF_LIBS + ["/lib/libc.so"])
    assert found == {"torch": {"modules": ["torch"], "libraries": ["libc10.so", "libtorch_cpu.so"]},
                     "tensorflow": {"modules": [], "libraries": ["libtensorflow_cc.so.2",
                                                                 "libtensorflow_framework.so.2"]}}
    assert loaded_frameworks(modules=["numpy", "bakeoff"], mapped=["/lib/libc.so"]) == {}


def test_another_framework_in_the_process_is_named_with_its_evidence():
    found = loaded_frameworks(modules=["torch", "tensorboard"], mapped=TORCH_LIBS + TF_LIBS)
    reason = foreign_frameworks("torch", found)
    assert reason.startswith("another framework was loaded in this torch trial's process: tensorflow (libraries "
                             "libtensorflow_cc.so.2, libtensorflow_framework.so.2)")
    assert foreign_frameworks("tensorflow", loaded_frameworks(modules=["tensorflow"], mapped=TF_LIBS)) == ""


def test_a_keras_row_may_load_its_backend_and_nothing_else():
    torch_loaded = loaded_frameworks(modules=["torch", "keras"], mapped=TORCH_LIBS)
    assert foreign_frameworks("keras-torch", torch_loaded) == ""
    assert foreign_frameworks("keras-jax", torch_loaded).startswith(
        "another framework was loaded in this keras-jax trial's process: torch (modules torch;")


def test_crc32c_matches_the_standard_check_value():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value (RFC 3720, Castagnoli)
    assert crc32c(b"") == 0


def test_event_files_are_read_by_tensorboard(tmp_path):
    writer = EventWriter(tmp_path)
    for step in range(1, 4):
        writer.scalar("train/loss", 1.0 / step, step)
    writer.scalar("eval/accuracy", 0.875, 3)
    writer.close()
    assert writer.path.name.startswith("events.out.tfevents.")
    # TensorBoard's own reader, in a process of its own (it may import TensorFlow).
    script = textwrap.dedent(f"""
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        acc = EventAccumulator({str(tmp_path)!r})
        acc.Reload()
        print(sorted(acc.Tags()["scalars"]))
        print([(e.step, round(e.value, 6)) for e in acc.Scalars("train/loss")])
        print([(e.step, e.value) for e in acc.Scalars("eval/accuracy")])
    """)
    pytest.importorskip("tensorboard")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.splitlines() == ["['eval/accuracy', 'train/loss']",
                                       "[(1, 1.0), (2, 0.5), (3, 0.333333)]", "[(3, 0.875)]"]


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_a_real_trial_loads_only_its_own_framework(framework, tmp_path: Path):
    if not registry.installed(framework):
        pytest.skip(f"{framework} is not installed")
    spec = RunSpec(workload="mnist", framework=framework, execution="eager", max_steps=12, eval_every=6,
                   batch_size=32, device="cpu")
    result = local.run_one(spec, 300, tmp_path / "logs", tensorboard_dir=tmp_path / "tb")
    assert result.status is Status.OK, result.reason
    loaded = result.environment["frameworks_loaded"]
    assert list(loaded) == [framework], loaded
    assert loaded[framework]["modules"] and loaded[framework]["libraries"]  # both kinds of evidence were read
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))  # TensorBoard events written all the same
    # Memory: the baseline after import and build, what training adds above it, and the whole trial's peak.
    assert result.memory_kind == "rss"
    assert 0 < result.memory_baseline_bytes <= result.memory_train_peak_bytes <= result.peak_memory_bytes
    assert result.memory_increment_bytes == result.memory_train_peak_bytes - result.memory_baseline_bytes
    assert result.memory_increment_bytes < result.peak_memory_bytes
    assert "load_average_1m_at_end" in result.environment


def test_a_trial_refuses_the_frameworks_its_row_does_not_load():
    # import tensorflow imports jax when JAX is installed (tf.lite tries `from jax import jit`): refused, it is not
    script = textwrap.dedent("""
        from bakeoff.measure.isolation import loaded_frameworks, refuse_foreign
        refused = refuse_foreign("tensorflow")
        try:
            import jax
        except ImportError as exc:
            print("refused:", exc)
        import tensorflow
        print(refused, sorted(loaded_frameworks()))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.strip().splitlines()
    if registry.installed("jax"):
        assert lines[0] == "refused: import of jax halted; None in sys.modules"
    assert lines[-1] == "['jax', 'jaxlib', 'paddle', 'torch'] ['tensorflow']"
