"""The everyday commands: run --dry-run, --version, show, compare, report --format json with its CI exit code,
prune; the run's ETA and resumed lines; TensorBoard run folders. Stores are hand-made (fake_results) except in one
tiny real run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import fake_results as fr
from bakeoff.core import registry
from bakeoff.core.result import Training, TrialResult
from bakeoff.core.spec import RunSpec, Status
from bakeoff.results.store import Store

LEAK = "print('LEAKED', sorted(m for m in ('torch', 'tensorflow', 'jax', 'keras', 'paddle') if m in sys.modules))\n"


def bakeoff(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bakeoff.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def in_process(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``bakeoff ARGS`` through bakeoff.cli.main.main in a fresh interpreter that then reports the frameworks loaded."""
    code = (f"import sys\nimport bakeoff.cli.main\ncode = bakeoff.cli.main.main({args!r})\n{LEAK}"
            "print('EXIT', code)\n")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def fill(path: Path, results: list[TrialResult], suite: str = "demo") -> None:
    with Store(path) as store:
        for r in results:
            store.put(r, suite)


def scaled(r: TrialResult, speed: float, cpu: str) -> TrialResult:
    """The same trial on a machine ``speed`` times as fast, with another CPU."""
    if r.status is not Status.OK:
        return r
    raw = r.to_dict()
    raw["step_times_s"] = [t / speed for t in raw["step_times_s"]]
    raw["steady_step_s"] /= speed
    raw["throughput"] = {"examples_per_s": raw["throughput"]["examples_per_s"] * speed}
    raw["environment"] = {**raw["environment"], "cpu": cpu}
    return TrialResult.from_dict(raw)


# --- run --dry-run -----------------------------------------------------------------------------------------------

SUITE = """
name = "mini"
repeats = 2
[defaults]
workload = "text_classifier"
max_steps = 2
[matrix]
framework = ["torch", "tensorflow"]
"""


def test_dry_run_lists_stored_and_to_run_with_an_estimate_and_imports_no_framework(tmp_path):
    (tmp_path / "mini.toml").write_text(SUITE)
    args = ["run", "--suite", "mini.toml", "--store", "r.sqlite", "--dry-run"]
    first = in_process(args, tmp_path)
    assert "LEAKED []" in first.stdout and "EXIT 0" in first.stdout, first.stdout + first.stderr
    assert "4 trials, 0 already stored, 4 to run; no stored results" in first.stdout
    assert not (tmp_path / "r.sqlite").exists() and not (tmp_path / "r").exists()  # nothing written

    from bakeoff.plan.preview import plan
    from bakeoff.plan.suite import load_suite

    planned = plan(load_suite(str(tmp_path / "mini.toml")).specs, tmp_path / "r.sqlite")
    stored = next(p.spec for p in planned if p.spec.framework.value == "torch" and p.spec.seed == 0)
    fill(tmp_path / "r.sqlite", [TrialResult(spec=stored.to_dict(), key=stored.key(), status=Status.OK, wall_s=12.0)],
         "mini")
    again = in_process(args, tmp_path)
    assert "LEAKED []" in again.stdout, again.stderr
    lines = {line.split("key ")[1].split()[0]: line for line in again.stdout.splitlines() if "key " in line}
    assert len(lines) == 4 and "skip (stored: ok)" in lines[stored.key()]
    seed1 = next(p.spec for p in planned if p.spec.framework.value == "torch" and p.spec.seed == 1)
    assert re.search(r"\brun\b.*~12 s$", lines[seed1.key()])  # same configuration, another seed: 12 s expected
    assert "4 trials, 1 already stored, 3 to run; about 12 s from the stored results of the same configurations, " \
           "2 more trials without an estimate" in " ".join(again.stdout.split())  # prose, wrapped at 100 columns
    retry = bakeoff(*args, "--fresh", cwd=tmp_path)
    assert "run  (stored: ok)" in retry.stdout and "4 to run" in retry.stdout


def test_dry_run_counts_the_trials_refused_before_any_process_starts_and_imports_no_framework(tmp_path):
    # Paddle's eager bf16 on this machine's CPU (its record's cpu_missing; --device cpu: whatever GPUs it has)
    args = ["run", "--workload", "mnist", "--framework", "paddle,torch", "--execution", "eager", "--precision",
            "bf16", "--device", "cpu", "--max-steps", "2", "--store", "r.sqlite", "--dry-run"]
    r = in_process(args, tmp_path)
    assert "LEAKED []" in r.stdout and "EXIT 0" in r.stdout, r.stdout + r.stderr
    said = " ".join(r.stdout.split())
    assert "2 trials, 0 already stored, 2 to run (1 of them unsupported: recorded so, no process starts)" in said
    assert "paddle/eager/bf16 seed 0 key " in said and "(unsupported, no process starts: Paddle's dygraph AMP" in said
    assert not (tmp_path / "r.sqlite").exists()


def test_dry_run_checks_the_data_as_a_run_would_and_still_imports_no_framework(tmp_path):
    # Before: "dry run: 4 trials ... to run" on a file without the columns the run then failed on.
    (tmp_path / "mini.toml").write_text(SUITE.replace('max_steps = 2', 'max_steps = 2\ndata = {train = "bbc.csv"}'))
    (tmp_path / "bbc.csv").write_text("article,topic\n" + "".join(f"words {i},sport\n" for i in range(40)))
    r = in_process(["run", "--suite", "mini.toml", "--store", "r.sqlite", "--dry-run"], tmp_path)
    assert "LEAKED []" in r.stdout and "EXIT 2" in r.stdout, r.stdout + r.stderr
    assert "bbc.csv" in r.stderr and "article" in r.stderr and "dry run:" not in r.stdout, r.stderr
    assert not (tmp_path / "r.sqlite").exists()


def test_version_names_the_package_hash_and_imports_no_framework(tmp_path):
    code = ("import sys\nimport bakeoff.cli.main\ntry:\n    bakeoff.cli.main.main(['--version'])\n"
            f"except SystemExit as e:\n    print('EXIT', e.code)\n{LEAK}")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    import bakeoff

    assert re.match(rf"bakeoff {re.escape(bakeoff.__version__)}\+[0-9a-f]{{16}} \(version\+package hash\); ",
                    r.stdout), r.stdout
    assert "Python 3." in r.stdout and "EXIT 0" in r.stdout and "LEAKED []" in r.stdout


# --- show, prune -------------------------------------------------------------------------------------------------

@pytest.fixture
def demo(tmp_path) -> Path:
    fill(tmp_path / "a.sqlite", fr.default_results())
    fill(tmp_path / "a.sqlite", [fr.trial("torch", "eager", seed=7, examples_per_s=650)], "other")
    return tmp_path


def test_show_lists_suites_and_filters_trials(demo):
    r = bakeoff("show", "--store", "a.sqlite", cwd=demo)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^suite demo: 13 trials \(12 ok, 1 failed\) of 5 configurations, \d{4}-", r.stdout, re.M)
    assert re.search(r"^suite other: 1 trials \(1 ok\) of 1 configurations", r.stdout, re.M)
    assert "14 of 14 stored trials shown" in r.stdout
    failed = bakeoff("show", "--store", "a.sqlite", "--framework", "tensorflow", "--status", "failed", cwd=demo)
    [line] = [line for line in failed.stdout.splitlines() if "  demo  " in line]
    assert "tensorflow/xla  seed 0  failed  UnimplementedError: XLA compilation" in line
    assert "1 of 14 stored trials shown" in failed.stdout
    other = bakeoff("show", "--store", "a.sqlite", "--suite", "other", cwd=demo)
    [line] = [line for line in other.stdout.splitlines() if "  other  " in line]
    assert "torch/eager  seed 7 repeat 0  ok  650 ex/s, target not reached, accuracy 0.800, wall" in line
    key = line.split()[0]
    one = bakeoff("show", key[:6], "--store", "a.sqlite", cwd=demo)
    assert one.returncode == 0 and f'"key": "{key}"' in one.stdout and '"step_times_s": "100 samples"' in one.stdout
    bad = bakeoff("show", "--store", "a.sqlite", "--status", "broken", cwd=demo)
    assert bad.returncode == 2 and "unknown status 'broken'; accepted: ok, failed" in bad.stderr
    missing = bakeoff("show", "--store", "nope.sqlite", cwd=demo)
    assert missing.returncode == 2 and "no results store at nope.sqlite" in missing.stderr
    assert not (demo / "nope.sqlite").exists()


def test_prune_lists_until_yes_then_deletes_with_the_trials_files(demo):
    from bakeoff.results.catalog import Filters, select

    r = bakeoff("prune", "--store", "a.sqlite", "--status", "failed", cwd=demo)
    assert r.returncode == 0 and "would delete 1 trial(s)" in r.stdout and "tensorflow/xla" in r.stdout
    with Store(demo / "a.sqlite") as store:
        assert len(store.trials()) == 14  # a dry listing deletes nothing
        [failed] = store.trials(statuses=[Status.FAILED])
    log = demo / "a" / "logs" / f"{failed.key}.log"
    log.parent.mkdir(parents=True)
    log.write_text("trial output")
    (demo / "a" / "checkpoints" / failed.key).mkdir(parents=True)
    r = bakeoff("prune", "--store", "a.sqlite", "--status", "failed", "--yes", cwd=demo)
    assert r.returncode == 0 and "deleted 1 trial(s)" in r.stdout
    assert not log.exists() and not (demo / "a" / "checkpoints" / failed.key).exists()
    with Store(demo / "a.sqlite") as store:
        assert {t.status for t in store.trials()} == {Status.OK} and len(store.trials()) == 13
        assert store.samples(failed.key, "step_time") == []
        assert select(store, Filters(older_than_days=1)) == []  # all finished just now
        later = datetime.now(UTC) + timedelta(days=2)
        assert len(select(store, Filters(suite="other", older_than_days=1), now=later)) == 1
    stale = bakeoff("prune", "--store", "a.sqlite", "--stale", "--suite", "other", cwd=demo)
    assert "would delete 1 trial(s)" in stale.stdout and "[bakeoff " in stale.stdout  # another bakeoff version
    none = bakeoff("prune", "--store", "a.sqlite", cwd=demo)
    assert none.returncode == 2 and "prune needs a filter" in none.stderr


def test_stale_means_another_bakeoff_or_framework_than_installed():
    from bakeoff.core.identity import identify
    from bakeoff.results.catalog import stale_reason

    [spec] = identify([RunSpec(workload="text_classifier", framework="torch", max_steps=2)])

    def row(content: dict):
        with_content = {**spec.to_dict(), "content": content}
        return type("Row", (), {"spec": with_content, "framework": "torch"})()

    assert stale_reason(row(dict(spec.content))) is None
    assert "installed" in stale_reason(row({**dict(spec.content), "bakeoff": "0.0.1+0000"}))
    assert stale_reason(row({**dict(spec.content), "torch": "torch 0.1"})).startswith("torch 0.1, installed ")
    assert "without content hashes" in stale_reason(row({}))


# --- compare -----------------------------------------------------------------------------------------------------

def test_compare_gives_ratios_with_intervals_and_the_environment_that_differs(tmp_path):
    from bakeoff.results.compare import compare_stores

    fill(tmp_path / "a.sqlite", fr.default_results())
    faster = [scaled(r, 1.3 if r.spec["framework"] == "torch" else 1.0, "Intel Xeon 8480")
              for r in fr.default_results()]
    fill(tmp_path / "b.sqlite", faster[:-1])  # B lacks tensorflow/xla
    c = compare_stores(tmp_path / "a.sqlite", tmp_path / "b.sqlite")
    by = {m.label: m for m in c.matched}
    assert set(by) == {"torch/graph", "torch/eager", "tensorflow/graph", "tensorflow/eager"}
    torch = by["torch/graph"].differences["examples_per_s"]
    assert torch.ratio == pytest.approx(1.3) and 1.05 < torch.low < 1.3 < torch.high and torch.better == "a"
    tf = by["tensorflow/graph"].differences["examples_per_s"]
    assert tf.ratio == pytest.approx(1.0) and tf.tie
    assert by["torch/graph"].environment == {"cpu": ("AMD EPYC 7B13", "Intel Xeon 8480")}
    assert by["torch/graph"].runs == (3, 3) and c.only_a == ["text_classifier/tiny tensorflow/xla"]

    r = bakeoff("compare", "a.sqlite", "b.sqlite", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "environment, cpu: A AMD EPYC 7B13; B Intel Xeon 8480" in r.stdout
    assert re.search(r"torch/graph \(runs 3 vs 3\): throughput: B/A 1\.30 \[1\.\d\d, 1\.\d\d\] \(B better\)", r.stdout)
    assert "tensorflow/eager (runs 3 vs 3): throughput: B/A 1.00" in r.stdout
    assert "time to target: target reached by neither" in r.stdout
    data = json.loads(bakeoff("compare", "a.sqlite", "b.sqlite", "--format", "json", cwd=tmp_path).stdout)
    torch_json = next(m for m in data["configurations"] if m["label"] == "torch/graph")
    assert torch_json["examples_per_s"]["ratio_b_over_a"] == pytest.approx(1.3)
    assert torch_json["examples_per_s"]["better"] == "b"


# --- report --format json, --fail-if-slower-than -------------------------------------------------------------------

def test_report_json_has_verdict_scores_and_intervals_per_configuration(demo):
    r = bakeoff("report", "--store", "a.sqlite", "--suite", "demo", "--format", "json", "--out", "rep", cwd=demo)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)  # stdout is the JSON alone; messages went to stderr
    assert data == json.loads((demo / "rep" / "decision.json").read_text())
    assert "decision: rep/decision.json (and on stdout)" in r.stderr
    assert data["format"] == "bakeoff.decisions/1" and data["suite"] == "demo"
    [d] = data["decisions"]
    assert (d["workload"], d["preset"], d["winner"], d["tie"], d["provisional"]) == ("text_classifier", "tiny",
                                                                                      "torch", False, False)
    assert d["verdict"].startswith("PyTorch (graph) wins text_classifier/tiny")
    assert [x["framework"] for x in d["ranking"]] == ["torch", "tensorflow"]
    assert d["ranking"][0]["score"] > d["ranking"][1]["score"]
    h2h = d["head_to_head"]["throughput"]
    assert h2h["ratio"] == pytest.approx(950 / 520) and h2h["low"] < h2h["ratio"] < h2h["high"]
    configs = {c["label"]: c for c in d["configurations"]}
    eps = configs["torch/graph"]["quantities"]["examples_per_s"]
    assert eps["median"] == pytest.approx(950) and eps["low"] < 950 < eps["high"] and eps["unit"] == "examples/s"
    never = configs["tensorflow/eager"]["quantities"]["time_to_target_s"]
    assert never["median"] is None  # never reached: +inf is null in strict JSON
    assert configs["tensorflow/xla"]["runs_ok"] == 0 and configs["tensorflow/xla"]["statuses"] == {"failed": 1}


@pytest.mark.parametrize(("gate", "code", "said"), [
    ("tensorflow=0.5", 0, "tensorflow/graph throughput is 0.55x the fastest (torch/graph; 95% CI 0.5"),
    ("tensorflow=0.6", 1, "FAIL: surely below 0.6"),
    ("torch=0.99", 0, "torch/graph throughput is 1.00x the fastest"),  # the fastest always passes
    ("tensorflow/eager=0.3", 0, "pass: not surely below 0.3"),  # 0.32x, interval reaching below 0.3: noise
    ("mxnet=0.6", 2, "no configuration of 'mxnet' measured throughput; frameworks and configurations: tensorflow,"),
    ("torch", 2, "must look like NAME=RATIO"),
])
def test_fail_if_slower_than_exit_codes(demo, gate, code, said):
    r = bakeoff("report", "--store", "a.sqlite", "--suite", "demo", "--format", "json", "--out", "rep",
                "--fail-if-slower-than", gate, cwd=demo)
    assert r.returncode == code, r.stderr
    assert said in r.stderr
    if code != 2:
        [check] = json.loads(r.stdout)["checks"]
        assert check["failed"] is (code == 1)


# --- progress: ETA, resumed; TensorBoard run folders ---------------------------------------------------------------

def test_progress_estimates_from_stored_then_finished_trials_and_says_resumed(tmp_path):
    from bakeoff.cli.console import RunProgress, console

    a, b, c = (RunSpec(workload="mnist", framework=fw, max_steps=2, seed=s)
               for fw, s in (("torch", 0), ("torch", 1), ("tensorflow", 0)))
    fill(tmp_path / "r.sqlite", [TrialResult(spec=RunSpec(workload="mnist", framework="torch", max_steps=2,
                                                          seed=5).to_dict(), key="x", status=Status.OK, wall_s=30.0)])
    with Store(tmp_path / "r.sqlite") as store, console.capture() as captured:
        with RunProgress(3, store) as progress:
            for spec in (a, b, c):
                progress("queued", spec, None)
            assert progress.eta_text() == "at least 1 min 00 s left"  # tensorflow has no stored time yet
            progress("start", a, None)
            done = TrialResult(spec=a.to_dict(), key=a.key(), status=Status.OK, wall_s=10.0,
                               training=Training(resumed_at_steps=[4]), throughput={"examples_per_s": 100.0})
            progress("done", a, done)
            assert progress.eta_text() == "about 40 s left"  # b: 30 s stored; c: 10 s, from this run
    out = captured.get()
    assert "mnist/tiny torch/eager seed 0: ok (resumed at step 4) 100 ex/s" in out
    assert "[1 run of 3; about 40 s left]" in out


def test_tensorboard_runs_are_named_by_workload_preset_mode_and_seed(tmp_path):
    from bakeoff.run.runner import TENSORBOARD_MARK, tensorboard_runs

    def spec(**kw) -> RunSpec:
        return RunSpec(**{"workload": "text_classifier", "framework": "torch", "max_steps": 2, **kw})

    plain, bf16, b16 = spec(), spec(precision="bf16", grad_accum=2, seed=3), spec(batch_size=16)
    runs = tensorboard_runs([plain, bf16], tmp_path)
    assert runs[plain.key()] == tmp_path / "text_classifier/tiny/torch-eager/seed0"
    assert runs[bf16.key()] == tmp_path / "text_classifier/tiny/torch-eager-bf16-accum2/seed3"
    apart = tensorboard_runs([plain, b16], tmp_path)  # two configurations sharing a label: the field tells apart
    assert apart[plain.key()] == tmp_path / "text_classifier/tiny/torch-eager-batch_size=32/seed0"
    assert apart[b16.key()] == tmp_path / "text_classifier/tiny/torch-eager-batch_size=16/seed0"
    owned = tmp_path / "text_classifier/tiny/torch-eager/seed0"
    owned.mkdir(parents=True)
    (owned / TENSORBOARD_MARK).write_text(json.dumps({"key": "0123456789abcdef"}))  # an earlier trial's folder
    assert tensorboard_runs([plain], tmp_path)[plain.key()] == owned.with_name(f"seed0-{plain.key()[:8]}")
    (owned / TENSORBOARD_MARK).write_text(json.dumps({"key": plain.key()}))  # its own: resumed into the same run
    assert tensorboard_runs([plain], tmp_path)[plain.key()] == owned


@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
def test_a_run_keeps_logs_and_tensorboard_in_the_stores_folder_and_prints_it(tmp_path):
    r = bakeoff("run", "--workload", "text_classifier", "--framework", "torch", "--execution", "eager",
                "--max-steps", "2", "--eval-every", "2", "--no-report", "--store", "res/one.sqlite", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    run = tmp_path / "res" / "one" / "tensorboard" / "text_classifier" / "tiny" / "torch-eager" / "seed0"
    assert list(run.glob("events.out.tfevents.*"))
    key = json.loads((run / "bakeoff-trial.json").read_text())["key"]
    assert (tmp_path / "res" / "one" / "logs" / f"{key}.log").exists()
    assert "TensorBoard: res/one/tensorboard  (tensorboard --logdir res/one/tensorboard)" in r.stdout
    assert re.search(r"torch/eager seed 0: ok .*\[1 run of 1\]", r.stdout)


def test_report_by_suite_name_uses_the_weights_and_scores_recorded_when_it_ran(tmp_path):
    from bakeoff.cli import main as cli
    from bakeoff.results.store import Store
    from fake_results import default_results

    with Store(tmp_path / "r.sqlite") as store:
        for result in default_results():
            store.put(result, "mine")
        store.put_suite("mine", "my.toml", {"team_familiarity": 0.5},
                        {"team_familiarity": {"torch": 1, "tensorflow": 5}})
        assert store.suite_settings("mine")["weights"] == {"team_familiarity": 0.5}
        assert store.suite_settings("other") is None
    assert cli.main(["report", "--store", str(tmp_path / "r.sqlite"), "--suite", "mine",
                     "--out", str(tmp_path / "rep")]) == 0
    weights = (tmp_path / "rep" / "report.md").read_text().split("### Weights", 1)[1]
    assert "| team_familiarity | qualitative |" in weights and "TensorFlow 5, PyTorch 1 | 0.5 |" in weights
