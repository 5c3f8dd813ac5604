"""TF32 and the device, read rather than assumed: each framework's reading follows its own setting when it is
flipped in this process; a trial records what its framework says after setup turned TF32 off; each deployment
runtime turns TF32 off and labels its callable with the device it computes on (recorded in the deployment row).
On this CPU every device is the CPU; what is tested is that the values come from the framework."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bakeoff.core.spec import RunSpec
from bakeoff.measure import numerics


@contextlib.contextmanager
def _torch_tf32_restored() -> Iterator[object]:
    torch = pytest.importorskip("torch")
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        yield torch
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_torch_reading_follows_torchs_own_setting():
    with _torch_tf32_restored() as torch:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        assert numerics.tf32("torch") == {"tf32": False, "tf32_settings": {
            "cuda.matmul.allow_tf32": False, "cudnn.allow_tf32": False, "float32_matmul_precision": "highest"}}
        torch.backends.cuda.matmul.allow_tf32 = True
        read = numerics.tf32("torch")
        assert read["tf32"] is True and read["tf32_settings"]["float32_matmul_precision"] == "high"


def test_tensorflow_and_jax_readings_follow_their_own_settings():
    tf = pytest.importorskip("tensorflow")
    before = tf.config.experimental.tensor_float_32_execution_enabled()
    try:
        for enabled in (True, False):
            tf.config.experimental.enable_tensor_float_32_execution(enabled)
            assert numerics.tf32("tensorflow") == {"tf32": enabled,
                                                   "tf32_settings": {"tensor_float_32_execution_enabled": enabled}}
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(before)
    jax = pytest.importorskip("jax")
    before = jax.config.jax_default_matmul_precision
    try:
        jax.config.update("jax_default_matmul_precision", None)  # JAX's default: a GPU may use TF32
        assert numerics.tf32("jax")["tf32"] is True
        jax.config.update("jax_default_matmul_precision", "highest")
        assert numerics.tf32("jax") == {"tf32": False, "tf32_settings": {"jax_default_matmul_precision": "highest"}}
    finally:
        jax.config.update("jax_default_matmul_precision", before)


def test_a_torch_trial_records_tf32_as_torch_reads_it():
    from bakeoff.trial.build import build_trial

    with _torch_tf32_restored() as torch:
        torch.backends.cuda.matmul.allow_tf32 = True  # as code run before the trial might leave it
        parts = build_trial(RunSpec("mnist", "torch", max_steps=1, device="cpu"))
        engine = parts.build_engine()
        env = engine.environment()
        assert env["tf32"] is False and env["tf32_settings"]["cuda.matmul.allow_tf32"] is False  # setup's doing
        torch.backends.cudnn.allow_tf32 = True  # the record is a reading, not a constant
        env = engine.environment()
        assert env["tf32"] is True and env["tf32_settings"]["cudnn.allow_tf32"] is True
        assert env["device"] == "cpu"


def test_the_torch_runtime_turns_tf32_off_and_says_its_device(tmp_path: Path):
    from bakeoff.frameworks.torch import runtime as torch_runtime

    with _torch_tf32_restored() as torch:
        torch.backends.cuda.matmul.allow_tf32 = True
        path = tmp_path / "model.ts"
        meta = json.dumps({"inputs": {"x": "float32"}, "output": "outputs"})
        torch.jit.save(torch.jit.trace(torch.nn.Linear(3, 2), (torch.zeros(1, 3),)), str(path),
                       _extra_files={torch_runtime.META: meta})
        run = torch_runtime.load_runtime("torchscript", path, 0)
        assert run({"x": np.ones((4, 3), np.float32)}).shape == (4, 2)
        assert run.device == "cpu" and run.facts["tf32"] is False
        assert torch.backends.cuda.matmul.allow_tf32 is False


def test_the_tf_runtime_turns_tf32_off_and_says_its_device(tmp_path: Path):
    tf = pytest.importorskip("tensorflow")
    from bakeoff.frameworks.tensorflow import runtime as tf_runtime

    class Double(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            return {"outputs": 2.0 * x}

    module = Double()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.serve})
    before = tf.config.experimental.tensor_float_32_execution_enabled()
    try:
        tf.config.experimental.enable_tensor_float_32_execution(True)
        run = tf_runtime.load_runtime("savedmodel", tmp_path / "sm", 0)
        np.testing.assert_array_equal(run({"x": np.ones((2, 3), np.float32)}), np.full((2, 3), 2.0, np.float32))
        assert run.facts == {"tf32": False, "tf32_settings": {"tensor_float_32_execution_enabled": False}}
        assert run.device == ("GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0")
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(before)


def test_the_onnx_runtime_says_the_provider_it_took(tmp_path: Path):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    from bakeoff.deploy import onnx_runtime

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["outputs"])], "identity",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
                              [helper.make_tensor_value_info("outputs", TensorProto.FLOAT, [None, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    run = onnx_runtime.load_runtime("torch-onnx", tmp_path / "m.onnx", 1)
    assert run({"x": np.ones((2, 3), np.float32)}).shape == (2, 3)
    cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    assert run.device == ("cuda:0" if cuda else "cpu") and run.facts["providers"][-1] == "CPUExecutionProvider"
    assert ("tf32" in run.facts) is cuda and not run.facts.get("tf32")  # the CUDA provider's use_tf32, read back
