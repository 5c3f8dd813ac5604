"""``bakeoff new workload NAME`` through the real CLI: the package it writes runs as written — ``bakeoff parity``
passes on its ports, ``bakeoff run --suite NAME/suite.toml`` stores an ok trial per framework, its own
``test_parity.py`` passes under pytest, its code is ruff-clean under bakeoff's ruff config — and bad input exits 2
naming the value and what is accepted, with nothing written.

What it costs, 2 cores: about 80 s of CPU (1 min 36 s wall beside other work, load 5), nearly all of it in
framework processes, each importing its framework afresh (TensorFlow's import alone takes seconds): parity probes
in torch and jax by file, then in torch, tensorflow and jax through the generated test under pytest; three trials
of 4 steps; a torch and a Keras-on-JAX probe. The sizes are the skeleton's own preset tiny (an MLP 16 -> 32 -> 4,
676 parameters): the cost is the processes, not the model. The bad-input cases start no framework (half a second
each).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.core import registry
from test_own_workload import SRC, bakeoff

NATIVE = ("torch", "tensorflow", "jax", "paddle")
INSTALLED = [fw for fw in NATIVE if registry.installed(fw)]
TWO = pytest.mark.skipif(len(INSTALLED) < 2, reason="parity needs two of torch, tensorflow, jax, paddle")
REFERENCE = "my_task.workload:MyTaskWorkload"  # the names README.md quotes: its commands are these tests'
FILES = ["__init__.py", "workload.py", "torch_model.py", "tf_model.py", "jax_model.py", "paddle_model.py", "suite.toml",
         "test_parity.py", "README.md"]


def _lines(text: str) -> str:
    return " ".join(text.split())


def listing(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its content: what a refused command must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where `bakeoff new workload my_task` wrote my_task/, for torch, tensorflow and jax."""
    folder = tmp_path_factory.mktemp("project")
    r = bakeoff("new", "workload", "my_task", cwd=folder)
    assert r.returncode == 0, r.stdout + r.stderr
    said = _lines(r.stdout)
    assert f"wrote my_task/: {', '.join(FILES)}" in said, said
    assert f"bakeoff parity --workload {REFERENCE} --framework torch,tensorflow,jax,paddle" in said
    return folder


def test_the_package_has_its_files_and_lists_its_presets(project):
    assert sorted(p.name for p in (project / "my_task").iterdir()) == sorted(FILES)
    assert [p.name for p in project.iterdir() if p.name.startswith(".")] == []  # no partial folder left behind
    shown = bakeoff("list", "--presets", "--workload", REFERENCE, cwd=project)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    said = _lines(shown.stdout)
    assert "workload my_task (accuracy, higher is better)" in said, said
    assert "tiny: 676 parameters; target 0.75" in said  # 16·32 + 32 + 32·4 + 4


def test_the_generated_code_is_ruff_clean_under_bakeoffs_config(project):
    ruff = shutil.which("ruff", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if ruff is None:
        pytest.skip("needs ruff")
    root = SRC.parent  # from bakeoff's own folder, as its code is checked
    r = subprocess.run([ruff, "check", "--config", str(root / "pyproject.toml"), str(project / "my_task")], cwd=root,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(not (registry.installed("torch") and registry.installed("jax")), reason="needs torch and jax")
def test_parity_passes_on_the_ports_as_written(project):
    """By file here; the generated test_parity.py (below) runs it by module, in every framework installed."""
    r = bakeoff("parity", "--workload", "my_task/workload.py:MyTaskWorkload", "--framework", "torch,jax",
                "--format", "json", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout, parse_constant=reject)
    assert (report["workload"], report["frameworks"], report["ok"]) == ("my_task", ["torch", "jax"], True)
    checks = {c["check"]: c["ok"] for c in report["checks"] if c["framework"] == "jax"}
    assert {"parameters", "outputs", "gradients", "losses", "weights", "accumulation"} <= set(checks)
    assert all(checks.values()), checks


def reject(constant: str) -> None:
    raise ValueError(f"not JSON: {constant}")


def test_the_suite_runs_each_framework_in_its_production_mode(project):
    r = bakeoff("run", "--suite", "my_task/suite.toml", "--max-steps", "4", "--eval-every", "4", "--repeats", "1",
                "--store", "r.sqlite", "--no-report", cwd=project)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = sqlite3.connect(project / "r.sqlite").execute("SELECT workload, status, result FROM trials").fetchall()
    trials = {}
    for workload, status, raw in rows:
        result = json.loads(raw)
        spec = result["spec"]
        assert (workload, spec["workload_class"], spec["workload_path"]) == ("my_task", REFERENCE, str(project))
        trials[spec["framework"], spec["execution"]] = status
        if status == "ok":
            assert len(result["losses"]) == 4 and all(math.isfinite(x) and x > 0 for x in result["losses"])
    assert trials == {(fw, mode): "ok" if fw in INSTALLED else "unsupported"
                      for fw, mode in (("torch", "eager"), ("tensorflow", "graph"), ("jax", "graph"),
                                       ("paddle", "eager"))}


@TWO
def test_the_generated_parity_test_passes_under_pytest(project):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "my_task/test_parity.py"],
                       cwd=project, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed" in r.stdout, r.stdout  # both run: none skipped


@pytest.mark.skipif(not (registry.installed("torch") and registry.installed("keras-jax")),
                    reason="needs torch, keras and jax")
def test_a_keras_model_file_serves_the_keras_rows_and_agrees(tmp_path):
    r = bakeoff("new", "workload", "keras_task", "--framework", "torch,keras", "--dir", "models/mine", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    package = tmp_path / "models" / "mine" / "keras_task"
    assert sorted(p.name for p in package.glob("*_model.py")) == ["keras_model.py", "torch_model.py"]
    assert "next, from models/mine:" in _lines(r.stdout)
    suite = (package / "suite.toml").read_text()
    assert [line for line in suite.splitlines() if line.startswith("framework")] == [
        'framework = "torch"', 'framework = "keras-jax"', 'framework = "keras-torch"',
        'framework = "keras-tensorflow"']
    parity = bakeoff("parity", "--workload", "keras_task.workload:KerasTaskWorkload", "--framework",
                     "torch,keras-jax", cwd=tmp_path / "models" / "mine")
    assert parity.returncode == 0, parity.stdout + parity.stderr
    assert "all agree: torch, keras-jax within the stated tolerances" in _lines(parity.stdout)


def test_help_says_what_is_written_and_what_to_run_next(tmp_path):
    r = bakeoff("new", "workload", "--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    said = _lines(r.stdout)
    for file in FILES:
        assert f"NAME/{file}" in said, file
    assert f"bakeoff parity --workload {REFERENCE} --framework torch,tensorflow,jax,paddle" in said
    assert "bakeoff run --suite my_task/suite.toml" in said and "pytest my_task/test_parity.py" in said


@pytest.mark.parametrize(("args", "message"), [
    (("My-Task",), "workload name 'My-Task' is not a lowercase Python identifier; accepted: a lowercase Python "
                   "identifier (a letter, then letters, digits or underscores), e.g. my_task, not a known workload's "
                   "name, in a folder where NAME/ does not exist yet"),
    (("3d",), "workload name '3d' is not a lowercase Python identifier"),
    (("class",), "workload name 'class' is a Python keyword"),
    (("mnist",), "workload name 'mnist' is taken: results are stored by name, and mnist is a shipped workload"),
    (("json",), "workload name 'json': `import json` already finds"),
    (("taken",), "taken exists: nothing is overwritten"),
    (("fresh", "--framework", "torch,mxnet"), "--framework torch,mxnet: unknown framework 'mxnet'; accepted: torch, "
                                              "tensorflow, jax, keras, paddle (keras: one keras_model.py for"),
    (("fresh", "--dir", "notes.txt"), "--dir notes.txt: not a folder"),
])
def test_bad_input_exits_2_naming_it_and_writes_nothing(tmp_path, args, message):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.py").write_text("# the user's own\n")
    (tmp_path / "notes.txt").write_text("a file\n")
    before = listing(tmp_path)
    r = bakeoff("new", "workload", *args, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("bakeoff new: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr, r.stderr
    assert listing(tmp_path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "taken"]


FLAX_NAMES = """
import flax.linen as nn, jax, jax.numpy as jnp
from bakeoff.workloads.common.jax_encoder import CanonicalParams

class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.Embed(10, 4, name="embed")(x)
        return nn.Dense(2, name="hidden")(nn.LayerNorm(name="norm1")(h))

canon = CanonicalParams(lambda: Net().init(jax.random.PRNGKey(0), jnp.zeros((1, 3), jnp.int32))["params"])
print(" ".join(sorted(canon.paths)))
try:
    canon.to_params({"embed.embedding": 0, "hidden.kernel": 0, "hidden.bias": 0, "norm1.scale": 0, "norm1.bias": 0})
except ValueError as exc:
    print(exc)
"""


@pytest.mark.skipif(not registry.installed("jax"), reason="needs jax")
def test_the_scaffolds_flax_naming_rule_is_the_one_canonical_weights_follow(tmp_path):
    # The JAX template's docstring states the rule a team names its Flax modules by: the path joined with dots,
    # nn.Embed's table by its module's name alone, and a norm* module's scale/bias as gamma/beta. Names typed from
    # that text; and a weights file written by the naive rule is refused saying which side has what.
    template = (SRC / "bakeoff" / "frameworks" / "jax" / "model.py.tmpl").read_text()
    said = " ".join(template.split())
    assert "``nn.Embed(..., name=\"embed\")`` holds ``embed``, not ``embed.embedding``" in said
    assert "``scale`` and ``bias`` are ``gamma`` and ``beta``" in said
    r = subprocess.run([sys.executable, "-c", FLAX_NAMES], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=300)
    assert r.returncode == 0, r.stderr
    names, error = r.stdout.strip().splitlines()
    assert names == "embed hidden.bias hidden.kernel norm1.beta norm1.gamma"
    assert error == ("canonical weights differ from the model's: the model has embed, norm1.beta, norm1.gamma that "
                     "the weights lack; the weights have embed.embedding, norm1.bias, norm1.scale that the model lacks")
