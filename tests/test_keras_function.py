"""One definition, three backends (#26 item 5): a user's workload, written outside bakeoff, gives its model as one
Keras 3 function (``bakeoff.core.keras_function``) and runs on keras-jax, keras-torch and keras-tensorflow with no
ModelImpl and no weight mapping, beside a native PyTorch model that names its weights by the Keras paths; a wrong
declaration exits 2 naming the workload, the rows and what was expected, before anything is stored; a weight table
that does not fit the model fails its trial with the table that does; an edited Keras function is a new trial.

All through the real CLI in fresh processes, as tests/test_own_workload.py does. Cost on 2 cores: the parity
command (four probes, two at a time, all eager: keras-torch's graph mode is torch.compile, minutes here) and three
4-step trials dominate, about 100 s in all (measured); the refusals start no framework. A backend whose packages
are not installed is left out of the rows, as tests/test_keras_backends.py skips it.
"""

from __future__ import annotations

import ast
import json
import math
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.core import registry

SRC = Path(registry.__file__).resolve().parents[2]  # the bakeoff under test, ahead of any installed one
KERAS_ROWS = ("keras-jax", "keras-torch", "keras-tensorflow")
INSTALLED = [fw for fw in KERAS_ROWS if registry.installed(fw)]

WORKLOAD = '''
"""Blobs (tests/test_own_workload.py), its model one Keras function for every Keras row, and a PyTorch model
beside it that names its weights by the Keras paths."""
import numpy as np

from bakeoff.core.keras_function import KerasFunction, initial_weights
from bakeoff.core.workload import Dataset, Workload


class KerasBlobs(Workload):
    name = "keras_blobs"
    keras_function = KerasFunction("blobs_keras:build_model", input="x", loss="sparse_categorical_crossentropy")
    model_class = "BlobsMLP"  # torch_model.py beside this file
    metric_name = "accuracy"
    presets = ("tiny",)
    preset_configs = {"tiny": {"hidden": 16, "norm": "layer", "learning_rate": 0.01}}
    targets = {"tiny": 0.9}

    def config(self, preset, spec=None, data=None):
        return {**self.preset_config(preset, spec), "features": 4, "classes": 3}

    def load_data(self, spec):
        rng = np.random.default_rng(7)
        labels = rng.integers(0, 3, 320)
        x = (rng.normal(0, 3, (3, 4))[labels] + rng.normal(0, 1, (320, 4))).astype(np.float32)
        return Dataset(train={"x": x[:256], "labels": labels[:256]}, test={"x": x[256:], "labels": labels[256:]})

    def init_weights(self, config, seed):  # the Keras paths and shapes, as the keras_function module prints them
        f, h, c = config["features"], config["hidden"], config["classes"]
        norm = f"{config['norm']}_normalization"
        return initial_weights({"dense/kernel": (f, h), "dense/bias": (h,), f"{norm}/gamma": (h,),
                                f"{norm}/beta": (h,), "dense_1/kernel": (h, c), "dense_1/bias": (c,)}, seed)

    def metric(self, outputs, split):
        return float((outputs.argmax(1) == split["labels"]).mean())

    def units_per_example(self, batch):
        return {}
'''

KERAS_FUNCTION = '''
import keras


def build_model(config):
    x = inputs = keras.Input((config["features"],))
    x = keras.layers.Dense(config["hidden"])(x)
    norm = {"layer": keras.layers.LayerNormalization, "batch": keras.layers.BatchNormalization}[config["norm"]]
    x = keras.layers.Activation("relu")(norm()(x))
    return keras.Model(inputs, keras.layers.Dense(config["classes"])(x))
'''

TORCH_MODEL = '''
import numpy as np
import torch
from torch import nn


class BlobsMLP:
    """The Keras function's model in PyTorch, its weights under the Keras paths (kernels (in, out): transposed)."""

    def __init__(self, config, device="cpu"):
        self.config, self.device, self.module = dict(config), torch.device(device), None

    def build(self, weights):
        c = self.config
        if c["norm"] != "layer":
            raise ValueError(f"norm {c['norm']!r}: this model has LayerNorm only")
        self.module = nn.Sequential(nn.Linear(c["features"], c["hidden"]), nn.LayerNorm(c["hidden"], eps=1e-3),
                                    nn.ReLU(), nn.Linear(c["hidden"], c["classes"])).to(self.device)
        self.set_weights(weights)

    def _named(self):
        m = self.module
        return {"dense/kernel": m[0].weight, "dense/bias": m[0].bias, "layer_normalization/gamma": m[1].weight,
                "layer_normalization/beta": m[1].bias, "dense_1/kernel": m[3].weight, "dense_1/bias": m[3].bias}

    def loss(self, batch, training=True):
        self.module.train(training)
        summed = nn.functional.cross_entropy(self.module(batch["x"]), batch["labels"], reduction="sum")
        return summed, torch.tensor(len(batch["labels"]), dtype=summed.dtype, device=summed.device)

    @torch.no_grad()
    def outputs(self, batch):
        self.module.eval()
        return torch.softmax(self.module(batch["x"]), -1)

    def trainable(self):
        return list(self.module.parameters())

    def num_params(self):
        return sum(p.numel() for p in self.module.parameters())

    def get_weights(self):
        return {k: (p.detach().cpu().numpy().T if k.endswith("kernel") else p.detach().cpu().numpy()).copy()
                for k, p in self._named().items()}

    @torch.no_grad()
    def set_weights(self, weights):
        for k, p in self._named().items():
            p.copy_(torch.from_numpy(np.ascontiguousarray(weights[k].T if k.endswith("kernel") else weights[k])))
'''

# tiny: dense 4·16 + 16, the norm's gamma and beta 2·16 (BatchNormalization's moving statistics are not
# trainable, so not canonical), dense_1 16·3 + 3
PARAMS = 163
RUN = ("--execution", "eager", "--max-steps", "4", "--eval-every", "4", "--batch-size", "32", "--store", "r.sqlite",
       "--no-report")


def write_workload(folder: Path, workload: str = WORKLOAD) -> Path:
    """The workload as ``folder/blobs.py``, its Keras function and its PyTorch model beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "blobs.py").write_text(workload)
    (folder / "blobs_keras.py").write_text(KERAS_FUNCTION)
    (folder / "torch_model.py").write_text(TORCH_MODEL)
    return folder / "blobs.py"


def bakeoff(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The real CLI in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "bakeoff.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


def test_the_keras_rows_and_the_native_model_agree_in_bakeoff_parity(tmp_path):
    rows = ["torch"] * registry.installed("torch") + INSTALLED
    if not INSTALLED or len(rows) < 2:
        pytest.skip(f"needs two of torch, {', '.join(KERAS_ROWS)}: pip install 'bakeoff[keras]' and the backends")
    write_workload(tmp_path / "models")
    r = bakeoff("parity", "--workload", "models/blobs.py:KerasBlobs", "--framework", ",".join(rows),
                "--format", "json", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["ok"] and report["frameworks"] == rows and report["failed_runs"] == {}
    # Every check ran and agreed for each row against the first: the same canonical names and shapes read back
    # exactly (the Keras paths, on every backend and in the native model), outputs from the same initial weights,
    # per-tensor gradients, 6 Adam steps plain and accumulated, the trained weights.
    agreed = {(c["framework"], c["check"]) for c in report["checks"] if c["ok"] and not c["skipped"]}
    for framework in rows[1:]:
        assert {(framework, check) for check in ("parameters", "outputs", "gradients", "losses", "weights",
                                                 "accumulation")} <= agreed


@pytest.mark.skipif(not INSTALLED, reason="needs a Keras row: pip install 'bakeoff[keras]' and a backend")
def test_bakeoff_run_trains_one_keras_function_on_every_backend_from_one_start(tmp_path):
    write_workload(tmp_path / "models")
    # BatchNormalization: its moving statistics are Keras state, not canonical weights; they start at Keras'
    # constants on every backend
    r = bakeoff("run", "--workload", "models/blobs.py:KerasBlobs", "--framework", ",".join(INSTALLED),
                "--set", "norm=batch", *RUN, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = sqlite3.connect(tmp_path / "r.sqlite").execute("SELECT workload, status, result FROM trials").fetchall()
    results = {json.loads(raw)["spec"]["framework"]: (workload, status, json.loads(raw)) for workload, status, raw
               in rows}
    assert sorted(results) == sorted(INSTALLED)
    for framework, (workload, status, result) in results.items():
        assert (workload, status) == ("keras_blobs", "ok"), (framework, result.get("reason"))
        assert result["num_params"] == PARAMS
        assert len(result["losses"]) == 4 and all(math.isfinite(loss) for loss in result["losses"])
    first = [result["losses"][0] for _, _, result in results.values()]
    assert max(first) - min(first) <= 1e-5 * max(first), first  # one start: the same weights, the same loss


@pytest.mark.skipif(not INSTALLED, reason="needs a Keras row: pip install 'bakeoff[keras]' and a backend")
def test_the_keras_function_module_prints_the_table_init_weights_states(tmp_path):
    write_workload(tmp_path / "models")
    backend = INSTALLED[-1].removeprefix("keras-")  # one backend: the paths are the same on all (parity shows it)
    env = {**os.environ, "PYTHONPATH": str(SRC), "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    r = subprocess.run([sys.executable, "-m", "bakeoff.workloads.common.keras_function_model",
                        "models/blobs.py:KerasBlobs"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # the README's command
    assert r.returncode == 0, r.stderr
    assert ast.literal_eval(r.stdout) == {"dense/kernel": (4, 16), "dense/bias": (16,),
                                          "layer_normalization/gamma": (16,), "layer_normalization/beta": (16,),
                                          "dense_1/kernel": (16, 3), "dense_1/bias": (3,)}
    shown = bakeoff("list", "--presets", "--workload", "models/blobs.py", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"tiny: {PARAMS} parameters; target 0.9" in shown.stdout, shown.stdout


ACCEPTED_LOSSES = "sparse_categorical_crossentropy, binary_crossentropy, mean_squared_error"
DECLARED = "KerasBlobs.keras_function, the model of its Keras rows (keras-jax, keras-torch, keras-tensorflow): "


@pytest.mark.parametrize(("command", "change", "message"), [
    ("run", ('loss="sparse_categorical_crossentropy"', 'loss="hinge"'),
     f"{DECLARED}loss is 'hinge'; accepted: {ACCEPTED_LOSSES}"),
    ("run", ('"blobs_keras:build_model"', '"nowhere:build_model"'),
     f"{DECLARED}build is 'nowhere:build_model', but no module nowhere is found (on sys.path, or beside the "
     "workload's file)"),
    ("run", ('"blobs_keras:build_model"', '"blobs_keras:make_model"'),
     f"{DECLARED}build is 'blobs_keras:make_model', but blobs_keras.py defines no make_model at its top level"),
    ("run", ('input="x"', 'input="pixels"'),
     "keras_blobs on keras-torch: its keras_function reads input 'pixels', but the batches hold labels, x: set "
     "KerasFunction(input=..., labels=...) to entries of the data"),
    ("parity", ('input="x"', 'input="pixels", labels="y"'),
     "keras_blobs on keras-torch: its keras_function reads input 'pixels' and labels 'y', but the batches hold "
     "labels, x"),
])
def test_a_wrong_keras_function_exits_2_naming_the_workload_the_rows_and_what_is_expected(tmp_path, command, change,
                                                                                          message):
    if command == "parity" and not {"keras-torch", "keras-jax"} <= set(INSTALLED):
        pytest.skip("parity refuses rows that are not installed before it reads the declaration")
    assert change[0] in WORKLOAD
    write_workload(tmp_path / "models", WORKLOAD.replace(*change))
    frameworks = "keras-torch,keras-jax" if command == "parity" else "keras-torch"
    store = ("--store", "r.sqlite") if command == "run" else ()
    r = bakeoff(command, "--workload", "models/blobs.py:KerasBlobs", "--framework", frameworks, *store,
                cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith(f"bakeoff {command}: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr, r.stderr
    assert not (tmp_path / "r.sqlite").exists() and not (tmp_path / "reports").exists()  # nothing half-written


@pytest.mark.skipif("keras-torch" not in INSTALLED, reason="needs keras-torch: pip install 'bakeoff[keras]' torch")
def test_a_weight_table_that_does_not_fit_fails_the_trial_with_the_table_that_does(tmp_path):
    write_workload(tmp_path / "models", WORKLOAD.replace('"dense_1/bias": (c,)', '"dense_1/bias": (c + 1,)'))
    r = bakeoff("run", "--workload", "models/blobs.py:KerasBlobs", "--framework", "keras-torch", *RUN, cwd=tmp_path)
    assert r.returncode != 0, r.stdout + r.stderr
    [(status, raw)] = sqlite3.connect(tmp_path / "r.sqlite").execute("SELECT status, result FROM trials").fetchall()
    reason = json.loads(raw)["reason"]
    assert status == "failed" and "other shapes for dense_1/bias" in reason, reason
    assert ("the table for the workload's init_weights: {'dense/kernel': (4, 16), 'dense/bias': (16,), "
            "'layer_normalization/gamma': (16,), 'layer_normalization/beta': (16,), 'dense_1/kernel': (16, 3), "
            "'dense_1/bias': (3,)}") in reason, reason


CODE_HASH = """
import sys
from bakeoff.core import identity, registry
from bakeoff.core.spec import RunSpec
print(identity.content(RunSpec(framework="keras-jax", max_steps=1, **registry.workload_fields(sys.argv[1])))
      ["workload"])
"""


def test_the_trial_key_counts_the_keras_functions_file(tmp_path):
    write_workload(tmp_path / "models")

    def code_hash() -> str:
        r = subprocess.run([sys.executable, "-c", CODE_HASH, "models/blobs.py:KerasBlobs"], cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    before = code_hash()
    (tmp_path / "models" / "blobs_keras.py").write_text(KERAS_FUNCTION.replace("Dense(config", "Dense(units=config"))
    assert code_hash() != before  # an edited Keras function is another trial
