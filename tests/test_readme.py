"""Keep the README true: every `bakeoff ...` command in its "Using it" block runs, in this order, and works.

This includes `bakeoff run`, the real quick suite (a few minutes on 2 cores), whose trials must all succeed and
reach the workload's target — the claim the README and the demo make.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.core import registry

README = Path(__file__).resolve().parent.parent / "README.md"
BIN = Path(sys.executable).parent

MY_SUITE = """
name = "mine"
[defaults]
workload = "text_classifier"
max_steps = 8
eval_every = 4
[matrix]
framework = ["torch"]
execution = ["eager"]
[weights]
team_familiarity = 0.2
[qualitative.team_familiarity]
torch = 4
tensorflow = 2
"""


def readme_commands() -> list[str]:
    block = README.read_text().split("## Using it", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines() if line.startswith("bakeoff")]


def test_readme_lists_the_commands_we_run():
    commands = readme_commands()
    assert commands[0] == "bakeoff list" and commands[1] == "bakeoff run" and commands[-1] == "bakeoff env"
    assert len(commands) == 19


@pytest.mark.skipif(shutil.which("bakeoff", path=str(BIN)) is None or not registry.installed("tensorflow")
                    or not registry.installed("torch") or not registry.installed("jax")
                    or not registry.installed("paddle"),
                    reason="needs the installed console script and the four frameworks")
def test_every_readme_command_runs(tmp_path):
    (tmp_path / "my_suite.toml").write_text(MY_SUITE)
    rows = ["body,stars"] + [f"{'great tasty lovely' if i % 2 else 'stale awful bland'} snack {i},{i % 2 + 4}"
                             for i in range(200)]
    (tmp_path / "reviews.csv").write_text("\n".join(rows) + "\n")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    outputs = {}
    for command in readme_commands():
        r = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
        assert r.returncode == 0, f"{command}\n{r.stdout}\n{r.stderr}"
        outputs[command] = r.stdout
    assert "framework torch: installed" in outputs["bakeoff list"]
    assert "nothing was run or written" in " ".join(outputs["bakeoff run --dry-run --suite seeds"].split()).lower()
    assert outputs["bakeoff --version"].startswith("bakeoff 0.1.0+")
    assert outputs["bakeoff show --suite quick"].count("text_classifier/tiny") == 6
    assert "verdict" in outputs["bakeoff run"]
    distributed, jax_distributed, paddle_distributed = (c for c in outputs if "--parallelism" in c)
    jax_said = " ".join(outputs[jax_distributed].split())
    assert "PaddlePaddle paddle.DataParallel (graph) at 2 replicas runs at" in " ".join(
        outputs[paddle_distributed].split())
    assert "scaling: JAX sharded over a device mesh (graph) at 2 replicas runs at" in jax_said
    assert "JAX jax.distributed (graph) at 2 replicas runs at" in jax_said
    said = " ".join(outputs[distributed].split())
    assert "PyTorch DDP (eager) at 2 replicas runs at" in said and "scaling efficiency against one device" in said
    assert "TensorFlow MirroredStrategy (eager) at 2 replicas runs at" in said
    db = sqlite3.connect(tmp_path / "results" / "bakeoff.sqlite")
    quick = db.execute("SELECT workload, label, status, result FROM trials WHERE suite = 'quick' "
                       "ORDER BY workload, label").fetchall()
    # Each framework in the mode its users train in (TensorFlow graph, PyTorch eager, JAX jit), 3 repeats each.
    assert [(workload, label, status) for workload, label, status, _ in quick] == [
        (workload, label, "ok") for workload in ("autoencoder", "mnist", "text_classifier")
        for label in ("jax/graph", "tensorflow/graph", "torch/eager")[workload == "text_classifier":]
        for _ in range(3)]
    for workload, label, _, result in quick:
        assert '"time_to_target_s": null' not in result, f"{workload} {label} did not reach the target"
    suites = {s for (s,) in db.execute("SELECT DISTINCT suite FROM trials")}
    assert suites == {"quick", "mine", "adhoc-text_classifier", "adhoc-mnist", "train"}
    deploy, export = (outputs[c] for c in outputs if c.startswith(("bakeoff deploy", "bakeoff export")))
    deploy = " ".join(deploy.split())
    for name in ("PyTorch TorchScript", "PyTorch ONNX (torch.onnx)", "TensorFlow SavedModel", "TensorFlow LiteRT "
                 "(float)", "TensorFlow ONNX (tf2onnx)", "JAX jax.export (StableHLO)", "JAX SavedModel (jax2tf)",
                 "PaddlePaddle Paddle Inference", "PaddlePaddle ONNX (paddle2onnx)"):
        assert f"{name}: ok" in deploy and "dynamic axes yes" in deploy
    assert "PyTorch TensorRT (Torch-TensorRT): unsupported" in deploy
    assert "PyTorch TorchScript: ok" in export and "PyTorch ONNX (torch.onnx): ok" in export
    evaluated = " ".join(next(outputs[c] for c in outputs if c.startswith("bakeoff evaluate")).split())
    assert re.search(r"text_classifier torch/eager accuracy (0\.\d+) on \d+ test examples \(at the end of training: "
                     r"\1\)", evaluated), evaluated
    formats = {f for (f,) in db.execute("SELECT format FROM deployments WHERE status = 'ok'")}
    assert {"torchscript", "torch-onnx", "savedmodel", "litert", "litert-int8", "tf-onnx", "jax-export",
            "jax2tf", "paddle-inference", "paddle-onnx"} <= formats
    assert "## Deployment" in (tmp_path / "reports" / "deploy-mnist" / "report.md").read_text()
    # bakeoff claims --no-run, after bakeoff deploy: TF Lite's claim judged on the LiteRT row deploy stored, the
    # others (no trials of theirs stored, nothing run) unsettled, needing 8 GPUs, or not testable
    claims = next(outputs[c] for c in outputs if c.startswith("bakeoff claims"))
    assert re.search(r"verdicts: 3 unsettled, 1 needs hardware, 1 supported, 1 not testable", claims), claims
    assert (tmp_path / "reports" / "quick" / "report.html").stat().st_size > 10_000
    assert (tmp_path / "results" / "quick.csv").read_text().count("\n") == 25
    profiled = " ".join(next(outputs[c] for c in outputs if c.endswith("--profile")).split())
    for label, viewer in (("torch/graph", "ui.perfetto.dev"), ("tensorflow/graph", "xprof"),
                          ("jax/graph", "ui.perfetto.dev")):
        assert re.search(rf"profile mnist/tiny {label} seed 0: \S+ .*{re.escape(viewer)}", profiled), profiled
    quick_md = (tmp_path / "reports" / "quick" / "report.md").read_text()
    assert "MFU (model FLOPs / matmul ceiling), % median (95% CI)" in quick_md and "GFLOP/s (samples " in quick_md
    assert '"cores"' in outputs["bakeoff env"]
    parity = next(outputs[c] for c in outputs if c.startswith("bakeoff parity"))
    assert "all agree: torch, jax" in " ".join(parity.split())
    assert outputs["bakeoff env"].count(" GFLOP/s") >= 3  # fp32 and bf16 of each framework, kept in the store
