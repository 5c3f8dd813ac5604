"""A workload from outside bakeoff — by file, by module path, by an installed package's entry point — is found
the way the shipped ones are, runs through the real CLI in a trial process started elsewhere, and bad ones are
refused (exit 2) with a message naming the value and what is accepted."""

from __future__ import annotations

import json
import math
import os
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.core import registry
from bakeoff.plan.suite import adhoc_suite, parse_suite

SRC = Path(registry.__file__).resolve().parents[2]  # the bakeoff under test, ahead of any installed one

WORKLOAD = '''
"""Blobs: points of three Gaussian blobs in 4-d, told apart by a one-hidden-layer MLP."""
import numpy as np

from bakeoff.core.workload import Dataset, Workload


class Blobs(Workload):
    name = "NAME"
    model_class = "BlobsMLP"  # in torch_model.py beside this file
    metric_name = "accuracy"
    serving_inputs = {"x": ("batch", None)}  # what deployment formats take: a batch of 4 features
    presets = ("tiny",)
    preset_configs = {"tiny": {"hidden": 16, "learning_rate": 0.01}}
    targets = {"tiny": 0.9}

    def config(self, preset, spec=None, data=None):
        return {**self.preset_config(preset, spec), "features": 4, "classes": 3}

    def load_data(self, spec):
        rng = np.random.default_rng(7)
        labels = rng.integers(0, 3, 320)
        x = (rng.normal(0, 3, (3, 4))[labels] + rng.normal(0, 1, (320, 4))).astype(np.float32)
        return Dataset(train={"x": x[:256], "labels": labels[:256]}, test={"x": x[256:], "labels": labels[256:]})

    def init_weights(self, config, seed):
        rng = np.random.default_rng([seed, 1])
        f, h, c = config["features"], config["hidden"], config["classes"]
        return {"hidden.kernel": rng.normal(0, f ** -0.5, (f, h)).astype(np.float32),
                "hidden.bias": np.zeros(h, np.float32),
                "out.kernel": rng.normal(0, h ** -0.5, (h, c)).astype(np.float32),
                "out.bias": np.zeros(c, np.float32)}

    def metric(self, outputs, split):
        return float((outputs.argmax(1) == split["labels"]).mean())

    def units_per_example(self, batch):
        return {}
'''

TORCH_MODEL = '''
import numpy as np
import torch
from torch import nn


class BlobsMLP:
    def __init__(self, config, device="cpu"):
        self.config, self.device, self.module = dict(config), torch.device(device), None

    def build(self, weights):
        c = self.config
        self.module = nn.Sequential(nn.Linear(c["features"], c["hidden"]), nn.ReLU(),
                                    nn.Linear(c["hidden"], c["classes"])).to(self.device)
        self.set_weights(weights)

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

    def get_weights(self):  # canonical kernels are (in, out); torch's Linear holds (out, in)
        layers = {"hidden": self.module[0], "out": self.module[2]}
        out = {f"{n}.kernel": l.weight.detach().cpu().numpy().T.copy() for n, l in layers.items()}
        return {**out, **{f"{n}.bias": l.bias.detach().cpu().numpy().copy() for n, l in layers.items()}}

    @torch.no_grad()
    def set_weights(self, weights):
        for name, layer in (("hidden", self.module[0]), ("out", self.module[2])):
            layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(weights[f"{name}.kernel"].T)))
            layer.bias.copy_(torch.from_numpy(np.asarray(weights[f"{name}.bias"])))
'''

TORCH = pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")


def write_workload(folder: Path, name: str = "blobs", module: str = "blobs", package: bool = False) -> Path:
    """The Blobs workload as ``folder/module.py`` with its torch model beside it; returns the workload's file."""
    folder.mkdir(parents=True, exist_ok=True)
    if package:
        (folder / "__init__.py").write_text("")
    (folder / f"{module}.py").write_text(WORKLOAD.replace("NAME", name))
    (folder / "torch_model.py").write_text(TORCH_MODEL)
    return folder / f"{module}.py"


def bakeoff(*args: str, cwd: Path, path: Path | None = None) -> subprocess.CompletedProcess:
    """The real CLI in a fresh process; ``path`` goes on its PYTHONPATH (after bakeoff's source)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (SRC, path) if p)}
    return subprocess.run([sys.executable, "-m", "bakeoff.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


RUN = ("--framework", "torch", "--execution", "eager", "--max-steps", "4", "--eval-every", "4", "--batch-size", "32",
       "--store", "r.sqlite", "--no-report")


def stored(db: Path) -> list[dict]:
    return [{"workload": w, "status": s, **json.loads(raw)}
            for w, s, raw in sqlite3.connect(db).execute("SELECT workload, status, result FROM trials")]


@TORCH
def test_a_workload_file_trains_in_a_trial_process_started_elsewhere(tmp_path):
    file = write_workload(tmp_path / "models")
    work = tmp_path / "work"  # the trial's folder is not the workload's: its spec says where the module is
    work.mkdir()
    r = bakeoff("run", "--workload", "../models/blobs.py:Blobs", *RUN, cwd=work)
    assert r.returncode == 0, r.stdout + r.stderr
    [result] = stored(work / "r.sqlite")
    assert (result["workload"], result["status"]) == ("blobs", "ok"), result.get("reason")
    spec = result["spec"]
    assert (spec["workload"], spec["workload_class"], spec["workload_path"]) == ("blobs", "blobs:Blobs",
                                                                                 str(file.parent))
    assert len(result["losses"]) == 4 and all(math.isfinite(loss) and loss > 0 for loss in result["losses"])
    assert (result["target"], result["training"]["target_source"]) == (0.9, "declared")  # its author's guess
    assert "workload" in spec["content"]  # its code counts in the key, as bakeoff's own does

    again = bakeoff("run", "--workload", str(file), *RUN, cwd=work)  # another spelling of the same workload
    assert "ran 0 trials, skipped 1" in " ".join(again.stdout.split()), again.stdout + again.stderr

    # The team's own code the model imports (an upstream module beside it, a package of the project's): an edit
    # there is another trial too, though neither is the workload's file nor its model's.
    for module, text in (("upstream.py", "WIDTH = 16\n"), ("team/__init__.py", ""), ("team/layers.py", "ACT = 1\n")):
        (file.parent / module).parent.mkdir(exist_ok=True)
        (file.parent / module).write_text(text)
    model = file.parent / "torch_model.py"
    model.write_text("import upstream  # noqa\nfrom team import layers  # noqa\n" + TORCH_MODEL)

    def to_run() -> str:
        r = bakeoff("run", "--workload", str(file), *RUN, "--dry-run", cwd=work)
        assert r.returncode == 0, r.stdout + r.stderr
        return " ".join(r.stdout.split())

    assert "1 trials, 0 already stored, 1 to run" in to_run()  # the model file itself changed
    bakeoff("run", "--workload", str(file), *RUN, cwd=work)
    assert "1 trials, 1 already stored, 0 to run" in to_run()
    (file.parent / "upstream.py").write_text("WIDTH = 32\n")
    assert "1 trials, 0 already stored, 1 to run" in to_run()
    bakeoff("run", "--workload", str(file), *RUN, cwd=work)
    (file.parent / "team" / "layers.py").write_text("ACT = 2\n")
    assert "1 trials, 0 already stored, 1 to run" in to_run()


@TORCH
def test_the_reproduce_lines_of_an_own_workloads_report_run_as_printed(tmp_path):
    # The report's "Reproduce" said `--workload blobs` (unknown outside the run that referenced it) and
    # `--suite SUITE.toml` without its path: each line now runs as printed, from another folder too, and finds
    # the very trials it reproduces already stored.
    file = write_workload(tmp_path / "models")
    suite = tmp_path / "models" / "blobs_suite.toml"
    suite.write_text('name = "blobs_suite"\n[defaults]\nworkload = "blobs.py:Blobs"\nmax_steps = 4\n'
                     'eval_every = 4\n[matrix]\nframework = ["torch"]\nexecution = ["eager"]\n')
    work = tmp_path / "work"
    work.mkdir()
    r = bakeoff("run", "--suite", "../models/blobs_suite.toml", "--store", "r.sqlite", "--out", "report", cwd=work)
    assert r.returncode == 0, r.stdout + r.stderr
    reproduce = (work / "report" / "report.md").read_text().split("### Reproduce", 1)[1].split("###", 1)[0]
    lines = [line for line in reproduce.splitlines() if line.startswith("bakeoff run")]
    assert lines[0].startswith(f"bakeoff run --workload {file}:Blobs --framework torch --execution eager")
    assert lines[1] == f"bakeoff run --suite {suite}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for line in lines:
        again = bakeoff(*shlex.split(line)[1:], "--store", str(work / "r.sqlite"), "--no-report", cwd=elsewhere)
        assert again.returncode == 0, line + again.stdout + again.stderr
        assert "ran 0 trials, skipped 1" in " ".join(again.stdout.split()), line + again.stdout


@TORCH
def test_a_module_path_on_pythonpath_trains_and_lists(tmp_path):
    write_workload(tmp_path / "lib" / "mymodels", name="blobs_mod", package=True)
    r = bakeoff("run", "--workload", "mymodels.blobs:Blobs", *RUN, cwd=tmp_path, path=tmp_path / "lib")
    assert r.returncode == 0, r.stdout + r.stderr
    [result] = stored(tmp_path / "r.sqlite")
    assert (result["workload"], result["status"]) == ("blobs_mod", "ok"), result.get("reason")
    assert result["spec"]["workload_path"] == ""  # on PYTHONPATH, which the trial inherits: nothing to add
    shown = bakeoff("list", "--presets", "--workload", "mymodels.blobs", cwd=tmp_path, path=tmp_path / "lib")
    assert "workload blobs_mod (accuracy, higher is better)" in shown.stdout, shown.stdout + shown.stderr
    assert "tiny: 131 parameters; target 0.9" in shown.stdout  # 4·16 + 16 + 16·3 + 3


def test_a_workloads_own_target_is_listed_as_declared_never_measured(tmp_path):
    """Blobs declares ``targets = {"tiny": 0.9}`` and measured none: `bakeoff list --presets` once called it
    "measured for preset tiny on the shipped data"."""
    file = write_workload(tmp_path / "models")
    shown = bakeoff("list", "--presets", "--workload", f"{file}:Blobs", cwd=tmp_path)
    assert "tiny: 131 parameters; target 0.9 (declared by the workload for preset tiny, not measured)" in \
           " ".join(shown.stdout.split()), shown.stdout + shown.stderr
    assert "measured for preset" not in shown.stdout


CHECK_ELSEWHERE = """
import json, sys
from bakeoff.core import registry
from bakeoff.plan.suite import adhoc_suite, parse_suite
from bakeoff.core.spec import RunSpec
fields = json.loads(sys.argv[1])
spec = RunSpec(framework=sys.argv[2], max_steps=1, **fields)
print(registry.workload(spec).name, registry.models(spec), registry.unsupported(spec) or "supported")
"""


def python(code: str, *args: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_a_module_under_the_current_folder_resolves_in_a_process_started_elsewhere(tmp_path):
    write_workload(tmp_path / "proj" / "mymodels", package=True)
    fields = python("import json; from bakeoff.core import registry; "
                    "print(json.dumps(registry.workload_fields('mymodels.blobs:Blobs')))", cwd=tmp_path / "proj")
    assert json.loads(fields) == {"workload": "blobs", "workload_class": "mymodels.blobs:Blobs",
                                  "workload_path": str(tmp_path / "proj")}
    assert python(CHECK_ELSEWHERE, fields, "torch", cwd=tmp_path) == (
        "blobs {'torch': 'mymodels.torch_model:BlobsMLP'} supported")
    assert python(CHECK_ELSEWHERE, fields, "jax", cwd=tmp_path) == (
        "blobs {'torch': 'mymodels.torch_model:BlobsMLP'} JAX has no blobs implementation; blobs is implemented "
        "in torch")


def test_a_shipped_workload_by_module_path_is_the_shipped_workload():
    assert registry.workload_fields("bakeoff.workloads.mnist.workload:MnistWorkload") == {"workload": "mnist"}
    assert registry.workload_fields("bakeoff.workloads.mnist.workload") == {"workload": "mnist"}  # its one class


def test_the_shipped_workloads_are_found_in_their_folders_with_the_models_they_have():
    native = ["torch", "tensorflow", "jax", "paddle"]
    keras = ["keras-jax", "keras-torch", "keras-tensorflow"]
    expected = {"autoencoder": ("TransformerAutoencoder", native), "mnist": ("MnistCNN", native + keras),
                "speech_ctc": ("SpeechCTC", native), "text_classifier": ("TextClassifier", native + keras)}
    assert registry.workload_names()[:4] == sorted(expected)
    files = {"torch": "torch_model", "tensorflow": "tf_model", "jax": "jax_model", "paddle": "paddle_model",
             **dict.fromkeys(keras, "keras_model")}
    for name, (cls, frameworks) in expected.items():
        assert registry.models(name) == {fw: f"bakeoff.workloads.{name}.{files[fw]}:{cls}" for fw in frameworks}
        assert registry.workload(name).name == name


def test_a_suite_names_a_workload_by_file(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # what resolving adds to it goes with the test
    monkeypatch.chdir(tmp_path)
    file = write_workload(tmp_path / "suite_models", name="suite_blobs", module="suite_blobs")
    suite = parse_suite('[defaults]\nworkload = "suite_models/suite_blobs.py"\nmax_steps = 2\n'
                        '[matrix]\nframework = ["torch", "jax"]\n', "mine.toml")
    assert [(s.workload, s.workload_class, s.workload_path, s.framework.value) for s in suite.specs] == [
        ("suite_blobs", "suite_blobs:Blobs", str(file.parent), fw) for fw in ("torch", "jax")]
    assert registry.unsupported(suite.specs[0]) == ""
    adhoc = adhoc_suite({"workload": "suite_models/suite_blobs.py", "max_steps": 2})  # no --framework: its own
    assert [s.framework.value for s in adhoc.specs] == ["torch", "torch"] and adhoc.name == "adhoc-suite_blobs"
    assert registry.unsupported(suite.specs[1]) == ("JAX has no suite_blobs implementation; suite_blobs is "
                                                    "implemented in torch")


def fake_distribution(site: Path, dist: str, entry_points: str) -> None:
    """What pip leaves for an installed package: its ``*.dist-info`` (read by importlib.metadata, for real)."""
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[bakeoff.workloads]\n{entry_points}\n")


def test_an_installed_packages_entry_point_is_listed_and_found_by_name(tmp_path):
    site = tmp_path / "site"
    write_workload(site / "blobs_pkg", name="blobs_ep", module="workload", package=True)
    fake_distribution(site, "blobs_pkg", "blobs_ep = blobs_pkg.workload:Blobs")
    listed = bakeoff("list", cwd=tmp_path, path=site)
    assert listed.returncode == 0, listed.stderr
    assert ("workload blobs_ep: presets tiny; metric accuracy; implemented in torch (entry point of blobs_pkg)"
            in listed.stdout), listed.stdout
    assert "workload mnist: presets tiny, paper" in listed.stdout  # the shipped ones still there
    if registry.installed("torch"):  # run by name: the trial process finds it as the parent did
        r = bakeoff("run", "--workload", "blobs_ep", *RUN, cwd=tmp_path, path=site)
        assert r.returncode == 0, r.stdout + r.stderr
        [result] = stored(tmp_path / "r.sqlite")
        assert (result["workload"], result["status"], result["spec"]["workload_class"]) == ("blobs_ep", "ok", "")


def test_an_entry_point_taking_a_shipped_name_is_refused(tmp_path):
    site = tmp_path / "site"
    write_workload(site / "rogue", name="mnist", module="workload", package=True)
    fake_distribution(site, "rogue", "mnist = rogue.workload:Blobs")
    r = bakeoff("list", cwd=tmp_path, path=site)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stdout + r.stderr
    assert ("bakeoff list: error: workload name clash: rogue declares entry point mnist = 'rogue.workload:Blobs' "
            "in group bakeoff.workloads, but mnist is a shipped workload's name") in r.stderr


BAD = {
    "syntax.py": "class Broken(:\n",
    "plain.py": "class Thing:\n    pass\n",
    "abstract.py": "from bakeoff.core.workload import Workload\n\nclass Half(Workload):\n    name = 'half'\n",
    "modelless.py": WORKLOAD.replace("NAME", "modelless"),  # no torch_model.py beside it (its own folder)
    "elsewhere.py": WORKLOAD.replace("NAME", "elsewhere").replace(
        'model_class = "BlobsMLP"', 'models = {"jax": "nowhere.jax_model:BlobsMLP"}'),
    "unknown_fw.py": WORKLOAD.replace("NAME", "unknown_fw").replace(
        'model_class = "BlobsMLP"', 'models = {"mxnet": "blobs:Blobs"}'),
}


@pytest.mark.parametrize(("workload", "message"), [
    ("nope_module:Thing", "workload 'nope_module:Thing': module nope_module does not import (ModuleNotFoundError: "
                          "No module named 'nope_module'); accepted: a workload name (`bakeoff list` shows them), "
                          "MODULE:CLASS (a module on sys.path or under the current folder) or FILE.py:CLASS"),
    ("missing.py:Blobs", "workload 'missing.py:Blobs': no Python file missing.py; accepted: a workload name"),
    ("sentiment", "unknown workload 'sentiment'; accepted: autoencoder, mnist, speech_ctc, text_classifier, "
                  "MODULE:CLASS"),
    ("bad/syntax.py:Broken", "workload 'bad/syntax.py:Broken': module syntax does not import (SyntaxError: "),
    ("bad/plain.py:Thing", "workload 'bad/plain.py:Thing' is <class 'plain.Thing'>, not a Workload"),
    ("bad/plain.py", "workload 'bad/plain.py': name the class, plain:CLASS (the Workload classes it defines: none)"),
    ("ok/blobs.py:Nope", "workload 'ok/blobs.py:Nope': module blobs has no Nope (the Workload classes it defines: "
                         "Blobs)"),
    ("bad/abstract.py:Half", "workload 'bad/abstract.py:Half': Half does not implement config, init_weights, "
                             "load_data, metric, units_per_example"),
    ("bad/modelless.py:Blobs", "workload 'bad/modelless.py:Blobs': Blobs declares no model in any framework: set "
                               "model_class to its model's class name in the files beside it (jax_model.py, "
                               "keras_model.py, paddle_model.py, tf_model.py, torch_model.py), or models"),
    ("bad/elsewhere.py:Blobs", "workload 'bad/elsewhere.py:Blobs': Blobs.models['jax'] is "
                               "'nowhere.jax_model:BlobsMLP', but no module nowhere.jax_model is found"),
    ("bad/unknown_fw.py:Blobs", "Blobs.models names unknown framework(s) mxnet; accepted: torch, tensorflow, jax"),
    ("clash/blobs.py:Blobs", "workload 'clash/blobs.py:Blobs' is named 'mnist', the name of the shipped workload "
                             "bakeoff.workloads.mnist.workload:MnistWorkload; results are stored by name"),
])
def test_a_bad_workload_exits_2_naming_it_and_what_is_accepted(tmp_path, workload, message):
    for name, text in BAD.items():
        (tmp_path / "bad").mkdir(exist_ok=True)
        (tmp_path / "bad" / name).write_text(text)
    write_workload(tmp_path / "ok")
    write_workload(tmp_path / "clash", name="mnist")
    r = bakeoff("run", "--workload", workload, *RUN, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith(f"bakeoff run: error: --workload {workload}: "), r.stderr
    assert message in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "r.sqlite").exists()  # nothing half-written


CODE_HASH = """
import sys
from bakeoff.core import identity, registry
from bakeoff.core.spec import RunSpec
spec = RunSpec(framework="torch", max_steps=1, **registry.workload_fields(sys.argv[1]))
print(identity.content(spec)["workload"], spec.key() == RunSpec(**{**spec.to_dict(), "workload_path": "/moved"}).key())
"""


def test_the_key_counts_the_workloads_code_not_its_folder(tmp_path):
    file = write_workload(tmp_path / "models")
    before, same = python(CODE_HASH, str(file), cwd=tmp_path).split()
    assert same == "True"  # where the module is does not count
    (file.parent / "torch_model.py").write_text(TORCH_MODEL + "# tuned\n")
    edited = python(CODE_HASH, str(file), cwd=tmp_path).split()[0]
    assert edited != before  # an edited model is another trial
    (file.parent / "notes.txt").write_text("not code")  # only the workload's and its models' files count
    assert python(CODE_HASH, str(file), cwd=tmp_path).split()[0] == edited


@TORCH
def test_files_a_workload_names_in_code_files_count_and_a_missing_one_is_refused(tmp_path):
    file = write_workload(tmp_path / "models")
    vocab = file.parent / "assets" / "vocab.txt"
    vocab.parent.mkdir()
    vocab.write_text("a\nb\n")
    file.write_text(file.read_text().replace('model_class = "BlobsMLP"',
                                             'model_class = "BlobsMLP"\n    code_files = ("assets",)'))
    before = python(CODE_HASH, str(file), cwd=tmp_path).split()[0]
    vocab.write_text("a\nb\nc\n")
    assert python(CODE_HASH, str(file), cwd=tmp_path).split()[0] != before
    file.write_text(file.read_text().replace('("assets",)', '("vocab.txt",)'))
    r = bakeoff("run", "--workload", str(file), *RUN, "--dry-run", cwd=tmp_path)
    assert r.returncode == 2 and "code_files names 'vocab.txt', which is not there" in " ".join(r.stderr.split())


@TORCH
def test_a_workload_file_is_kept_exported_and_served(tmp_path):
    """The export and inference processes find the workload from the kept model's spec, as a trial does."""
    write_workload(tmp_path / "models")
    work = tmp_path / "work"
    work.mkdir()
    r = bakeoff("deploy", "--workload", "../models/blobs.py:Blobs", "--framework", "torch", "--max-steps", "4",
                "--eval-every", "4", "--store", "r.sqlite", "--formats", "torchscript", cwd=work)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = sqlite3.connect(work / "r.sqlite").execute("SELECT workload, format, status FROM deployments").fetchall()
    assert rows == [("blobs", "torchscript", "ok")]
    assert (work / "reports" / "deploy-blobs" / "report.html").is_file()
