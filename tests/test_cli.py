"""The command line end to end: real trials in subprocesses, failures isolated, resume, bad input."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff import registry

BOTH = pytest.mark.skipif(not (registry.installed("torch") and registry.installed("tensorflow")),
                          reason="needs torch and tensorflow")


def bakeoff(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bakeoff.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def trials(db: Path) -> list[tuple]:
    query = "SELECT label, status, reason, finished_at FROM trials ORDER BY label"
    return sqlite3.connect(db).execute(query).fetchall()


def test_help_is_fast_path_and_imports_no_framework():
    code = ("import sys, contextlib, io\n"
            "import bakeoff.cli as c\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    c.build_parser().print_help()\n"
            "c.main(['list'])\n"
            "print('LEAKED', [m for m in ('torch', 'tensorflow', 'jax', 'keras') if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "LEAKED []" in out
    assert "workload text_classifier: presets tiny, small, paper" in out


@pytest.mark.parametrize(("args", "message"), [
    (["run", "--workload", "sentiment"],
     "unknown workload 'sentiment'; accepted: text_classifier, speech_ctc, autoencoder, mnist"),
    (["run", "--workload", "text_classifier", "--framework", "mxnet"], "accepted: torch, tensorflow, jax"),
    (["run", "--workload", "text_classifier", "--execution", "jit"], "accepted: eager, graph, xla"),
    (["run", "--workload", "text_classifier", "--preset", "huge"], "unknown preset 'huge'.*tiny, small, paper"),
    (["run", "--suite", "nope"], "unknown suite 'nope'; shipped suites: modes, quick"),
    (["run", "--workload", "text_classifier", "--data", "train=missing.csv"], "missing.csv"),
])
def test_bad_input_exits_2_with_accepted_values_and_writes_nothing(tmp_path, args, message):
    r = bakeoff(*args, "--store", "r.sqlite", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert re.search(message, r.stderr), r.stderr
    assert not (tmp_path / "r.sqlite").exists()  # nothing half-written


def test_malformed_suite_names_the_line(tmp_path):
    (tmp_path / "bad.toml").write_text('name = "bad"\n[defaults]\nworkload = "text_classifier"\n'
                                       'max_stepz = 3\n[matrix]\nframework = ["torch"]\n')
    r = bakeoff("run", "--suite", "bad.toml", "--store", "r.sqlite", cwd=tmp_path)
    assert r.returncode == 2
    assert "bad.toml, line 4: unknown field 'max_stepz' in [defaults]" in r.stderr
    (tmp_path / "broken.toml").write_text('name = "x"\n[defaults\n')
    r = bakeoff("run", "--suite", "broken.toml", cwd=tmp_path)
    assert r.returncode == 2 and "not valid TOML" in r.stderr and "line 2" in r.stderr


def test_single_class_data_is_rejected_before_any_trial(tmp_path):
    (tmp_path / "one.csv").write_text("text,label\n" + "".join(f"review number {i},pos\n" for i in range(20)))
    r = bakeoff("run", "--workload", "text_classifier", "--data", "train=one.csv", "--store", "r.sqlite",
                cwd=tmp_path)
    assert r.returncode == 2 and "one.csv" in r.stderr and "class" in r.stderr


SUITE = """
name = "mini"
timeout_s = 300
[defaults]
workload = "text_classifier"
max_steps = 6
eval_every = 3
batch_size = 16
[matrix]
framework = ["torch", "tensorflow", "jax"]
execution = ["eager", "xla"]
[[exclude]]
framework = "tensorflow"
execution = "eager"
"""


@BOTH
def test_run_isolates_failures_stores_everything_and_resumes(tmp_path):
    (tmp_path / "mini.toml").write_text(SUITE)
    r = bakeoff("run", "--suite", "mini.toml", "--store", "r.sqlite", "--out", "rep", cwd=tmp_path)
    assert r.returncode == 1, r.stderr  # not every trial succeeded, and the run said so
    rows = {label: (status, reason) for label, status, reason, _ in trials(tmp_path / "r.sqlite")}
    assert set(rows) == {"torch/eager", "torch/xla", "tensorflow/xla", "jax/eager", "jax/xla"}
    assert rows["torch/eager"][0] == "ok" and rows["tensorflow/xla"][0] == "ok"
    assert rows["torch/xla"][0] == "unsupported" and "no XLA mode" in rows["torch/xla"][1]
    assert rows["jax/eager"][0] == "unsupported"
    db = sqlite3.connect(tmp_path / "r.sqlite")
    steps = db.execute("SELECT t.label, count(*) FROM samples s JOIN trials t USING (key) "
                       "WHERE s.kind = 'step_time' GROUP BY t.label ORDER BY t.label").fetchall()
    assert steps == [("tensorflow/xla", 6), ("torch/eager", 6)]
    evals = db.execute("SELECT step FROM samples WHERE kind = 'eval' ORDER BY key, idx").fetchall()
    assert evals == [(0,), (3,), (6,), (0,), (3,), (6,)]  # a step-0 evaluation starts every curve
    results = {json.loads(raw)["spec"]["framework"]: json.loads(raw)["extras"]
               for (raw,) in db.execute("SELECT result FROM trials WHERE status = 'ok'")}
    assert results["tensorflow"]["graph_builds"] == 1 and results["tensorflow"]["graph_build_steps"] == [1]
    assert results["torch"]["graph_builds"] == 0  # eager: no graphs
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "torch/eager" in html and "data:image/png;base64," in html
    assert "verdict" in r.stdout

    before = trials(tmp_path / "r.sqlite")
    again = bakeoff("run", "--suite", "mini.toml", "--store", "r.sqlite", "--no-report", cwd=tmp_path)
    assert "ran 0 trials, skipped 5" in again.stdout
    assert trials(tmp_path / "r.sqlite") == before  # nothing re-run, nothing lost


CRASHER = """
import os
mode = os.environ.get("BAKEOFF_TEST_CRASH")
if mode:
    import bakeoff.engines.base as base

    def crash(*args, **kwargs):
        if mode == "exit":
            os._exit(3)
        if mode == "kill":
            os.kill(os.getpid(), 9)
        raise MemoryError("simulated: cannot allocate 12 GiB")

    base.train = crash
"""


@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
@pytest.mark.parametrize(("mode", "status", "reason"), [
    ("exit", "failed", "exited with code 3 and wrote no result"),
    ("kill", "failed", "killed by SIGKILL (no evidence of out-of-memory: "),  # a kill -9 is not an OOM
    ("raise", "out_of_memory", "MemoryError: simulated"),
])
def test_crashing_trials_become_results(tmp_path, monkeypatch, mode, status, reason):
    from bakeoff import runner
    from bakeoff.spec import RunSpec
    from bakeoff.store import Store

    (tmp_path / "sitecustomize.py").write_text(CRASHER)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{__import__('os').environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv("BAKEOFF_TEST_CRASH", mode)
    crashing = RunSpec(workload="text_classifier", framework="torch", max_steps=2)
    with Store(tmp_path / "r.sqlite") as store:
        summary = runner.run([crashing], store, "crash", timeout_s=300, log_dir=tmp_path / "logs")
        [result] = summary.ran
        assert result.status.value == status and reason in result.reason
        assert store.statuses() == {summary.specs[0].key(): result.status}  # keyed by content


@BOTH
def test_timeout_is_recorded_and_retry_failed_reruns_it(tmp_path):
    (tmp_path / "s.toml").write_text("""
name = "slow"
timeout_s = 2
[defaults]
workload = "text_classifier"
max_steps = 4
[matrix]
framework = ["tensorflow"]
""")
    r = bakeoff("run", "--suite", "s.toml", "--store", "r.sqlite", "--no-report", cwd=tmp_path)
    assert r.returncode == 1
    [(_, status, reason, _)] = trials(tmp_path / "r.sqlite")
    assert status == "timeout" and "no result after 2 s" in reason
    r = bakeoff("run", "--suite", "s.toml", "--store", "r.sqlite", "--no-report", "--retry-failed",
                "--timeout", "300", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    [(_, status, _, _)] = trials(tmp_path / "r.sqlite")
    assert status == "ok"
