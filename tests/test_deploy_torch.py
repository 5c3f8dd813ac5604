"""PyTorch's deployment formats: each export, run by its own runtime, computes what the model's ``outputs()`` does,
at the example's shape and at another batch size and length, with the inputs' dtypes cast as the export declares.

AOTInductor compiles C++ for 15-25 s a model on two cores, so it is tested on the text classifier and MNIST only;
every other format on all four workloads. The Transformer workloads are cut to one block (export is per op; a
second block adds time, not coverage).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bakeoff.core import formats, registry
from bakeoff.core.spec import RunSpec
from bakeoff.deploy import Unsupported

torch = pytest.importorskip("torch")
td = pytest.importorskip("bakeoff.frameworks.torch.deploy")

WORKLOADS = ("text_classifier", "autoencoder", "mnist", "speech_ctc")
ONE_BLOCK = (("num_layers", "1"),)
OVERRIDES = {"text_classifier": ONE_BLOCK, "autoencoder": ONE_BLOCK, "speech_ctc": ONE_BLOCK, "mnist": ()}
SLOW_COMPILE = {"aoti": ("text_classifier", "mnist")}
FLOAT_FORMATS = [f.name for f in formats.for_framework("torch") if f.needs != "cuda"]
CASES = [(w, f) for f in FLOAT_FORMATS for w in SLOW_COMPILE.get(f, WORKLOADS)]
ONNX = ("onnxruntime", "onnxscript")


class Setup:
    """One workload's model built from canonical initial weights, and test examples from its data."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.workload = registry.workload(name)
        spec = RunSpec(name, "torch", max_steps=1, config=OVERRIDES[name])
        self.config = self.workload.config("tiny", spec)
        self.weights = self.workload.init_weights(self.config, 3)
        self.model = registry.model_class(name, "torch")(self.config)
        self.model.build(self.weights)
        self.axes = self.workload.serving_inputs
        test = self.workload.load_data(spec).test
        self.example = {n: test[n][:4] for n in self.axes}
        self.other = _other_shape(name, {n: test[n][4:7] for n in self.axes})


def _other_shape(name: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Three other examples, each dynamic length cut (to half for text and sequences, to the longest utterance
    of the three for speech), integer inputs as int64 (the exports declare int32, the data's dtype)."""
    if name == "text_classifier":
        return {"tokens": inputs["tokens"][:, :64].astype(np.int64)}
    if name == "autoencoder":
        return {"inputs": inputs["inputs"][:, :16]}
    if name == "speech_ctc":
        lengths = inputs["feature_lengths"]
        return {"features": inputs["features"][:, :lengths.max()], "feature_lengths": lengths.astype(np.int64)}
    return inputs


_SETUPS: dict[str, Setup] = {}


def setup_for(name: str) -> Setup:
    if name not in _SETUPS:
        _SETUPS[name] = Setup(name)
    return _SETUPS[name]


def runtime(fmt: str, path: Path, threads: int = 1):
    return importlib.import_module(formats.get(fmt).runtime_module).load_runtime(fmt, path, threads)


def _needs(fmt: str) -> None:
    if formats.get(fmt).runtime == "onnx":
        for package in ONNX:
            pytest.importorskip(package)


@pytest.mark.parametrize("name", WORKLOADS)
def test_saved_state_dict_rebuilds_the_same_model(name, tmp_path):
    s = setup_for(name)
    assert td.save_model(name, s.config, s.weights, tmp_path) == [td.NATIVE_FILE]
    assert sorted(p.name for p in tmp_path.iterdir()) == [td.NATIVE_FILE]
    loaded = td.load_model(name, s.config, tmp_path)
    assert not loaded.module.training
    expected = td.predict(s.model, s.example)
    np.testing.assert_array_equal(td.predict(loaded, s.example), expected)
    # predict is outputs(): probabilities for the classifiers (text: binary, one sigmoid per example)
    if name == "text_classifier":
        assert expected.shape == (4,) and ((expected > 0) & (expected < 1)).all()
    if name == "mnist":
        np.testing.assert_allclose(expected.sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize(("name", "fmt"), CASES)
def test_export_computes_the_model_outputs_at_two_shapes(name, fmt, tmp_path):
    _needs(fmt)
    s = setup_for(name)
    record = formats.get(fmt)
    out = tmp_path / record.file
    info = td.export(s.model, fmt, out, s.example, s.axes)

    assert all((tmp_path / f).is_file() for f in info["files"]) and record.file in info["files"]
    assert info["converter"] and isinstance(info["notes"], str)
    axes = {a for dims in s.axes.values() for a in dims if a}
    assert info["dynamic"] == dict.fromkeys(axes, "yes"), info["dynamic"]

    run = runtime(fmt, out)
    got = run(s.example)
    assert got.dtype == np.float32
    assert np.abs(got - td.predict(s.model, s.example)).max() <= record.tolerance
    # The claim, checked here on other examples, other lengths and int64 integers (cast by the runtime).
    for n, dims in s.axes.items():
        assert all(o < e for o, e, a in zip(s.other[n].shape, s.example[n].shape, dims, strict=True) if a)
    expected = td.predict(s.model, s.other)
    assert np.isfinite(expected).all()
    other = run(s.other)
    assert other.shape == expected.shape and other.shape[0] == 3
    assert np.abs(other - expected).max() <= record.tolerance
    if name == "speech_ctc":  # masked past each (shorter) utterance's length, as outputs() masks
        frames = -(-s.other["feature_lengths"] // 4)
        assert all((other[i, n:] == 0).all() for i, n in enumerate(frames))


def test_torch_runtime_pins_its_threads(tmp_path):
    s = setup_for("mnist")
    td.export(s.model, "torchscript", tmp_path / "model.ts", s.example, s.axes)
    before = torch.get_num_threads()
    try:
        run = runtime("torchscript", tmp_path / "model.ts", threads=1)
        assert torch.get_num_threads() == 1
        assert run(s.example).shape == (4, 10)
    finally:
        torch.set_num_threads(before)


def test_onnx_runtime_runs_without_torch(tmp_path):
    _needs("torch-onnx")
    s = setup_for("mnist")
    td.export(s.model, "torch-onnx", tmp_path / "model.onnx", s.example, s.axes)
    np.savez(tmp_path / "in.npz", **s.example)
    script = (
        "import sys, numpy as np\n"
        "from bakeoff.deploy import onnx_runtime\n"
        f"run = onnx_runtime.load_runtime('torch-onnx', {str(tmp_path / 'model.onnx')!r}, 1)\n"
        f"np.save({str(tmp_path / 'out.npy')!r}, run(dict(np.load({str(tmp_path / 'in.npz')!r}))))\n"
        "assert 'torch' not in sys.modules, 'onnx_runtime imported torch'\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    got = np.load(tmp_path / "out.npy")
    assert np.abs(got - td.predict(s.model, s.example)).max() <= formats.get("torch-onnx").tolerance


def test_onnx_fallback_is_recorded_and_its_dynamic_claims_are_what_it_does(tmp_path, monkeypatch):
    # dynamo=True fails: the TorchScript-based exporter takes over, and the converter says so. In torch 2.13 that
    # exporter keeps batch dynamic but bakes the sequence length into MultiheadAttention's reshapes; whatever it
    # does, each claim must say what the graph does at another shape.
    _needs("torch-onnx")
    s = setup_for("text_classifier")
    real = torch.onnx.export

    def dynamo_fails(*args, **kwargs):
        if kwargs.get("dynamo", True):
            raise RuntimeError("dynamo exporter broke")
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.onnx, "export", dynamo_fails)
    out = tmp_path / "model.onnx"
    info = td.export(s.model, "torch-onnx", out, s.example, s.axes)
    assert "dynamo=False" in info["converter"] and "dynamo exporter broke" in info["notes"]
    run = runtime("torch-onnx", out)
    assert np.abs(run(s.example) - td.predict(s.model, s.example)).max() <= 1e-4  # the fixed shape works
    tokens = s.example["tokens"]
    for axis, probe in (("batch", tokens[:1]), ("seq", tokens[:, :64])):
        try:
            works = np.abs(run({"tokens": probe}) - td.predict(s.model, {"tokens": probe})).max() <= 1e-4
        except Exception:  # onnxruntime refuses a baked reshape
            works = False
        claim = info["dynamic"][axis]
        assert (claim == "yes") if works else claim.startswith(f"no: at tokens {probe.shape}"), (axis, claim)


def test_tensorrt_is_unsupported_without_cuda_or_the_package(tmp_path):
    if torch.cuda.is_available() and importlib.util.find_spec("torch_tensorrt"):
        pytest.skip("CUDA and Torch-TensorRT are here: the format is made, not refused")
    s = setup_for("mnist")
    with pytest.raises(Unsupported, match="CUDA|not installed"):
        td.export(s.model, "torch-tensorrt", tmp_path / "model.trt.ts", s.example, s.axes)
    assert not (tmp_path / "model.trt.ts").exists()


def test_tensorrt_metadata_survives_its_save_and_load_beside_the_artifact(tmp_path):
    import json

    from bakeoff.frameworks.torch import runtime as torch_runtime

    def documented_save(module, path, output_format, arg_inputs):
        # torch_tensorrt.save(..., output_format="torchscript"), as its docs say: trace, then torch.jit.save, with
        # no extra files; a plain TorchScript module stands in for the TensorRT-compiled one
        assert output_format == "torchscript"
        torch.jit.save(torch.jit.trace(module, tuple(arg_inputs)), path)

    s = setup_for("mnist")
    names = list(s.axes)
    serving = td.Serving(s.model, names).eval()
    args = tuple(torch.from_numpy(np.ascontiguousarray(s.example[n])) for n in names)
    meta = json.dumps({"inputs": {n: str(s.example[n].dtype) for n in names}, "output": "outputs"})
    out = tmp_path / "model.trt.ts"
    assert td.save_tensorrt(documented_save, serving, out, args, meta) == ["model.trt.ts", "model.trt.ts.bakeoff.json"]
    module, loaded, device = torch_runtime._torchscript(out, "cpu", beside=True)  # the tensorrt loader, on CPU
    assert loaded == json.loads(meta) and device == "cpu"
    with torch.inference_mode():
        np.testing.assert_allclose(module(*args).numpy(), td.predict(s.model, s.example), atol=1e-6)
    # the artifact itself holds no bakeoff.json: read as if it did, it is refused naming what is missing (this was
    # json.loads(""), a JSONDecodeError)
    with pytest.raises(ValueError, match=r"no bakeoff.json in .*model.trt.ts's extra files: .* export it again"):
        torch_runtime._torchscript(out)
    (tmp_path / "model.trt.ts.bakeoff.json").unlink()
    with pytest.raises(ValueError, match=r"no bakeoff.json in .*model.trt.ts.bakeoff.json \(beside the artifact\)"):
        torch_runtime._torchscript(out, "cpu", beside=True)


def test_export_names_the_accepted_formats_for_another_frameworks_one(tmp_path):
    s = setup_for("mnist")
    with pytest.raises(ValueError, match="accepted: torchscript, torch-export"):
        td.export(s.model, "savedmodel", tmp_path / "x", s.example, s.axes)
