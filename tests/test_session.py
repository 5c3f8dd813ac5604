"""``bakeoff run`` from Python, without the CLI: :func:`bakeoff.run.session.run_suite` runs a suite into a store,
writes its report, resumes, and refuses bad input before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff.core.spec import SpecError, Status
from bakeoff.data import DataError
from bakeoff.plan.suite import parse_suite
from bakeoff.predict.team import load
from bakeoff.run.session import run_suite

SUITE = """
name = "session"
[defaults]
workload = "mnist"
max_steps = 3
eval_every = 3
[matrix]
framework = ["torch"]
execution = ["eager"]
"""


def test_run_suite_runs_stores_reports_and_resumes(tmp_path):
    store, out, said = tmp_path / "r.sqlite", tmp_path / "report", []
    session = run_suite(parse_suite(SUITE), store, report_dir=out, say=said.append, concurrent=True)
    assert [r.status for r in session.results] == [Status.OK] and session.exit_code == 0
    [result] = session.summary.ran
    assert result.run_spec.label() == "torch/eager" and len(result.step_times_s) == 3
    assert (out / "report.html").is_file() and session.report.paths["html"] == out / "report.html"
    assert [heading for heading, _ in session.report.headlines()] == ["verdict"]
    assert session.report.decisions.keys() == {("mnist", "tiny")}

    again = run_suite(parse_suite(SUITE), store, say=said.append, concurrent=True)  # resumes: nothing runs
    assert again.summary.ran == [] and [s.key() for s in again.summary.skipped] == [result.key]
    assert again.report is None and [r.key for r in again.results] == [result.key]
    assert again.unsettled == {} and again.unsupported == []

    # with a team file: nothing runs again; its declared criteria are in the report and the decision
    team = load(Path(__file__).resolve().parents[1] / "examples" / "team.toml")
    declared = run_suite(parse_suite(SUITE), store, report_dir=tmp_path / "declared", team=team, concurrent=True)
    assert declared.summary.ran == []
    md = declared.report.paths["markdown"].read_text()
    assert "declared by product brief v3, section 'Where it runs', 2026-11-18" in md
    assert "| PyTorch | server | not tried | no stored deployment of TorchScript" in md
    decision = declared.report.decisions[("mnist", "tiny")]
    assert decision.given["team_familiarity"] == 0.2 and decision.configs[0].parts["team_familiarity"] == 0.7


def test_a_runs_report_answers_for_the_store_not_only_for_its_own_command(tmp_path):
    # Runs split over commands into one store and one --out, as users split them: the second's report keeps the
    # first's framework (it said "only TensorFlow was run" and dropped PyTorch), and says so in its first line.
    store, out = tmp_path / "r.sqlite", tmp_path / "report"
    first = run_suite(parse_suite(SUITE), store, report_dir=out, concurrent=True)
    assert "answers for the store" not in first.report.paths["markdown"].read_text()  # its own trials are all
    tensorflow = SUITE.replace('framework = ["torch"]', 'framework = ["tensorflow"]').replace(
        'execution = ["eager"]', 'execution = ["production"]')  # TensorFlow's own: graph
    second = run_suite(parse_suite(tensorflow), store, report_dir=out, concurrent=True)
    [ran] = second.summary.ran
    assert ran.run_spec.label() == "tensorflow/graph"
    assert [r.key for r in second.results] == [ran.key]  # the run's own results, as before
    decision = second.report.decisions[("mnist", "tiny")]
    assert {f.label for f in decision.ranking} == {"torch/eager", "tensorflow/graph"}
    md = (out / "report.md").read_text()
    assert (f"This report answers for the store ({store}): the 1 trial of this run and 1 stored earlier of the "
            f"same models and data (`bakeoff report --store {store}` for every trial in it). 2 trials") \
        in " ".join(md.split())


def test_production_stands_for_each_frameworks_own_mode():
    from bakeoff.plan.suite import adhoc_suite

    suite = adhoc_suite({"workload": "text_classifier", "execution": ["production"]})
    assert sorted(s.label() for s in suite.specs) == ["jax/graph", "paddle/eager", "tensorflow/graph", "torch/eager"]
    both = adhoc_suite({"workload": "text_classifier", "execution": ["production", "graph"]})
    assert sorted(s.label() for s in both.specs) == ["jax/graph", "paddle/eager", "paddle/graph", "tensorflow/graph",
                                                     "torch/eager", "torch/graph"]
    with pytest.raises(SpecError, match="unknown execution 'prod'; accepted: eager, graph, xla, production"):
        adhoc_suite({"workload": "text_classifier", "execution": ["prod"]})


def test_a_reports_title_names_the_workload_and_the_data_not_the_adhoc_suite():
    from bakeoff.plan.suite import adhoc_suite

    # Before: "bakeoff: adhoc-text_classifier", on the BBC topics as on the shipped reviews.
    given = {"workload": "text_classifier", "data": {"train": "data/bbc_topics.csv", "test": "data/bbc_test.csv"}}
    assert adhoc_suite(given).title() == "bakeoff: text_classifier on bbc_test.csv, bbc_topics.csv"
    assert adhoc_suite({"workload": "mnist"}).title() == "bakeoff: mnist"
    assert parse_suite(SUITE).title() == "bakeoff: session"


def test_run_suite_refuses_a_damaged_store_before_writing_anything(tmp_path):
    store = tmp_path / "r.sqlite"
    store.write_bytes(b"not a database")
    with pytest.raises(SpecError, match="is not a bakeoff results store"):
        run_suite(parse_suite(SUITE), store, report_dir=tmp_path / "report", concurrent=True)
    assert store.read_bytes() == b"not a database" and not (tmp_path / "report").exists()


def test_run_suite_refuses_bad_data_before_a_store_exists(tmp_path):
    suite = parse_suite(SUITE.replace('workload = "mnist"', 'workload = "mnist"\ndata = {dir = "nowhere"}'))
    with pytest.raises((SpecError, DataError), match="nowhere"):
        run_suite(suite, tmp_path / "r.sqlite", concurrent=True)
    assert not (tmp_path / "r.sqlite").exists()
