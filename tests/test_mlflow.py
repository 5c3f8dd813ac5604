"""``bakeoff run --mlflow`` (issue #30, item 4): trials logged to a real local MLflow store and read back with
MLflow's own client; an unreachable URI refused before any trial runs.

Costs: the round trip logs hand-made results (:mod:`fake_results`, no framework) into a file store in a temporary
folder, about 2 s (importing MLflow is most of it); the two refusals start one CLI process each (about 3 s each);
the README's command is a real PyTorch trial of 8 MNIST steps through the CLI (about 20-30 s on 2 cores), marked slow.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.analysis.quantities import QUANTITIES
from bakeoff.core import registry
from bakeoff.core.spec import Status
from bakeoff.report.write import write_report
from bakeoff.results import mlflow_log
from fake_results import default_results, readme_command

pytest.importorskip("mlflow", reason="needs the mlflow extra: pip install 'bakeoff[mlflow]'")


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _trial_runs(client, experiment: str) -> list:
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id], filter_string="tags.`bakeoff.kind` = 'trial'")


@pytest.fixture(autouse=True)
def _mlflow_environment(monkeypatch):
    """The variables :func:`mlflow_log.connect` sets for its process, restored after each test."""
    for name in ("MLFLOW_ALLOW_FILE_STORE", "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)


def test_every_trial_round_trips_through_a_real_local_store(tmp_path):
    results = default_results()  # 4 configurations x 3 repeats, one failed trial
    written = write_report(results, tmp_path / "report", None, None, "t")
    tracker = mlflow_log.connect(None, tmp_path / "results" / "bakeoff.sqlite", "quick")
    assert tracker.uri == (tmp_path / "results" / "mlruns").resolve().as_uri()
    logged = tracker.log(results, "quick", written.paths)
    assert len(logged.trial_run_ids) == len(results) and logged.already_logged == []

    client = _client(tracker.uri)  # a new client on the same URI: what a user's MLflow sees
    runs = {r.data.tags["bakeoff.key"]: r for r in _trial_runs(client, "bakeoff/quick")}
    assert len(runs) == len(results)
    for result in results:
        run = runs[result.key]
        spec = result.spec
        assert run.data.params == mlflow_log.params_of(result)
        assert run.data.params["framework"] == spec["framework"] and run.data.params["seed"] == str(spec["seed"])
        assert run.data.tags["mlflow.parentRunId"] == logged.parent_run_id
        assert run.data.tags["bakeoff.status"] == result.status.value
        if result.status is Status.OK:
            assert run.info.status == "FINISHED"
            assert run.data.metrics["examples_per_s"] == pytest.approx(QUANTITIES["examples_per_s"].get(result, None))
            assert run.data.metrics["first_step_s"] == pytest.approx(result.first_step_s)
            assert run.data.metrics["memory_increment_bytes"] == result.memory_increment_bytes
            assert run.data.metrics["final_metric"] == pytest.approx(result.final_metric)
            history = client.get_metric_history(run.info.run_id, "loss")
            assert [m.step for m in sorted(history, key=lambda m: m.step)] == list(range(1, len(result.losses) + 1))
            assert sorted(history, key=lambda m: m.step)[-1].value == pytest.approx(result.losses[-1])
        else:
            assert run.info.status == "FAILED" and "XLA compilation" in run.data.tags["bakeoff.reason"]
            assert "examples_per_s" not in run.data.metrics and run.data.tags["missing.all"].startswith(
                "the trial did not succeed (failed)")
    never = next(r for r in results if r.status is Status.OK and r.time_to_target_s is None)
    assert runs[never.key].data.tags["missing.time_to_target_s"] == f"the target {never.target:g} was not reached"

    parent = client.get_run(logged.parent_run_id)
    assert parent.data.tags["bakeoff.kind"] == "suite"
    assert parent.data.tags["bakeoff.trials_logged"] == str(len(results))
    names = sorted(Path(a.path).name for a in client.list_artifacts(logged.parent_run_id, "report"))
    assert names == sorted(p.name for p in written.paths.values())
    copy = client.download_artifacts(logged.parent_run_id, "report/report.html", str(tmp_path / "back"))
    assert Path(copy).read_bytes() == written.paths["html"].read_bytes()

    again = mlflow_log.connect(None, tmp_path / "results" / "bakeoff.sqlite", "quick").log(results, "quick", None)
    assert again.trial_run_ids == [] and sorted(again.already_logged) == sorted(r.key for r in results)
    assert len(_trial_runs(client, "bakeoff/quick")) == len(results)  # nothing logged twice


def _cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bakeoff.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize(("uri", "says"), [
    ("http://127.0.0.1:9", "cannot reach the MLflow tracking store at http://127.0.0.1:9: "),
    ("/proc/no/such/store", "cannot reach the MLflow tracking store at file:///proc/no/such/store: "),
])
def test_an_unreachable_uri_is_refused_before_any_trial_runs(tmp_path, uri, says):
    r = _cli("run", "--workload", "mnist", "--framework", "torch", "--max-steps", "2", "--store", "s.sqlite",
             "--mlflow", uri, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr and "nothing was run" in r.stderr
    assert list(tmp_path.iterdir()) == []  # no store, no report: nothing ran


@pytest.mark.slow
@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
def test_the_readme_mlflow_command_logs_a_real_trial(tmp_path, monkeypatch):
    """The README's `bakeoff run ... --mlflow` command as written: one real PyTorch trial (about 20-30 s)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # reading a file store, as the README says
    r = _cli(*readme_command("run", "--mlflow"), cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mlflow: 1 trial logged to file://" in r.stdout
    client = _client((tmp_path / "results" / "mlruns").as_uri())
    [experiment] = [e.name for e in client.search_experiments() if e.name.startswith(mlflow_log.EXPERIMENT_PREFIX)]
    [run] = _trial_runs(client, experiment)
    assert run.data.params["workload"] == "mnist" and run.data.params["max_steps"] == "8"
    assert run.data.metrics["examples_per_s"] > 0 and run.data.metrics["steady_step_s"] > 0
    assert len(client.get_metric_history(run.info.run_id, "step_time_s")) == 8
    parent = run.data.tags["mlflow.parentRunId"]
    assert "report/report.html" in [a.path for a in client.list_artifacts(parent, "report")]
    shutil.rmtree(tmp_path / "results")
