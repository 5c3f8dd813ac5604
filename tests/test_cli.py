"""The command line end to end: real trials in subprocesses, failures isolated, resume, bad input."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.core import registry

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
            "import bakeoff.cli.main as c\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    c.build_parser().print_help()\n"
            "c.main(['list'])\n"
            "heavy = ('torch', 'tensorflow', 'jax', 'keras', 'paddle', 'ray', 'mlflow')\n"
            "print('LEAKED', [m for m in heavy if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "LEAKED []" in out
    assert "workload text_classifier: presets tiny, small, paper" in out


def test_the_trial_options_help_names_each_native_frameworks_compiler_mode_and_strategies():
    # Read off the framework records (a framework added as a folder appears here by itself), so each is asserted
    # whole here: a framework missing from one list shows.
    said = " ".join(subprocess.run([sys.executable, "-m", "bakeoff.cli", "run", "--help"], capture_output=True,
                                   text=True, check=True).stdout.split())
    assert "graph (compiled: torch.compile, tf.function, jax.jit, paddle.jit.to_static), xla (TensorFlow)" in said
    assert ("production: each framework in the mode its users train in (PyTorch eager, TensorFlow graph, JAX graph, "
            "PaddlePaddle eager)") in said
    assert ("data_parallel (one machine, N replicas: DDP / MirroredStrategy / sharded over a device mesh / "
            "paddle.DataParallel)") in said
    assert ("multi_worker (N worker processes: DDP multi-worker / MultiWorkerMirroredStrategy / jax.distributed / "
            "paddle.DataParallel multi-worker), parameter_server (TensorFlow)") in said


@pytest.mark.parametrize(("args", "message"), [
    (["run", "--workload", "sentiment"],
     "unknown workload 'sentiment'; accepted: autoencoder, mnist, speech_ctc, text_classifier, MODULE:CLASS \\(a "
     "module on sys.path or under the current folder\\) or FILE.py:CLASS"),
    (["run", "--workload", "text_classifier", "--framework", "mxnet"], "accepted: torch, tensorflow, jax"),
    (["run", "--workload", "text_classifier", "--execution", "jit"], "accepted: eager, graph, xla"),
    (["run", "--workload", "text_classifier", "--preset", "huge"], "unknown preset 'huge'.*tiny, small, paper"),
    (["run", "--suite", "nope"], "unknown suite 'nope'; shipped suites: distributed, modes, quick"),
    (["run", "--workload", "text_classifier", "--data", "train=missing.csv"], "missing.csv"),
    # every flag checked before any trial, naming the flag, the value and what is accepted
    (["run", "--workload", "mnist", "--batch-size", "sixteen"],
     "--batch-size sixteen: batch_size must be a positive integer or 'auto', got 'sixteen'"),
    (["run", "--workload", "mnist", "--max-steps", "0"], "--max-steps 0: max_steps must be a positive integer, got 0"),
    (["run", "--workload", "mnist", "--max-steps", "four"], "argument --max-steps: invalid int value: 'four'"),
    (["run", "--workload", "mnist", "--max-epochs", "nan"], "--max-epochs nan: max_epochs must be a number above 0"),
    (["run", "--workload", "mnist", "--repeats", "0"], "--repeats 0: repeats must be a positive integer, got 0"),
    (["run", "--workload", "mnist", "--threads", "-1"], "--threads -1: threads must be an integer >= 0, got -1"),
    (["run", "--workload", "mnist", "--device", "tpu"], "--device tpu: unknown device 'tpu'; accepted: auto, cpu, "
                                                        "cuda"),
    (["run", "--workload", "mnist", "--precision", "fp8"], "--precision fp8: unknown precision 'fp8'; accepted: fp32, "
                                                           "bf16, fp16"),
    (["run", "--workload", "mnist", "--memory-cap", "2GiB"], "--memory-cap applies only with --batch-size auto"),
    (["run", "--workload", "mnist", "--batch-size", "auto", "--memory-cap", "lots"],
     "--memory-cap lots: cannot read memory size 'lots'"),
    (["run", "--workload", "mnist", "--timeout", "0"], "--timeout 0: seconds per trial must be above 0"),
    (["run", "--workload", "mnist", "--order-seed", "-1"], "--order-seed -1: the seed of the trial order must be"),
    (["run", "--workload", "mnist", "--set", "dropout"], "--set must look like KEY=VALUE, got 'dropout'"),
    (["run", "--workload", "mnist", "--set", "d_model=128"],
     "unknown config key\\(s\\) 'd_model' for mnist; accepted: filters \\(list of integers\\), kernel_size "
     "\\(integer\\), dropout \\(number\\), learning_rate \\(number\\)"),
    (["run", "--workload", "mnist", "--set", "kernel_size=3.5"],
     "config kernel_size='3.5' for mnist: kernel_size is an integer, like the preset's 3"),
    (["run", "--workload", "text_classifier", "--set", "d_model=66"],
     "config d_model=66 for text_classifier: must be divisible by num_heads 4"),
    (["run", "--workload", "mnist", "--target", "1.5"],
     "target 1.5 is outside the range of mnist's accuracy \\(0 to 1\\)"),
    # with a suite: the flags that cannot override it
    (["run", "--suite", "quick", "--workload", "mnist"], "--workload mnist: a suite names its workloads"),
    (["run", "--suite", "quick", "--target", "0.9"], "--target 0.9: this suite runs several workloads"),
    # ... and those that override it but fit some of its workloads only: refused by the others, before any trial
    (["run", "--suite", "quick", "--data", "seed=1"], "unknown text data option\\(s\\) 'seed'"),
    (["run", "--max-steps", "3", "--set", "d_model=32"], "unknown config key\\(s\\) 'd_model' for mnist"),  # quick
    # a mistyped option: the nearest known one suggested
    (["run", "--workload", "mnist", "--frameworks", "torch"],
     "unrecognized arguments: --frameworks torch\n  --frameworks: did you mean --framework\\?"),
    (["prune", "--suite", "quick", "--dry-run", "--yes"], "--dry-run lists and --yes deletes: give one"),
])
def test_bad_input_exits_2_with_accepted_values_and_writes_nothing(tmp_path, args, message):
    r = bakeoff(*args, "--store", "r.sqlite", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert re.search(message, r.stderr), r.stderr
    assert not (tmp_path / "r.sqlite").exists()  # nothing half-written


@pytest.mark.parametrize(("args", "message"), [
    (["--presets", "--workload", "mnist", "--set", "d_model=32"], "unknown config key\\(s\\) 'd_model' for mnist"),
    (["--presets", "--set", "d_model=32"], "--set and --data need --workload"),
    (["--presets", "--workload", "sentiment"], "unknown workload 'sentiment'"),
    (["--workload", "mnist"], "--workload and --set go with --presets"),
])
def test_bad_list_options_exit_2(tmp_path, args, message):
    r = bakeoff("list", *args, cwd=tmp_path)
    assert r.returncode == 2 and re.search(message, r.stderr), r.stderr


def words(text: str) -> str:
    """Console output with its line wrapping undone."""
    return " ".join(text.split())


def test_list_presets_shows_every_presets_fields_parameters_and_target(tmp_path):
    out = words(bakeoff("list", "--presets", cwd=tmp_path).stdout)
    for workload in registry.workload_names():
        wl = registry.workload(workload)
        assert f"workload {workload} ({wl.metric_name}," in out
        for preset in wl.presets:
            assert f"{preset}: {wl.num_params(wl.config(preset)):,} parameters; target {wl.target(preset):g}" in out
    assert "tiny: 331,201 parameters; target 0.75 (measured for preset tiny on the shipped data)" in out
    assert ("fields (--set KEY=VALUE): vocab_size=4000 seq_len=128 d_model=64 num_heads=4 d_ff=128 num_layers=2 "
            "dropout=0.1 learning_rate=0.001 derived (from the data, or fixed): num_classes=2") in out
    assert "tiny: 5,258 parameters" in out and "filters=8,16 kernel_size=3" in out  # MNIST, Keras' layout
    wider = words(bakeoff("list", "--presets", "--workload", "text_classifier", "--set", "d_model=128",
                          cwd=tmp_path).stdout)
    assert "tiny: 727,681 parameters" in wider and "d_model=128 num_heads=4" in wider
    assert "workload mnist" not in wider


def test_malformed_suite_names_the_line(tmp_path):
    (tmp_path / "bad.toml").write_text('name = "bad"\n[defaults]\nworkload = "text_classifier"\n'
                                       'max_stepz = 3\n[matrix]\nframework = ["torch"]\n')
    r = bakeoff("run", "--suite", "bad.toml", "--store", "r.sqlite", cwd=tmp_path)
    assert r.returncode == 2
    assert "bad.toml, line 4: unknown field 'max_stepz' in [defaults]" in r.stderr
    (tmp_path / "broken.toml").write_text('name = "x"\n[defaults\n')
    r = bakeoff("run", "--suite", "broken.toml", cwd=tmp_path)
    assert r.returncode == 2 and "not valid TOML" in r.stderr and "line 2" in r.stderr
    (tmp_path / "sixteen.toml").write_text('[defaults]\nworkload = "text_classifier"\nframework = "torch"\n'
                                           'max_steps = 3\nbatch_size = "sixteen"\n')
    r = bakeoff("run", "--suite", "sixteen.toml", "--store", "r.sqlite", cwd=tmp_path)
    assert r.returncode == 2 and not (tmp_path / "r.sqlite").exists()
    assert ("sixteen.toml, line 5: [defaults] batch_size must be a positive integer, got 'sixteen'" in r.stderr
            and "Traceback" not in r.stderr), r.stderr


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
[[exclude]]
framework = "jax"
execution = "eager"
"""


@BOTH
def test_run_isolates_failures_stores_everything_and_resumes(tmp_path):
    (tmp_path / "mini.toml").write_text(SUITE)
    r = bakeoff("run", "--suite", "mini.toml", "--store", "r.sqlite", "--out", "rep", cwd=tmp_path)
    # Only unsupported trials did not succeed: results with reasons, not failures, so the run exits 0 and says so
    assert r.returncode == 0, r.stderr
    assert "2 trials recorded as unsupported" in " ".join(r.stdout.split())
    rows = {label: (status, reason) for label, status, reason, _ in trials(tmp_path / "r.sqlite")}
    assert set(rows) == {"torch/eager", "torch/xla", "tensorflow/xla", "jax/xla"}
    assert rows["torch/eager"][0] == "ok" and rows["tensorflow/xla"][0] == "ok"
    assert rows["torch/xla"][0] == "unsupported" and "no XLA mode" in rows["torch/xla"][1]
    assert rows["jax/xla"] == ("unsupported", "jax.jit is XLA compilation: use graph; accepted: graph, eager")
    db = sqlite3.connect(tmp_path / "r.sqlite")
    steps = db.execute("SELECT t.label, count(*) FROM samples s JOIN trials t USING (key) "
                       "WHERE s.kind = 'step_time' GROUP BY t.label ORDER BY t.label").fetchall()
    assert steps == [("tensorflow/xla", 6), ("torch/eager", 6)]
    evals = db.execute("SELECT step FROM samples WHERE kind = 'eval' ORDER BY key, idx").fetchall()
    assert evals == [(0,), (3,), (6,), (0,), (3,), (6,)]  # a step-0 evaluation starts every curve
    results = {json.loads(raw)["spec"]["framework"]: json.loads(raw)["training"]
               for (raw,) in db.execute("SELECT result FROM trials WHERE status = 'ok'")}
    assert results["tensorflow"]["graph_builds"] == 1 and results["tensorflow"]["graph_build_steps"] == [1]
    assert results["torch"]["graph_builds"] == 0  # eager: no graphs
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "torch/eager" in html and "data:image/png;base64," in html
    assert "verdict" in r.stdout

    before = trials(tmp_path / "r.sqlite")
    again = bakeoff("run", "--suite", "mini.toml", "--store", "r.sqlite", "--no-report", cwd=tmp_path)
    assert "ran 0 trials, skipped 4" in again.stdout
    assert trials(tmp_path / "r.sqlite") == before  # nothing re-run, nothing lost


CRASHER = """
import os
mode = os.environ.get("BAKEOFF_TEST_CRASH")
if mode:
    import bakeoff.trial.loop as loop

    def crash(*args, **kwargs):
        if mode == "exit":
            os._exit(3)
        if mode == "kill":
            os.kill(os.getpid(), 9)
        raise MemoryError("simulated: cannot allocate 12 GiB")

    loop.train = crash
"""


@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
@pytest.mark.parametrize(("mode", "status", "reason"), [
    ("exit", "failed", "exited with code 3 and wrote no result"),
    ("kill", "failed", "killed by SIGKILL (no evidence of out-of-memory: "),  # a kill -9 is not an OOM
    ("raise", "out_of_memory", "MemoryError: simulated"),
])
def test_crashing_trials_become_results(tmp_path, monkeypatch, mode, status, reason):
    from bakeoff.core.spec import RunSpec
    from bakeoff.results.store import Store
    from bakeoff.run import runner

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


MINE = """
name = "mine"
[defaults]
workload = "text_classifier"
max_epochs = 2
batch_size = 16
[matrix]
framework = ["torch", "tensorflow"]
execution = ["eager", "graph"]
"""


@pytest.fixture(scope="module")
def overridden(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    """One real trial: a two-framework suite cut down from the command line to one small torch trial."""
    if not registry.installed("torch"):
        pytest.skip("needs torch")
    folder = tmp_path_factory.mktemp("overridden")
    (folder / "mine.toml").write_text(MINE)
    r = bakeoff("run", "--suite", "mine.toml", "--store", "r.sqlite", "--no-report", "--framework", "torch",
                "--execution", "eager", "--max-steps", "2", "--eval-every", "2", "--batch-size", "8",
                "--set", "d_model=32", "--set", "num_heads=2", "--target", "0.6", cwd=folder)
    rows = sqlite3.connect(folder / "r.sqlite").execute("SELECT suite, result FROM trials").fetchall()
    assert r.returncode == 0 and len(rows) == 1, r.stdout + r.stderr  # torch eager only: 1 of the suite's 4
    suite, raw = rows[0]
    return r, {"suite": suite, **json.loads(raw)}


def test_flags_with_a_suite_override_it_and_the_run_says_so(overridden):
    r, result = overridden
    said = " ".join(r.stdout.split())
    assert ("overridden from the command line in every trial: --preset" not in said
            and "overridden from the command line in every trial: --set d_model=32 num_heads=2, --target 0.6, "
                "--framework torch, --execution eager, --batch-size 8, --max-steps 2, --eval-every 2 (stored as "
                f"suite {result['suite']})") in said
    assert result["suite"].startswith("mine+")
    spec = result["spec"]
    assert (spec["framework"], spec["execution"], spec["batch_size"], spec["max_steps"], spec["max_epochs"]) == \
        ("torch", "eager", 8, 2, None)  # the suite's max_epochs went with its budget


def test_set_changes_the_model_that_trains(overridden):
    _, result = overridden
    wl = registry.workload("text_classifier")
    config = result["setup"]["config"]
    assert (config["d_model"], config["num_heads"], config["num_layers"]) == (32, 2, 2)
    assert result["num_params"] == wl.num_params(config) == 157_537  # what the framework counted, and numpy


def test_target_flag_is_the_trials_target(overridden):
    _, result = overridden
    assert result["target"] == 0.6 and result["training"]["target_rule"] == "set by the user"


def test_verdicts_wrap_between_words_on_a_terminal_and_at_100_columns_off_one(monkeypatch):
    """Into a file or a pipe a verdict is wrapped at 100 columns between words, never inside its ratio's interval
    nor a path (rich alone would cut it at 80 columns, or leave it one line of any length); on a terminal it
    wraps at the terminal's width, between words."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    from bakeoff.cli import console as console_module
    from bakeoff.cli.results import say_report
    from bakeoff.report.card import Card

    verdict = ("PyTorch eager is faster than TensorFlow graph on steady throughput: 1.23x (95% interval 1.18x to "
               "1.29x), 3 runs each, a win at the calibrated error rate; " * 3).rstrip("; ")
    written = SimpleNamespace(headlines=lambda: [("text_classifier/tiny", verdict)],
                              card=lambda: Card([], [], "PyTorch: it wins text_classifier/tiny", "throughput", []),
                              paths={"html": "reports/" + "deep/" * 30 + "report.html", "markdown": "report.md"})
    for terminal, width in ((False, 100), (True, 80)):
        out = io.StringIO()
        monkeypatch.setattr(console_module, "console", Console(file=out, width=console_module.UNBOUNDED if not
                                                               terminal else 80, force_terminal=terminal,
                                                               color_system=None, highlight=False))
        say_report(written)
        lines = out.getvalue().splitlines()
        said = lines[:next(i for i, line in enumerate(lines) if line.startswith(("decision", "recommendation")))]
        assert len(said) > 2 and all(len(line) <= width for line in said), said  # 95 to 100: between words
        assert max(map(len, said)) > width - 15, said
        assert " ".join(line.strip() for line in said) == f"text_classifier/tiny: {verdict}"
        assert "(95% interval 1.18x to 1.29x)" in out.getvalue() or terminal  # the interval never split off a pipe
        assert lines[-1].startswith("report: reports/deep/") and lines[-1].endswith("(Markdown: report.md)")
        assert "1.23x (95% interval" in out.getvalue().replace("\n", " ")
