"""The framework-free half of deployment: model directories and their errors, the probe batch, the inference
statistics, the stored rows, and the report's deployment section."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bakeoff.core import formats
from bakeoff.core.spec import RunSpec, SpecError
from bakeoff.deploy import infer, pipeline
from bakeoff.deploy.exporting import export_loads, probe_batch
from bakeoff.report import deployment
from bakeoff.report.templates import Table, to_html, to_markdown
from bakeoff.results import model_dir
from bakeoff.results.store import Store


def test_every_format_names_its_runtime_module_and_adapter_and_is_unique_per_framework():
    assert len(formats.FORMATS) == len({f.name for f in formats.FORMATS.values()})
    for f in formats.FORMATS.values():
        assert f.framework in formats.exporting_frameworks()
        assert f.runtime_module.startswith(("bakeoff.deploy.", "bakeoff.frameworks.")) and "runtime" in f.runtime_module
        assert f.adapter == formats.adapter_module(f.framework)
        assert f.tolerance is None if f.quantised else f.tolerance == formats.FLOAT_TOLERANCE
    # ONNX Runtime and LiteRT processes load no framework; jax2tf's export converts through TensorFlow.
    assert formats.get("torch-onnx").loads == () and formats.get("litert").loads == ()
    assert export_loads(formats.get("jax2tf")) == ("jax", "tensorflow")
    assert export_loads(formats.get("torch-onnx")) == ("torch",)
    with pytest.raises(SpecError, match="unknown deployment format 'tflite'; accepted: torchscript"):
        formats.get("tflite")


def test_probe_batch_cuts_variable_axes_and_clips_lengths():
    split = {"features": np.ones((5, 40, 8), np.float32), "feature_lengths": np.array([40, 12, 30, 5, 40]),
             "labels": np.zeros((5, 3))}
    probe = probe_batch(split, {"features": ("batch", "frames", None), "feature_lengths": ("batch",)})
    assert probe["features"].shape == (3, 20, 8)
    assert probe["feature_lengths"].tolist() == [20, 12, 20]
    assert "labels" not in probe
    images = probe_batch({"images": np.zeros((9, 28, 28))}, {"images": ("batch", None, None)})
    assert images["images"].shape == (3, 28, 28)  # fixed axes untouched


def test_percentiles_compare_parity_and_dynamic():
    got = infer.percentiles([float(i) for i in range(1, 101)])
    assert got["p50"] == pytest.approx(50.5) and got["p99"] == pytest.approx(99.01)
    ref = np.array([[0.2, 0.8]], np.float32)
    assert infer.compare(ref + 1e-3, ref) == pytest.approx(1e-3, rel=1e-3)
    assert infer.compare(ref[:, :1], ref) == float("inf")  # a shape change is never a match
    assert infer.parity({"tolerance": 1e-4, "max_abs_diff": 5e-5}) == "ok"
    assert infer.parity({"tolerance": 1e-4, "max_abs_diff": 2e-4}) == "differs"
    assert infer.parity({"tolerance": None, "max_abs_diff": 0.3}) == "reported"
    assert infer.dynamic({"tolerance": 1e-4, "probe_max_abs_diff": 1e-6}) == "yes"
    assert infer.dynamic({"probe_error": "ValueError: shape (3, 32) fixed"}).startswith("no: ValueError")
    assert infer.dynamic({"tolerance": 1e-4, "probe_max_abs_diff": 1.0}).startswith("no: outputs at the probe")


def test_latencies_keep_every_sample_after_the_warmup():
    calls = []
    samples = infer.latencies(lambda x: calls.append(x["i"][0]), [{"i": np.array([k])} for k in range(3)], 7, 2)
    assert len(samples) == 7 and all(s >= 0 for s in samples)
    assert calls == [0, 1, 0, 1, 2, 0, 1, 2, 0]  # 2 warm-up calls, then 7 timed, cycling over the examples


def _manifest(tmp_path, **changes):
    directory = tmp_path / "m"
    directory.mkdir()
    spec = RunSpec(workload="mnist", framework="torch", max_steps=2)
    raw = {"workload": "mnist", "preset": "tiny", "framework": "torch", "key": spec.key(), "label": spec.label(),
           "spec": spec.to_dict(), "config": {}, "native_file": "model.pt", "serving_inputs": {"images": ["batch"]},
           "serving": {}, "metric_name": "accuracy", "final_metric": 0.5, "best_metric": 0.5,
           "higher_is_better": True, "steps": 2, "num_params": 10, "bakeoff_version": "x", "created_at": "now",
           "version": model_dir.MODEL_DIR_VERSION, **changes}
    (directory / model_dir.MANIFEST).write_text(json.dumps(raw))
    np.savez(directory / model_dir.WEIGHTS, w=np.zeros(2))
    (directory / "model.pt").write_bytes(b"x")
    return directory


def test_model_directory_errors_name_the_directory_and_the_problem(tmp_path):
    with pytest.raises(model_dir.ModelDirError, match="no model directory at .*nowhere.*bakeoff train"):
        model_dir.read(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(model_dir.ModelDirError, match="is not a bakeoff model directory: it has no manifest.json"):
        model_dir.read(tmp_path / "empty")
    good = _manifest(tmp_path)
    assert model_dir.read(good).workload == "mnist"
    with pytest.raises(model_dir.ModelDirError, match="holds a mnist model, not speech_ctc"):
        model_dir.read(good, workload="speech_ctc")
    (good / "model.pt").unlink()
    with pytest.raises(model_dir.ModelDirError, match="incomplete: model.pt is missing"):
        model_dir.read(good)


def test_model_directory_from_another_version_is_refused(tmp_path):
    old = _manifest(tmp_path, version=0, bakeoff_version="0.0.1")
    with pytest.raises(model_dir.ModelDirError, match="version 0 .*bakeoff 0.0.1.*reads version 1"):
        model_dir.read(old)


def test_settings_refuse_nonsense():
    with pytest.raises(SpecError, match="calls must be a positive integer, got 0"):
        pipeline.Settings(calls=0)
    assert pipeline.Settings(threads=3).cpu_threads == 3


def _row(framework, fmt, status="ok", p50=1e-3, size=1000, diff=1e-6, reason=""):
    f = formats.get(fmt)
    return {"key": f"{framework}-{fmt}", "model_key": "k-" + framework, "workload": "mnist", "preset": "tiny",
            "framework": framework, "format": fmt, "display": f.display, "targets": list(f.targets),
            "status": status, "reason": reason, "stage": "export" if status != "ok" else "",
            "settings": {"cpu_threads": 2, "batch": 32, "calls": 200, "warmup": 10, "rounds": 3, "examples": 256},
            "reference": {"metric": 0.9},
            "export": {"export_s": 1.5, "bytes": size},
            "inference": {} if status != "ok" else {
                "load_s": 0.1, "first_s": 0.01, "latency_s": {"p50": p50, "p95": p50 * 2, "p99": p50 * 3},
                "examples_per_s": 5000.0, "peak_rss_bytes": 2**28, "max_abs_diff": diff,
                "tolerance": f.tolerance, "metric": 0.9, "parity": infer.parity(
                    {"tolerance": f.tolerance, "max_abs_diff": diff}), "dynamic": "yes"}}


def test_store_keeps_deployment_rows_and_the_report_section_shows_them(tmp_path):
    rows = [_row("torch", "torchscript", p50=2e-3, size=4000), _row("torch", "torch-onnx", p50=1e-3, size=3000),
            _row("tensorflow", "litert", p50=5e-4, size=1000),
            _row("tensorflow", "tf-onnx", status="failed", reason="ValueError: unsupported op"),
            _row("tensorflow", "savedmodel", diff=0.5)]
    with Store(tmp_path / "s.sqlite") as store:
        for row in rows:
            store.put_deployment(row)
        back = store.deployments(workload="mnist")
        assert [r["format"] for r in back] == [r["format"] for r in rows]
        assert store.deployments(model_keys=["k-torch"])[0]["framework"] == "torch"
    reached = deployment.targets(back)
    assert reached["torch"]["browser"] == ["ONNX (torch.onnx)"]
    # the failed and the differing formats count not
    assert reached["tensorflow"] == {"mobile": ["LiteRT (float)"], "edge": ["LiteRT (float)"]}
    scores = deployment.criteria(back, ["torch", "tensorflow", "jax"])
    assert scores["deploy_latency"] == {"torch": pytest.approx(2.5), "tensorflow": 5.0, "jax": 0.0}
    assert scores["deploy_size"]["tensorflow"] == 5.0 and scores["deploy_size"]["torch"] == pytest.approx(5 / 3)
    blocks = deployment.blocks(back)
    table = next(b for b in blocks if isinstance(b, Table))
    assert len(table.rows) == 5
    failed = next(r for r in table.rows if r[1] == "ONNX (tf2onnx)")
    assert failed[2].startswith("failed (export): ValueError: unsupported op")
    differs = next(r for r in table.rows if r[1] == "SavedModel")
    assert differs[2] == "ok, outputs differ" and differs[12].startswith("0.5 (0.0001)")
    text = to_markdown("t", blocks)
    assert "## Deployment" in text and "### mnist / tiny" in text and "mobile (LiteRT (float))" in text
    html = to_html("t", blocks)
    assert "<h2>Deployment</h2>" in html and '<td class="l">LiteRT (float)</td>' in html
    assert deployment.line(back[0]).startswith("PyTorch TorchScript: ok · 4 kB · load 0.10 s · first 10 ms · "
                                                "batch 1 p50 2 / p95 4 / p99 6 ms · 5,000 ex/s at batch 32")
    assert deployment.blocks([]) == []
    busy = _row("torch", "torch-onnx")
    busy["inference"].update(cores=2, load_average_1m_at_start=1.0, load_average_1m_at_end=4.5)
    assert deployment.cells(busy)[2] == "ok (machine load 4.5 on 2 cores: latencies unreliable)"


def test_an_old_read_only_store_without_the_table_has_no_deployments(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    with Store(path):
        pass
    db = sqlite3.connect(path)
    db.execute("DROP TABLE deployments")
    db.commit()
    db.close()
    with Store(path, readonly=True) as store:
        assert store.deployments() == []


@pytest.mark.parametrize(("metric", "metric_name", "counted"), [
    (0.895, "accuracy", True), (0.87, "accuracy", False),  # a rate: within 1 point counts, 3 points do not
    (0.9085, "mse", True), (0.95, "mse", False), (None, "accuracy", False)])  # other metrics: 1% of the reference
def test_a_quantised_format_counts_toward_the_criteria_only_within_its_metric_bound(metric, metric_name, counted):
    fast_int8 = _row("tensorflow", "litert-int8", p50=1e-4, size=250)
    fast_int8["inference"].update(metric=metric, metric_name=metric_name)
    rows = [_row("tensorflow", "litert", p50=5e-4, size=1000), fast_int8, _row("torch", "torch-onnx", p50=1e-3)]
    assert fast_int8["inference"]["parity"] == "reported"
    scores = deployment.criteria(rows, ["torch", "tensorflow"])
    # counted: the int8 file is TensorFlow's fastest (0.1 ms) and smallest; else its float LiteRT (0.5 ms)
    assert scores["deploy_latency"]["torch"] == pytest.approx(5 * (1e-4 if counted else 5e-4) / 1e-3)
    assert scores["deploy_size"]["tensorflow"] == 5.0
    assert scores["deploy_size"]["torch"] == pytest.approx(5 * (250 if counted else 1000) / 1000)
    cell = deployment.cells(fast_int8)[13]
    assert cell.endswith(" counted" if counted else " not counted: beyond the bound") or metric is None
