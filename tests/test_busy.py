"""Runs measured on a busy machine (other processes used more than a quarter of a trial's cores during its steady
steps): a verdict resting on one is never robust, says so and how to measure again, and the card marks it; a
``--retry-busy`` that is busy again keeps the quieter of the two measurements and stores both."""

from __future__ import annotations

import io
from collections.abc import Iterable

from rich.console import Console

from bakeoff.analysis.decide import decide, decide_each
from bakeoff.analysis.stats import summarise_groups
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec, Status
from bakeoff.report import card
from bakeoff.results.ci import decision_dict
from bakeoff.results.store import Store
from bakeoff.run import runner
from bakeoff.run.executors.executor import Done, Executor, Started, TrialJob
from fake_results import default_results

COMPARED = ("torch/graph", "tensorflow/graph")  # the default bake-off's leader and runner-up


def busy(result: TrialResult, share: float, cores: int = 16) -> TrialResult:
    """``result`` as if other processes had used ``share`` of its cores during its steady steps (what
    :class:`bakeoff.measure.environment.CpuSharing` records)."""
    other = share * cores
    result.environment["cpu_sharing"] = {"cores": cores, "cores_busy": cores * 1.0, "own_cores": cores - other,
                                         "other_cores": other, "other_share": share, "seconds": 3.0}
    return result


def leader_busy(share: float = 0.7) -> list[TrialResult]:
    """The default bake-off (PyTorch (graph) wins, robust: it leads in 99.9%) with every PyTorch (graph) run busy."""
    return [busy(r, share) if r.run_spec.label() == "torch/graph" else r for r in default_results()]


def test_the_default_verdict_is_robust_when_no_run_was_busy():
    """The baseline the tests below change: quiet runs, a robust win, nothing marked."""
    d = decide(summarise_groups(default_results()))
    assert d.winner == "torch" and d.robust and d.busy == (0, 0)
    built = card.build({(d.workload, d.preset): d}, summarise_groups(default_results()))
    assert built.rows[0].standing == "wins" and not any("§" in line for line in built.legend)


def test_a_win_resting_on_busy_runs_is_never_robust_and_names_them():
    d = decide(summarise_groups(leader_busy()))
    assert d.winner == "torch" and d.win_share["torch"] > 0.99  # the draws alone would call it robust
    assert not d.robust and d.busy == (3, 0)
    assert ("; not robust: 3 of 3 PyTorch (graph) runs were measured while other processes used 70% of its cores "
            "(§, more than 25%: their timings are suspect) — `bakeoff run --retry-busy` measures them again; it "
            "leads in 99.9% (TensorFlow 0.1%) of 2,000 draws") in d.verdict
    assert d.verdict.count("--retry-busy") == 1  # named once: the caveat is not repeated after the robust clause
    assert any(c.startswith("3 of 3 PyTorch (graph) runs") for c in d.caveats)  # still a caveat (JSON, report)


def test_both_sides_busy_are_both_named():
    results = [busy(r, 0.7 if r.run_spec.label() == "torch/graph" else 0.4) if r.run_spec.label() in COMPARED
               and r.run_spec.repeat < (3 if r.run_spec.label() == "torch/graph" else 1) else r
               for r in default_results()]
    d = decide(summarise_groups(results))
    assert not d.robust and d.busy == (3, 1)
    assert ("not robust: 3 of 3 PyTorch (graph) runs were measured while other processes used 70% of its cores and "
            "1 of 3 TensorFlow (graph) runs while other processes used 40% of its cores (§") in d.verdict


def test_a_busy_run_of_a_configuration_not_compared_leaves_the_verdict_robust():
    """The rule is about the two configurations the verdict compares: a busy TensorFlow (eager) run is marked in
    its own cells, not on the verdict."""
    results = [busy(r, 0.7) if r.run_spec.label() == "tensorflow/eager" else r for r in default_results()]
    d = decide(summarise_groups(results))
    assert d.robust and d.busy == (0, 0) and "§" not in d.verdict


def test_the_card_marks_the_verdict_and_the_timings_resting_on_busy_runs():
    summaries = summarise_groups(leader_busy())
    decided = decide_each(summaries)
    built = card.build(decided, summaries)
    assert built.criteria == ["throughput", "time_to_target", "first_step", "memory", "quality"]
    leader, runner = built.rows[0], built.rows[1]
    assert leader.standing == "wins, not robust §"
    # timings rest on the busy runs; memory and quality do not (other work does not skew them)
    assert [c.text for c in leader.cells] == ["950 §", "2.1 §", "1.2 §", "140", "0.8"]
    assert [c.text.endswith(" §") for c in runner.cells] == [True, True, True, False, False]
    assert runner.cells[0].text == "worse 0.55x (0.53–0.57x) §" and runner.cells[0].outcome == "worse"
    assert built.legend[-1].startswith("§: rests on runs measured while other processes used more than 25% of their "
                                       "cores during the steady steps — a verdict marked so is never robust")
    assert "`bakeoff run --retry-busy` measures those runs again and keeps the quieter measurement" in built.legend[-1]
    assert "(not robust: see its verdict)" in built.recommendation


def test_the_console_card_keeps_the_mark_with_the_ratio_and_prints_its_legend(monkeypatch):
    from bakeoff.cli import console as console_module

    summaries = summarise_groups(leader_busy())
    built = card.build(decide_each(summaries), summaries)
    for terminal in (False, True):
        out = io.StringIO()
        monkeypatch.setattr(console_module, "console", Console(file=out, width=100, force_terminal=terminal,
                                                               color_system=None, highlight=False))
        console_module.print_card(built)
        text = out.getvalue()
        assert "§: rests on runs measured while other processes used more than 25%" in text
        # on a terminal and off one alike: the mark beside the ratio, the interval on the next line
        assert "text_classifier/tiny: PyTorch (graph) wins, not robust §" in text
        row = next(line for line in text.splitlines() if "0.55x §" in line)
        assert "0.53–0.57" in text.splitlines()[text.splitlines().index(row) + 1]


def test_the_json_counts_busy_runs_per_compared_side():
    summaries = summarise_groups(leader_busy())
    d = decide(summaries)
    data = decision_dict(d, summaries)
    assert data["robust"] is False and data["runs"] == [3, 3] and data["busy_runs"] == [3, 0]
    assert {c["label"]: c["runs_busy"] for c in data["configurations"]} == {
        "torch/graph": 3, "torch/eager": 0, "tensorflow/graph": 0, "tensorflow/eager": 0, "tensorflow/xla": 0}


def test_the_report_says_why_the_verdict_is_not_robust(tmp_path):
    from bakeoff.report.render import render_report

    markdown = render_report(leader_busy(), tmp_path)["markdown"].read_text()
    assert ("The verdict is not robust §: 3 of the leader's and 0 of the runner-up's runs were measured while other "
            "processes used more than 25% of their cores") in markdown
    assert "wins, not robust §" in markdown


# --- --retry-busy keeps the quieter measurement ------------------------------------------------------------------

class Measures(Executor):
    """Hands back, for every job, a successful result measured at ``examples_per_s`` while other processes used
    ``share`` of its 16 cores (no framework, no process)."""

    name = "measures"

    def __init__(self, examples_per_s: float, share: float) -> None:
        self.examples_per_s, self.share, self.ran = examples_per_s, share, 0

    def run(self, jobs: Iterable[TrialJob], started: Started, done: Done) -> None:
        for job in jobs:
            started(job)
            spec, self.ran = job.spec, self.ran + 1
            done(job, busy(TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.OK,
                                       throughput={"examples_per_s": self.examples_per_s}), self.share))


def test_retry_busy_keeps_the_quieter_measurement_and_stores_both(tmp_path):
    """The issue's case: a busy run measured again was busy again (1,002 -> 237 ex/s) and the worse figure replaced
    the better. Now the quieter stays where analysis reads it, the other is stored beside it, and the run says
    that the machine was still busy."""
    from bakeoff.cli.console import describe
    from bakeoff.report.what_ran import retries_text

    spec = [RunSpec(workload="mnist", framework="torch", max_steps=2)]
    said: list[str] = []

    def progress(event: str, spec: RunSpec, result: TrialResult | None) -> None:
        if event == "done" and result is not None:
            said.append(describe(result))

    with Store(tmp_path / "r.sqlite") as store:
        runner.run(spec, store, "s", executor=Measures(1002, 0.70))
        (key,) = store.other_work()
        skipped = Measures(237, 0.81)
        runner.run(spec, store, "s", executor=skipped)  # without --retry-busy a stored trial is not run again
        assert skipped.ran == 0
        runner.run(spec, store, "s", retry_busy=True, executor=Measures(237, 0.81), progress=progress)
        (kept,) = store.results()
        (alternate,) = store.alternates()
    assert kept.throughput["examples_per_s"] == 1002 and alternate.throughput["examples_per_s"] == 237
    assert alternate.key == kept.key == key
    record = kept.extras["busy_retry"]
    assert record == alternate.extras["busy_retry"] and record["kept"] == "stored"
    assert (record["stored"]["other_share"], record["retry"]["other_share"]) == (0.70, 0.81)
    assert said == ["[green]ok[/] 237 ex/s, target not reached — [yellow]measured again (--retry-busy): busy again "
                    "(other processes used 81% of its cores, 70% the first time): kept the first measurement, 1,002 "
                    "ex/s; the retry (237 ex/s) stored beside it[/]"]
    assert retries_text(summarise_groups([kept])) == (
        "torch/eager repeat 0 (--retry-busy): busy again (other processes used 81% of its cores, 70% the first "
        "time): kept the first measurement, 1,002 ex/s; the retry (237 ex/s) stored beside it")

    with Store(tmp_path / "r.sqlite") as store:  # measured again, quieter this time: the retry is kept
        runner.run(spec, store, "s", retry_busy=True, executor=Measures(980, 0.10))
        (kept,) = store.results()
        alternates = store.alternates()
        assert store.other_work() == {key: 0.10}
    assert kept.throughput["examples_per_s"] == 980 and kept.extras["busy_retry"]["kept"] == "retry"
    # nothing measured is lost (oldest first: within one second of each other, in the order stored)
    assert sorted(a.throughput["examples_per_s"] for a in alternates) == [237, 1002]
    with Store(tmp_path / "r.sqlite") as store:  # quiet now: --retry-busy has nothing left to measure
        quiet = Measures(0, 0.0)
        runner.run(spec, store, "s", retry_busy=True, executor=quiet)
        assert quiet.ran == 0
        assert store.delete([key]) == 1 and store.alternates() == []  # a deleted trial takes its alternates along


def test_a_failed_retry_keeps_the_busy_measurement(tmp_path):
    """A retry that did not succeed measured nothing: the busy measurement stays (still flagged), the failure beside
    it."""

    class Fails(Executor):
        name = "fails"

        def run(self, jobs: Iterable[TrialJob], started: Started, done: Done) -> None:
            for job in jobs:
                started(job)
                done(job, TrialResult(spec=job.spec.to_dict(), key=job.spec.key(), status=Status.FAILED,
                                      reason="killed"))

    spec = [RunSpec(workload="mnist", framework="torch", max_steps=2)]
    with Store(tmp_path / "r.sqlite") as store:
        runner.run(spec, store, "s", executor=Measures(1002, 0.81))
        runner.run(spec, store, "s", retry_busy=True, executor=Fails())
        (kept,), (alternate,) = store.results(), store.alternates()
    assert kept.status is Status.OK and kept.throughput["examples_per_s"] == 1002
    assert alternate.status is Status.FAILED and kept.extras["busy_retry"]["kept"] == "stored"


def test_a_claim_judged_on_busy_runs_is_marked_and_counts_them():
    """Claims have no robust tier: a supported claim stays supported, but its verdict cell carries §, its why names
    the busy runs with `bakeoff claims --retry-busy`, and its JSON counts them per side."""
    from bakeoff.predict.hypotheses import parse_claims
    from bakeoff.report import claim_verdicts as judged
    from bakeoff.report.templates import to_markdown
    from test_claims import BUILD, runs

    results = runs("tensorflow", "graph", [3.6, 3.5, 3.7]) + runs("torch", "graph", [1.0, 1.02, 0.98])
    quiet = judged.judge(parse_claims(BUILD), results)
    assert quiet[0].findings[0].busy == (0, 0) and "§" not in to_markdown("t", judged.blocks(quiet))
    (v,) = judged.judge(parse_claims(BUILD), [busy(r, 0.6) if r.run_spec.framework.value == "tensorflow" and
                                              r.run_spec.repeat < 2 else r for r in results])
    (f,) = v.findings
    assert v.verdict == "supported" and f.busy == (2, 0) and f.to_dict()["busy"] == [2, 0]
    assert "2 of 3 TensorFlow (graph) runs were measured while other processes used 60%" in f.why
    assert "`bakeoff claims --retry-busy` measures them again" in f.why
    markdown = to_markdown("t", judged.blocks([v]))
    assert "| supported § |" in markdown and "§: judged on runs measured while other processes used" in markdown
