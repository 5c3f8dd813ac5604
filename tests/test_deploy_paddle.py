"""PaddlePaddle's deployment adapter and runtime, in this process: the native ``state_dict`` file's round trip, and
each Paddle format (``paddle.jit.save`` run by Paddle Inference; paddle2onnx run by ONNX Runtime) exported from
every workload's tiny model that has a Paddle model, run by its runtime and compared with the dygraph model within
the format's tolerance — on test examples, at batch 1 (the harness's latency calls), and on the harness's probe
batch (another batch size, half the sequence length), which is what the ``dynamic: yes`` claims rest on. Weights
are perturbed from the initial ones (non-zero biases), so every mapping matters; the dygraph model itself is held
to PyTorch's outputs from the same canonical weights, so the chain ends at an independent implementation.

Measured (paddlepaddle 3.3.1 CPU, paddle2onnx 2.0.1, onnxruntime 1.32, 2-core CPU): every workload exports to both
formats with every named axis dynamic; the largest difference from the dygraph model at any of the three shapes is
1.2e-7 (MNIST, text classifier), 2.1e-6 (autoencoder) and 6.2e-6 (speech, Paddle Inference's oneDNN kernels),
against a tolerance of 1e-4. The file takes about 60 s at a load of 10 on 2 cores (20 s of CPU), half of it the
trial and two processes per format of the last test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bakeoff.core import discover, formats, registry
from bakeoff.deploy.exporting import probe_batch
from deploy_setups import WORKLOADS, Runner, runner, setups_fixture, worst

pytestmark = pytest.mark.skipif(not registry.installed("paddle"), reason="needs paddle installed "
                                "(pip install 'bakeoff[paddle]')")

FORMATS = [f.name for f in formats.for_framework("paddle")]
MODELLED = [w for w in WORKLOADS if "paddle" in discover.models(registry.workload_class(w))]
"""The workloads with a Paddle model (each arrives with its own paddle_model.py)."""

setups = setups_fixture("paddle")


def _runner(fmt: str, path: Path) -> Runner:
    return runner(fmt, path, 1)


# --- the native file ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("workload", MODELLED)
def test_native_state_dict_round_trips_exactly(setups, workload):
    from bakeoff.frameworks.paddle import deploy as paddle_deploy

    s = setups(workload)
    assert s.saved == [paddle_deploy.NATIVE_FILE] and (s.directory / paddle_deploy.NATIVE_FILE).is_file()
    loaded = s.model.get_weights()
    assert sorted(loaded) == sorted(s.weights)
    for name, value in s.weights.items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)


@pytest.mark.parametrize("workload", MODELLED)
def test_predict_matches_pytorch_from_the_same_weights(setups, workload):
    """The reference every format is held to is itself held to an independent implementation: PyTorch's model
    built from the same canonical weights (the project's fp32 forward tolerance)."""
    pytest.importorskip("torch")
    from bakeoff.analysis.parity_tolerances import compare_outputs
    from bakeoff.frameworks.torch import deploy as torch_deploy

    s = setups(workload)
    twin = registry.model_class(workload, "torch")(s.config)
    twin.build(s.weights)
    twin.module.eval()
    got, expected = s.predict(s.inputs), torch_deploy.predict(twin, s.inputs)
    assert got.dtype == np.float32
    findings = compare_outputs(got, expected, "fp32")
    assert all(f.ok for f in findings), findings


def test_load_model_refuses_a_config_the_file_does_not_fit(setups):
    from bakeoff.frameworks.paddle import deploy as paddle_deploy

    s = setups("mnist")
    with pytest.raises(ValueError, match="expected shape"):
        paddle_deploy.load_model(s.workload, {**s.config, "filters": [s.config["filters"][0], 3]}, s.directory)
    if "text_classifier" in MODELLED:  # a block the config drops: refused, not ignored
        t = setups("text_classifier")
        with pytest.raises(ValueError, match=r"extra \['blocks\.1\."):
            paddle_deploy.load_model(t.workload, {**t.config, "num_layers": 1}, t.directory)


# --- the formats ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("workload", MODELLED)
def test_export_matches_the_dygraph_model_at_every_shape(setups, workload, fmt):
    s = setups(workload)
    path, info = s.export(fmt)
    assert path.exists() and info["files"] == [path.name]
    named = list(dict.fromkeys(a for names in s.axes.values() for a in names if a))
    assert info["dynamic"] == {a: "yes" for a in named}, info["dynamic"]
    run = _runner(fmt, path)
    tolerance = formats.FORMATS[fmt].tolerance
    probe = probe_batch(s.test, s.axes)  # the harness's own: 3 examples, seq / frames cut to half
    for inputs in (s.inputs, {k: v[:1] for k, v in s.inputs.items()}, probe):
        got = run(inputs)
        assert got.dtype == np.float32
        assert worst(got, s.predict(inputs)) <= tolerance, {k: v.shape for k, v in inputs.items()}


    if workload == "speech_ctc":  # T' = ceil(ceil(frames / 2) / 2): the output length follows the input's
        frames = probe["features"].shape[1]
        for _ in range(2):
            frames = (frames + 1) // 2
        assert run(probe).shape == (3, frames, s.config["vocab_size"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_runtimes_cast_the_data_dtypes(setups, fmt):
    """Float64 images and int64 tokens (as a caller's numpy or a tokenizer may give them) are cast to the float32
    and int32 the program declares."""
    s = setups("mnist")
    run = _runner(fmt, s.export(fmt)[0])
    images = s.inputs["images"]
    np.testing.assert_array_equal(run({"images": images.astype(np.float64)}), run({"images": images}))
    if "text_classifier" in MODELLED:
        t = setups("text_classifier")
        run = _runner(fmt, t.export(fmt)[0])
        tokens = t.inputs["tokens"]
        np.testing.assert_array_equal(run({"tokens": tokens.astype(np.int64)}), run({"tokens": tokens}))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_sequence_past_the_position_table_is_refused(setups, fmt):
    """The dynamic seq axis is bounded by the learned position table (seq_len rows): shorter runs (tested above),
    longer fails in the runtime (the table's slice no longer broadcasts against the tokens) rather than computing
    with missing positions. Neither exporter records the bound, so it shows only here."""
    if "text_classifier" not in MODELLED:
        pytest.skip("no Paddle text classifier model")
    s = setups("text_classifier")
    run = _runner(fmt, s.export(fmt)[0])
    with pytest.raises(Exception, match="broadcast|Broadcast"):
        run({"tokens": np.ones((1, s.config["seq_len"] + 1), np.int32)})


def test_onnx_graph_names_its_output_and_axes(setups):
    """bakeoff's ONNX Runtime runtime reads the output called ``outputs``; the batch axis carries its name."""
    import onnx

    s = setups("mnist")
    graph = onnx.load(str(s.export("paddle-onnx")[0])).graph
    assert [o.name for o in graph.output] == ["outputs"]
    dims = graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 28, 28]


def test_inference_program_runs_without_dygraph_model_code(setups, tmp_path):
    """A fresh process with the paddle runtime only: the directory holds the whole program and its parameters, and
    no other framework (nor bakeoff's workloads) is imported."""
    s = setups("mnist")
    path = s.export("paddle-inference")[0]
    np.save(tmp_path / "images.npy", s.inputs["images"])
    script = (
        "import json, sys, numpy as np\n"
        "from bakeoff.frameworks.paddle import runtime as paddle_runtime\n"
        f"run = paddle_runtime.load_runtime('paddle-inference', {str(path)!r}, 1)\n"
        f"np.save({str(tmp_path / 'out.npy')!r}, run({{'images': np.load({str(tmp_path / 'images.npy')!r})}}))\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in "
        "('torch', 'tensorflow', 'jax', 'keras', 'onnxruntime')} | "
        "{m for m in sys.modules if m.startswith('bakeoff.workloads')})))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
    assert worst(np.load(tmp_path / "out.npy"), s.predict(s.inputs)) <= formats.FLOAT_TOLERANCE


def test_onnx_conversion_survives_a_process_that_holds_tensorflow(setups, tmp_path):
    """paddle2onnx 2.0.1 segfaults converting in a process that has loaded TensorFlow (a CI test worker did): the
    adapter converts in a child process, so an export from such a process succeeds."""
    pytest.importorskip("tensorflow")
    s = setups("mnist")
    program = s.export("paddle-inference")[0] / "model"  # a saved program to convert
    code = ("import sys, pathlib, paddle, tensorflow; from bakeoff.frameworks.paddle.deploy import convert; "
            "convert(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])); print('converted')")
    done = subprocess.run([sys.executable, "-c", code, str(program), str(tmp_path / "m.onnx")], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.split()[-1] == "converted", done.stderr[-2000:]
    assert (tmp_path / "m.onnx").stat().st_size > 0


def test_export_refuses_unknown_formats_and_missing_inputs(setups, tmp_path):
    from bakeoff.frameworks.paddle import deploy as paddle_deploy

    s = setups("mnist")
    with pytest.raises(ValueError, match="accepted: paddle-inference, paddle-onnx"):
        paddle_deploy.export(s.model, "torchscript", tmp_path / "model.ts", s.inputs, s.axes)
    with pytest.raises(ValueError, match="lacks the serving input"):
        paddle_deploy.export(s.model, "paddle-onnx", tmp_path / "model.onnx", {}, s.axes)


def test_runtime_refuses_other_formats_and_a_bare_program(setups, tmp_path):
    from bakeoff.frameworks.paddle import runtime as paddle_runtime

    path = setups("mnist").export("paddle-inference")[0]
    with pytest.raises(ValueError, match="paddle-inference"):
        paddle_runtime.load_runtime("paddle-onnx", path, 1)
    with pytest.raises(ValueError, match="bakeoff.json"):
        paddle_runtime.load_runtime("paddle-inference", tmp_path, 1)
    assert paddle_runtime.runtime_version().startswith("paddle 3.")


def test_runtime_threads_zero_means_every_usable_core(setups):
    """0 gives the predictor every core this process may use, as the other runtimes' 0 does (Paddle's own default
    is one math thread); a number is applied as given. Read back from Paddle's config."""
    import os

    path = setups("mnist").export("paddle-inference")[0]
    assert runner("paddle-inference", path, 0).facts["math_threads"] == len(os.sched_getaffinity(0))
    assert runner("paddle-inference", path, 1).facts["math_threads"] == 1


# --- through the real processes ---------------------------------------------------------------------------------

def test_a_kept_paddle_model_exports_and_is_measured_in_its_own_processes(tmp_path):
    """A Paddle trial keeps its MNIST model; each format exports in its own process (loading Paddle only) and is
    measured in a fresh one: Paddle Inference loads Paddle alone, ONNX Runtime no framework; both within the
    tolerance of the dygraph model's outputs on the test examples and on the probe batch, latencies recorded."""
    from bakeoff.core.spec import RunSpec
    from bakeoff.deploy import pipeline
    from bakeoff.results.store import Store

    store = Store(tmp_path / "s.sqlite")
    spec = RunSpec(workload="mnist", framework="paddle", max_steps=6, eval_every=6, device="cpu")
    (_, directory, reason), = pipeline.train([spec], store, tmp_path / "models")
    assert directory is not None, reason
    settings = pipeline.Settings(threads=1, batch=16, calls=20, warmup=2, rounds=2, examples=48, timeout_s=600)
    rows = {r["format"]: r for r in pipeline.export_and_measure(directory, store, settings)}
    assert sorted(rows) == sorted(FORMATS)
    for name, row in rows.items():
        assert row["status"] == "ok", row.get("reason")
        assert row["export"]["refused"] == ["jax", "jaxlib", "tensorflow", "torch"]  # the export loads Paddle only
        inf = row["inference"]
        assert inf["parity"] == "ok" and inf["max_abs_diff"] <= formats.FORMATS[name].tolerance
        assert inf["dynamic"] == "yes" and row["export"]["dynamic"] == {"batch": "yes"}
        assert len(inf["latency_samples_s"]) == 20 and inf["latency_s"]["p50"] <= inf["latency_s"]["p99"]
        assert inf["metric"] == pytest.approx(row["reference"]["metric"])
        assert inf["threads"] == 1 and row["export"]["bytes"] > 0
    assert set(rows["paddle-inference"]["inference"]["frameworks_loaded"]) == {"paddle"}
    assert rows["paddle-inference"]["inference"]["math_threads"] == 1  # the threads asked for, as Paddle reads them
    assert rows["paddle-onnx"]["inference"]["frameworks_loaded"] == {}
    store.close()
