"""The examples kept outside the package (``examples/``), through the real CLI: their ports agree under ``bakeoff
parity``, their suites train in every framework and the report names them, and deliberately broken ports — a
missing transpose, a BatchNorm momentum not converted, a different LayerNorm epsilon, dropout left on in
evaluation, a GRU's gates not reordered — each make ``bakeoff parity`` exit 1 naming the tensor or the check
that shows the bug.

Why it costs what it costs (2 minutes on 2 cores, measured: 120 s at a load average near 1, 200 s at 3-5): ``bakeoff
parity`` starts one process per framework (each imports its framework and runs 6 steps, 6 accumulated steps and the
gradients, eagerly) and runs them two at a time, 10-35 s a command; the five broken ports take three commands, not
five, because each command's reference is a correct port and every other framework in it carries its own bug, read
from that framework's rows of ``--format json``. The trials (30-80 s) are 20 steps of each framework's trial in the tiny
presets, five processes, TensorFlow's and JAX's compiling their steps. Each test works on a copy of ``examples/`` in
its temporary folder, whose paths the suites name relative to the current folder, as they are in the repository.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from bakeoff.core import registry
from test_own_workload import bakeoff

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GRU = "examples/sentiment_gru/workload.py:SentimentGRU"
CNN = "examples/residual_cnn/workload.py:ResidualCNN"
ALL = ("torch", "tensorflow", "jax")

pytestmark = pytest.mark.slow


def installed(*frameworks: str) -> pytest.MarkDecorator:
    missing = [f for f in frameworks if not registry.installed(f)]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}")


def copy_examples(folder: Path) -> Path:
    shutil.copytree(EXAMPLES, folder / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def patch(file: Path, old: str, new: str) -> None:
    """Replace the one line of ``file`` that holds ``old``: a port made wrong in one place."""
    text = file.read_text()
    assert text.count(old) == 1, f"{old!r} is not once in {file}"
    file.write_text(text.replace(old, new))


def parity(workload: str, frameworks: tuple[str, ...], cwd: Path) -> tuple[int, dict]:
    r = bakeoff("parity", "--workload", workload, "--framework", ",".join(frameworks), "--format", "json", cwd=cwd)
    assert r.returncode in (0, 1) and r.stdout.startswith("{"), r.stdout + r.stderr
    return r.returncode, json.loads(r.stdout)


def rows(report: dict, framework: str) -> dict[str, dict]:
    """One framework's checks by name."""
    return {c["check"]: c for c in report["checks"] if c["framework"] == framework}


def failing(check: dict) -> list[str]:
    return [f["item"] for f in check["findings"] if not f["ok"]]


@installed("torch", "tensorflow")
def test_the_gru_ports_agree(tmp_path):
    frameworks = tuple(f for f in ALL if registry.installed(f))
    code, report = parity(GRU, frameworks, copy_examples(tmp_path))
    assert code == 0 and report["ok"], report["first_disagreement"] or report["failed_runs"]
    for framework in frameworks:
        checks = rows(report, framework)
        assert checks["parameters"]["findings"][0]["item"] == "count" and checks["parameters"]["ok"]
        # dropout 0.2 in the preset: built with it, each port's evaluation is the same as without
        assert [f["item"] for f in checks["evaluation"]["findings"]] == [
            "outputs with dropout 0.2 (evaluation mode)", "outputs with dropout 0.2 (evaluation mode), asked again"]
        if framework != "torch":
            grads = {f["item"] for f in checks["gradients"]["findings"]}
            assert {"gru.kernel", "gru.recurrent_kernel", "gru.bias", "dense.kernel"} <= grads
            assert checks["losses"]["ok"] and checks["weights"]["ok"]


@installed("torch", "tensorflow")
def test_the_batchnorm_ports_agree_running_statistics_included(tmp_path):
    code, report = parity(CNN, ("torch", "tensorflow"), copy_examples(tmp_path))
    assert code == 0 and report["ok"], report["first_disagreement"] or report["failed_runs"]
    checks = rows(report, "tensorflow")
    assert "evaluation" not in checks  # no dropout in this model
    assert checks["parameters"]["findings"][0]["max_abs"] == 0  # 4,162: the running statistics are not counted
    weights = {f["item"]: f for f in checks["weights"]["findings"]}
    assert weights["stem.bn.moving_mean"]["ok"] and weights["block.bn2.moving_variance"]["ok"]
    assert "stem.bn.moving_mean" not in {f["item"] for f in checks["gradients"]["findings"]}
    assert checks["accumulation"]["skipped"].startswith("not exact with BatchNorm")
    for framework in ("torch", "tensorflow"):
        roundtrip = {f["item"] for f in rows(report, framework)["parameters"]["findings"]}
        assert "block.bn1.moving_variance" in roundtrip  # read back exactly, as every weight is


# (workload, frameworks: a correct reference first, {framework: (its model file, the line, the bug)})
BROKEN = {
    "gru, transpose and dropout": (GRU, ("jax", "torch", "tensorflow"), {
        # the table's row for the square dense kernel without its transpose: shapes fit, set and get agree
        "torch": ("torch_model.py", '"dense.kernel": ("dense.weight", layouts.DENSE)',
                  '"dense.kernel": ("dense.weight", layouts.AS_IS)'),
        "tensorflow": ("tf_model.py", "self.drop(pooled, training=training)", "self.drop(pooled, training=True)"),
    }),
    "gru, gates and epsilon": (GRU, ("jax", "torch", "tensorflow"), {
        # the weights set without reordering Keras' (z, r, n) gates into PyTorch's (r, z, n): read back, they are
        "torch": ("torch_model.py",
                  'gru = layouts.gru_to_torch(weights["gru.kernel"], weights["gru.recurrent_kernel"], '
                  'weights["gru.bias"])',
                  'gru = (weights["gru.kernel"].T, weights["gru.recurrent_kernel"].T, *weights["gru.bias"])'),
        "tensorflow": ("tf_model.py", 'keras.layers.LayerNormalization(epsilon=cfg["layer_norm_eps"])',
                       "keras.layers.LayerNormalization()"),  # Keras' default, 1e-3
    }),
    "batchnorm momentum": (CNN, ("tensorflow", "torch"), {
        "torch": ("torch_model.py", 'momentum = layouts.torch_bn_momentum(cfg["bn_momentum"])',
                  'momentum = cfg["bn_momentum"]'),  # Keras' 0.99 given to PyTorch, whose 0.99 weighs the new batch
    }),
}

# What each broken framework's rows say: its first failing check, and the items failing there.
NAMED = {
    "gru, transpose and dropout": {"torch": ("outputs", ["outputs (initial weights)", "outputs (perturbed weights)"]),
                                   "tensorflow": ("evaluation", ["outputs with dropout 0.2 (evaluation mode)",
                                                                 "outputs with dropout 0.2 (evaluation mode), "
                                                                 "asked again"])},
    "gru, gates and epsilon": {"torch": ("parameters", ["gru.bias", "gru.kernel", "gru.recurrent_kernel"]),
                               "tensorflow": ("outputs", ["outputs (initial weights)",
                                                          "outputs (perturbed weights)"])},
    "batchnorm momentum": {"torch": ("weights", ["stem.bn.moving_mean", "stem.bn.moving_variance",
                                                 "block.bn1.moving_mean", "block.bn1.moving_variance",
                                                 "block.bn2.moving_mean", "block.bn2.moving_variance"])},
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_port_fails_parity_naming_what_shows_it(tmp_path, case):
    workload, frameworks, bugs = BROKEN[case]
    missing = [f for f in frameworks if not registry.installed(f)]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    folder = copy_examples(tmp_path) / Path(workload).parent
    for model, old, new in bugs.values():
        patch(folder / model, old, new)
    code, report = parity(workload, frameworks, tmp_path)
    assert code == 1 and not report["ok"] and not report["failed_runs"], report["failed_runs"]
    assert report["reference"] == frameworks[0] and all(c["ok"] for c in rows(report, frameworks[0]).values())
    for framework, (check, items) in NAMED[case].items():
        checks = rows(report, framework)
        first = next(name for name, row in checks.items() if not row["ok"])
        assert (first, failing(checks[first])) == (check, items), checks[first]
    # and parity's own summary line: the first disagreement of all, in framework order
    first, (check, items) = report["first_disagreement"], NAMED[case][frameworks[1]]
    assert (first["framework"], first["check"], first["item"]) == (frameworks[1], check, items[0])


def stored(db: Path) -> list[tuple[str, str, str]]:
    return sorted(sqlite3.connect(db).execute("SELECT workload, framework, status FROM trials"))


@installed("torch", "tensorflow")
def test_the_examples_train_in_each_framework_and_their_reports_name_them(tmp_path):
    copy_examples(tmp_path)
    store = ("--store", "r.sqlite")
    # the GRU's suite, made a run of seconds: 20 steps of PyTorch eager, TensorFlow graph, JAX jit, one seed each
    r = bakeoff("run", "--suite", "examples/sentiment_gru/suite.toml", "--max-steps", "20", "--eval-every", "20",
                "--repeats", "1", *store, "--out", "gru-report", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    # the residual CNN ad hoc, as its README says, writing its report
    r = bakeoff("run", "--workload", CNN, "--framework", "torch,tensorflow", "--execution", "eager",
                "--max-steps", "20", "--eval-every", "20", *store, "--out", "cnn-report", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    gru = [f for f in ALL if registry.installed(f)]
    assert stored(tmp_path / "r.sqlite") == sorted(
        [("sentiment_gru", f, "ok") for f in gru] + [("residual_cnn", f, "ok") for f in ("torch", "tensorflow")])
    gru_report = (tmp_path / "gru-report" / "report.md").read_text()
    assert "sentiment_gru" in gru_report and "residual_cnn" not in gru_report
    assert "residual_cnn" in (tmp_path / "cnn-report" / "report.md").read_text()
    r = bakeoff("report", *store, "--out", "report", cwd=tmp_path)  # every trial in the store
    assert r.returncode == 0, r.stdout + r.stderr
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "sentiment_gru" in markdown and "residual_cnn" in markdown
    planned = bakeoff("run", "--suite", "examples/residual_cnn/suite.toml", "--dry-run", *store, cwd=tmp_path)
    assert planned.returncode == 0 and "residual_cnn: 6 trials" in planned.stdout, planned.stdout + planned.stderr
