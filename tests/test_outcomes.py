"""Three outcomes per criterion (issue #48): wherever a comparison is worded — the verdict, the card, the head-to-head
table, the JSON, the terminal, ``bakeoff compare`` — it is better / worse (the whole interval beyond ±5%), equal (the
whole interval inside it) or unsettled (neither, or no interval), never "tie"; and where there is no interval (one
run a side) nothing says "CI" or draws a bar. No trial runs: synthetic results."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console

from bakeoff.analysis.bootstrap import OUTCOMES
from bakeoff.analysis.decide import decide
from bakeoff.analysis.stats import summarise_groups
from bakeoff.report import card
from bakeoff.report.render import render_report
from bakeoff.results import ci
from fake_results import repeats, trial

THROUGHPUT_ONLY = {"throughput": 1.0, "time_to_target": 0.0, "first_step": 0.0, "memory": 0.0, "quality": 0.0}
TIE = re.compile(r"\btie\b|\bties\b|\btied\b", re.IGNORECASE)


def _strings(value: object) -> list[str]:
    """Every string value in JSON-ready data (keys left out: the old ``tie`` keys stay for compatibility)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.fixture(scope="module")
def unsettled() -> list:
    """PyTorch 1.50x TensorFlow's throughput, 95% interval 1.01–2.25x: it reaches into ±5%, and far beyond it."""
    return [*repeats("torch", "graph", [660, 780, 930], [3.0] * 3, final_metric=[0.8] * 3),
            *repeats("tensorflow", "graph", [500, 520, 540], [3.0] * 3, final_metric=[0.8] * 3)]


def test_an_interval_reaching_into_the_band_is_unsettled_everywhere_never_a_tie(unsettled, tmp_path):
    summaries = summarise_groups(unsettled)
    d = decide(summaries, THROUGHPUT_ONLY)
    diff = d.head_to_head["throughput"]
    assert (round(diff.ratio, 2), round(diff.low, 2), round(diff.high, 2)) == (1.5, 1.01, 2.25)  # hand-picked
    assert diff.outcome == "unsettled" and d.winner is None and not d.tie
    # the verdict: "unsettled on", the difference cited with its interval, never "tie" or "inconclusive"
    assert d.verdict.startswith("unsettled on text_classifier/tiny: PyTorch (graph) leads TensorFlow (graph) "
                                "(1.00 vs 0.67) only by unsettled differences — steady throughput: 780 vs 520 "
                                "examples/s (1.50x, 95% CI 1.01–2.25x)")
    assert not TIE.search(d.verdict) and "inconclusive" not in d.verdict and "within noise" not in d.verdict
    # the card: the runner-up's cell from its side, the leader's standing, the recommendation
    built = card.build({(d.workload, d.preset): d}, summaries)
    assert built.rows[0].standing == "leads, unsettled"
    assert built.rows[1].cells[0] == card.Cell("unsettled 0.67x (0.45–0.99x)", "unsettled")
    shown = [built.recommendation, built.decides, *built.legend, *(c.text for row in built.cells() for c in row)]
    assert not any(TIE.search(text) for text in shown), shown
    assert "no framework wins any workload (unsettled on text_classifier/tiny)" in built.recommendation
    # the JSON: an outcome per criterion and per decision; no string value says tie
    data = ci.decision_dict(d, summaries)
    assert data["head_to_head"]["throughput"]["outcome"] == "unsettled" and data["outcome"] == "unsettled"
    assert data["head_to_head"]["throughput"]["tie"] is True  # the old key, kept for readers of earlier output
    assert not any(TIE.search(s) for s in _strings(data))
    # the report, markdown and HTML: the head-to-head row, and the word nowhere on the page
    paths = render_report(unsettled, tmp_path, weights=THROUGHPUT_ONLY)
    md, page = paths["markdown"].read_text(), paths["html"].read_text()
    assert ("| throughput | 780 | 520 | 1.50x | 95% CI 1.01–2.25x | unsettled: the interval is neither within nor "
            "beyond ±5% |") in md
    assert not TIE.search(md) and not TIE.search(page)
    assert '<td class="unsettled">unsettled 0.67x<br>(0.45–0.99x)</td>' in page
    assert "td.unsettled {" in page and "td.equal {" in page and "td.tie" not in page


def test_equal_only_when_the_whole_interval_is_inside_the_band():
    inside = [*repeats("torch", "graph", [500, 502, 504], [3.0] * 3, final_metric=[0.8] * 3, jitter=0.02),
              *repeats("tensorflow", "graph", [501, 503, 505], [3.0] * 3, final_metric=[0.8] * 3, jitter=0.02)]
    # medians 1.02x apart, inside ±5%, but an interval reaching far beyond it: unsettled, not equal
    wide = [*repeats("torch", "graph", [460, 500, 540], [3.0] * 3, final_metric=[0.8] * 3),
            *repeats("tensorflow", "graph", [470, 510, 530], [3.0] * 3, final_metric=[0.8] * 3)]
    for results, outcome, standing in ((inside, "equal", "equal"), (wide, "unsettled", "leads, unsettled")):
        summaries = summarise_groups(results)
        d = decide(summaries, THROUGHPUT_ONLY)
        diff = d.head_to_head["throughput"]
        assert diff.outcome == outcome
        assert (1 / 1.05 <= diff.low and diff.high <= 1.05) == (outcome == "equal")  # the whole interval inside
        built = card.build({(d.workload, d.preset): d}, summaries)
        assert built.rows[0].standing == standing and built.rows[1].cells[0].outcome == outcome
        assert built.rows[1].cells[0].text.startswith(f"{outcome} ")
        assert ci.decision_dict(d, summaries)["outcome"] == outcome
        assert d.verdict.startswith(f"{outcome} on text_classifier/tiny: ")
    assert card.decides([decide(summarise_groups(inside), THROUGHPUT_ONLY)]).startswith(
        "nothing measured: the frameworks are within ±5% of each other")


def test_one_run_a_side_has_no_interval_text_and_no_bar(tmp_path):
    from bakeoff.report.plots import error_bars

    results = [trial("torch", "eager", examples_per_s=900, time_to_target_s=2.0, jitter=0.1),
               trial("tensorflow", "graph", examples_per_s=500, time_to_target_s=4.0, jitter=0.1)]
    summaries = summarise_groups(results)
    d = decide(summaries)
    assert all(x.outcome == "unsettled" for x in d.head_to_head.values())  # whatever the point ratio
    built = card.build({(d.workload, d.preset): d}, summaries)
    cells = [c.text for c in built.rows[1].cells if c.text != "—"]
    assert cells and all(t.startswith("unsettled ") and t.endswith("(one run a side: no interval)") for t in cells)
    md = render_report(results, tmp_path)["markdown"].read_text()
    head = md.split("Head to head", 1)[1].split("\n\n", 2)[1]
    rows = [line.strip("|").split(" | ") for line in head.splitlines()[2:]]
    assert rows and all(row[4].strip() == "—" and row[5].strip() == "unsettled: one run a side, no interval"
                        for row in rows), head
    assert "95% CI —" not in md and not TIE.search(md)
    # the throughput plot: each configuration's own steps would give a bootstrap interval, but no bar is drawn
    assert summaries[0].interval("examples_per_s") != (summaries[0].value("examples_per_s"),) * 2
    assert error_bars(summaries) == ([0.0, 0.0], [0.0, 0.0])
    two = summarise_groups([*repeats("torch", "graph", [880, 900, 930], [2.0] * 3, final_metric=[0.8] * 3)])
    low, high = error_bars(two)
    assert low[0] > 0 and high[0] > 0  # with runs to compare, the bar is there


def test_the_terminal_colours_and_the_page_classes_follow_the_outcomes(unsettled, monkeypatch):
    from bakeoff.cli import console as console_module
    from bakeoff.report.templates import CSS

    assert set(console_module._OUTCOME) == {*OUTCOMES, "leader"}
    assert all(f"td.{o} {{" in CSS for o in OUTCOMES) and "td.tie" not in CSS and "td.win" not in CSS
    summaries = summarise_groups(unsettled)
    d = decide(summaries, THROUGHPUT_ONLY)
    out = io.StringIO()
    monkeypatch.setattr(console_module, "console", Console(file=out, width=80, force_terminal=True,
                                                           color_system=None, highlight=False))
    console_module.print_card(card.build({(d.workload, d.preset): d}, summaries))
    text = out.getvalue()
    assert "text_classifier/tiny: PyTorch (graph) leads, unsettled" in " ".join(text.split())
    assert re.search(r"TensorFlow +\d+% +unsettled *\n.* 0\.67x *\n.* 0\.45–0\.99 *\n", text), text  # a line each
    assert not TIE.search(text)


def test_bakeoff_compare_words_each_quantity_by_its_outcome():
    from bakeoff.results.compare import compare, lines, to_dict

    a = [*repeats("torch", "graph", [500, 505, 510], [3.0] * 3, final_metric=[0.8] * 3),
         *repeats("tensorflow", "graph", [500, 505, 510], [3.0] * 3, final_metric=[0.8] * 3)]
    b = [*repeats("torch", "graph", [650, 656, 663], [3.0] * 3, final_metric=[0.8] * 3),  # 1.3x
         *repeats("tensorflow", "graph", [500, 505, 510], [3.0] * 3, final_metric=[0.8] * 3)]  # the same
    c = compare(a, b)
    said = "\n".join(lines(c))
    assert re.search(r"torch/graph \(runs 3 vs 3\): throughput: B/A 1\.30 \[1\.\d\d, 1\.\d\d\] \(B better\)", said)
    assert re.search(r"tensorflow/graph \(runs 3 vs 3\): throughput: B/A 1\.00 \[0\.9\d, 1\.0\d\] \(equal\)", said)
    assert "better: the whole interval beyond ±5%; equal: the whole interval within ±5%; unsettled: neither" in said
    assert not TIE.search(said)
    data = json.loads(json.dumps(to_dict(c)))
    outcome = {m["label"]: m["examples_per_s"]["outcome"] for m in data["configurations"]}
    assert outcome == {"torch/graph": "better", "tensorflow/graph": "equal"}  # B's against A's, as the ratio is


def test_bakeoff_compare_with_one_run_a_side_is_unsettled_without_an_interval():
    # A bootstrap over one run's steps saw step-to-step noise only and called this "B better"; run-to-run noise is
    # what one run a side cannot show, so it is unsettled, as a verdict's comparison is.
    from bakeoff.results.compare import compare, lines

    a = repeats("torch", "graph", [500], [3.0], final_metric=[0.8])
    b = repeats("torch", "graph", [650], [2.4], final_metric=[0.8])
    c = compare(a, b)
    d = c.matched[0].differences["examples_per_s"]
    assert d.ratio == pytest.approx(1.3) and d.low is None and d.outcome == "unsettled"
    said = "\n".join(lines(c))
    assert "throughput: B/A 1.30, no interval (unsettled)" in said and "B better" not in said


def test_fail_if_slower_than_never_fails_a_build_on_one_run_a_side():
    # The bootstrap over one run's steps gave a narrow interval and failed this build on run-to-run noise it never saw
    from bakeoff.results.ci import slower_than

    results = [*repeats("torch", "graph", [1000], [2.0], final_metric=[0.8]),
               *repeats("tensorflow", "graph", [500], [3.0], final_metric=[0.8])]
    [check] = slower_than(summarise_groups(results), {"tensorflow": 0.9})
    assert check.ratio == pytest.approx(0.5) and check.low is None and not check.failed
    assert "(torch/graph; one run a side: no interval) — pass: not surely below 0.9" in check.line()
    three = [*repeats("torch", "graph", [990, 1000, 1010], [2.0] * 3, final_metric=[0.8] * 3),
             *repeats("tensorflow", "graph", [495, 500, 505], [3.0] * 3, final_metric=[0.8] * 3)]
    [check] = slower_than(summarise_groups(three), {"tensorflow": 0.9})
    assert check.failed and check.high < 0.9
