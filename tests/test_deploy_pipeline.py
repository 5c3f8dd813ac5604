"""Train-and-keep, export and measure through real processes: a trial keeps its model, each format exports in its
own process and is measured in a fresh one with its runtime, a failing converter is recorded while the other
formats go on, and stored rows are reused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bakeoff.core import registry
from bakeoff.core.spec import RunSpec, SpecError
from bakeoff.deploy import pipeline
from bakeoff.results import model_dir
from bakeoff.results.store import Store

pytestmark = pytest.mark.skipif(not registry.installed("torch"), reason="needs PyTorch")

SETTINGS = pipeline.Settings(threads=1, batch=16, calls=20, warmup=2, rounds=2, examples=48, timeout_s=600)


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    root = tmp_path_factory.mktemp("deploy")
    store = Store(root / "s.sqlite")
    spec = RunSpec(workload="mnist", framework="torch", max_steps=6, eval_every=6, device="cpu")
    (identified, directory, reason), = pipeline.train([spec], store, root / "models")
    assert directory is not None, reason
    yield store, directory, identified
    store.close()


def test_a_trial_keeps_its_model_with_a_manifest_canonical_weights_and_the_native_file(kept):
    store, directory, spec = kept
    manifest = model_dir.read(directory, workload="mnist")
    assert (manifest.framework, manifest.key, manifest.steps, manifest.native_file) == ("torch", spec.key(), 6,
                                                                                       "model.pt")
    assert manifest.serving_inputs == {"images": ["batch", None, None]}
    assert manifest.serving["input"] == "(B, 28, 28) float32 pixels / 255"
    trial = store.results(keys=[spec.key()])[0]
    assert trial.setup.kept_model["directory"] == str(directory)
    assert manifest.final_metric == trial.final_metric
    # The canonical weights are the trained ones, not the initial ones.
    workload = registry.workload("mnist")
    initial = workload.init_weights(manifest.config, spec.seed)
    trained = model_dir.canonical_weights(directory)
    assert trained.keys() == initial.keys()
    assert not np.allclose(trained["dense.kernel"], initial["dense.kernel"])


def test_export_measures_each_format_in_its_runtime_and_a_failing_converter_is_recorded(kept, monkeypatch):
    store, directory, _ = kept
    monkeypatch.setenv("CXX", "/nonexistent/c++")  # AOTInductor cannot compile: its export fails, with the reason
    seen = []
    rows = pipeline.export_and_measure(directory, store, SETTINGS, ["torchscript", "aoti", "torch-onnx"],
                                       progress=lambda event, name, row: seen.append((event, name)))
    by = {r["format"]: r for r in rows}
    assert by["aoti"]["status"] == "failed" and by["aoti"]["stage"] == "export"
    assert "No working C++ compiler" in by["aoti"]["reason"]  # the converter's own message
    for name in ("torchscript", "torch-onnx"):
        row = by[name]
        assert row["status"] == "ok", row.get("reason")
        inf = row["inference"]
        assert inf["parity"] == "ok" and inf["max_abs_diff"] <= 1e-4
        assert inf["dynamic"] == "yes"
        assert len(inf["latency_samples_s"]) == 20 and inf["latency_s"]["p50"] <= inf["latency_s"]["p99"]
        assert inf["metric"] == pytest.approx(row["reference"]["metric"])
        assert inf["threads"] == 1 and row["export"]["bytes"] > 0
    # ONNX Runtime's process loads no framework; the torch runtime's loads torch only.
    assert by["torch-onnx"]["inference"]["frameworks_loaded"] == {}
    assert set(by["torchscript"]["inference"]["frameworks_loaded"]) == {"torch"}
    assert ("start", "aoti") in seen and ("done", "torch-onnx") in seen
    stored = {r["format"]: r for r in store.deployments(model_keys=[model_dir.read(directory).key])}
    assert stored.keys() == {"torchscript", "aoti", "torch-onnx"}
    assert json.loads((directory / "exports" / "torch-onnx.json").read_text())["status"] == "ok"

    # Again with the same settings: the measured formats are reused, the failed one is tried again.
    monkeypatch.delenv("CXX")
    seen.clear()
    again = pipeline.export_and_measure(directory, store, SETTINGS, ["torchscript", "torch-onnx"],
                                        progress=lambda event, name, row: seen.append((event, name)))
    assert seen == [("skip", "torchscript"), ("skip", "torch-onnx")]
    assert [r["key"] for r in again] == [by["torchscript"]["key"], by["torch-onnx"]["key"]]


def test_formats_of_another_framework_or_unknown_are_refused_before_anything_runs(kept):
    store, directory, _ = kept
    with pytest.raises(SpecError, match="litert: not formats of torch.*its formats: torchscript, torch-export"):
        pipeline.export_and_measure(directory, store, SETTINGS, ["litert"])
    with pytest.raises(SpecError, match="unknown deployment format 'pt'"):
        pipeline.export_and_measure(directory, store, SETTINGS, ["pt"])


def test_report_shows_the_deployments_and_weighs_them_when_asked(kept, tmp_path):
    from bakeoff.cli import main as cli

    store, directory, _ = kept
    pipeline.export_and_measure(directory, store, SETTINGS, ["torch-onnx"])
    out = tmp_path / "report"
    assert cli.main(["report", "--store", str(store.path), "--weight", "deploy_latency=1", "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "## Deployment" in text and "ONNX (torch.onnx)" in text and "server (" in text
    assert "deploy_latency | measured (deployment)" in text and "PyTorch 5" in text
    # Weighted with nothing deployed for the workload: a clear error, exit 2.
    empty = Store(tmp_path / "other.sqlite")
    empty.put(store.results()[0], "train")
    empty.close()
    assert cli.main(["report", "--store", str(tmp_path / "other.sqlite"), "--weight", "deploy_size=1",
                     "--out", str(out)]) == 2


def test_a_kept_model_evaluates_again_to_the_metric_it_reached(kept):
    _, directory, _ = kept
    got = pipeline.evaluate(directory)
    assert got["status"] == "ok" and got["examples"] == 1000  # MNIST's whole shipped test split
    assert got["metric"] == pytest.approx(got["trained_metric"], abs=1e-12)
