"""The decision card (:mod:`bakeoff.report.card`): its cells against the decision's own numbers, the recommendation
across workloads (one winner, winners that disagree, none), its place on the page (first, then the plots, nothing
said twice, the environment folded away), and the same card in the terminal. No trial runs: synthetic results."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from bakeoff.analysis.decide import against, decide, decide_each
from bakeoff.analysis.stats import summarise_groups
from bakeoff.analysis.verdict import ratio_text
from bakeoff.report import card
from bakeoff.report.render import render_report
from fake_results import default_results, failed, quick_results, respec, trial


def table_rows(markdown: str, after: str) -> list[list[str]]:
    """The rows of the first Markdown table after the line ``after``, as cells."""
    text = markdown.split(after, 1)[1]
    lines = [line for line in text.split("\n\n## ", 1)[0].splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


@pytest.fixture(scope="module")
def quick() -> tuple[dict, list]:
    summaries = summarise_groups(quick_results())
    return decide_each(summaries), summaries


def test_the_default_card_golden(tmp_path):
    md = render_report(default_results(), tmp_path)["markdown"].read_text()
    rows = table_rows(md, "## Decision")
    assert rows[0] == ["workload", "framework", "verdict", "win prob.", "throughput", "time to target", "first step",
                       "memory", "quality"]
    assert rows[2:] == [
        ["text_classifier/tiny", "★ PyTorch (graph)", "wins", "99.9%", "950", "2.1", "1.2", "140", "0.8"],
        ["", "TensorFlow (graph)", "", "0.1%", "worse 0.55x (0.53–0.57x)", "worse 1.95x (1.95–1.96x)",
         "better 0.67x (0.67–0.67x)", "worse 1.29x (1.29–1.29x)", "equal 1.01x (1.01–1.01x)"]]
    assert ("**Recommendation:** PyTorch: it wins text_classifier/tiny; win probability 99.9% (the share of joint "
            "draws in which it leads).") in md
    assert ("**What decides it:** time to target on text_classifier/tiny (0.51x TensorFlow (graph)'s, 95% CI "
            "0.51–0.51x).") in md


def test_the_runner_up_row_is_the_verdicts_head_to_head_seen_from_its_side():
    d = decide(summarise_groups(default_results()))
    built = card.build({(d.workload, d.preset): d}, summarise_groups(default_results()))
    runner = built.rows[1]
    for criterion, cell in zip(built.criteria, runner.cells, strict=True):
        seen = d.head_to_head[criterion].swapped()
        assert cell.text.split(" ", 1)[1] == f"{ratio_text(seen.ratio)} ({ratio_text(seen.low, '')}–" \
                                             f"{ratio_text(seen.high)})"
        # the verdict states the leader's side: 1.83x (95% CI 1.76–1.90x) is the runner-up's 0.55x (0.53–0.57x)
        assert cell.outcome == {"a": "worse", "b": "better", "": "equal"}[d.head_to_head[criterion].better or ""]
    assert "steady throughput: 950 vs 520 examples/s (1.83x, 95% CI 1.76–1.90x)" in d.verdict


def test_every_workload_its_frameworks_and_the_third_one_against_the_leader(quick):
    decided, summaries = quick
    built = card.build(decided, summaries)
    cells = built.cells()
    assert [(row[0].text, row[1].text, row[2].text) for row in cells] == [
        ("autoencoder/tiny", "★ PyTorch (eager)", "leads, unsettled"), ("", "JAX (graph)", ""),
        ("", "TensorFlow (graph)", ""),
        ("mnist/tiny", "★ PyTorch (eager)", "wins"), ("", "JAX (graph)", ""), ("", "TensorFlow (graph)", ""),
        ("text_classifier/tiny", "★ PyTorch (eager)", "wins"), ("", "TensorFlow (graph)", "")]
    by_name = {s.label: s for s in summaries if s.workload == "mnist"}
    third = against("throughput", by_name["tensorflow/graph"], by_name["torch/eager"])  # not in any verdict
    assert cells[5][4].text == (f"worse {ratio_text(third.ratio)} ({ratio_text(third.low, '')}–"
                                f"{ratio_text(third.high)})") == "worse 0.67x (0.60–0.74x)"
    assert built.recommendation == (
        "PyTorch: it wins 2 of 3 compared workloads (mnist/tiny, text_classifier/tiny); no winner on "
        "autoencoder/tiny (unsettled); win probability 92% (the share of joint draws in which it leads, the mean "
        "over the 3 workloads it was compared on).")
    shares = [decided[k].win_share["torch"] for k in decided]
    assert built.recommendation.count(f"{100 * sum(shares) / 3:.0f}%") == 1


def _swapped(results, workload):
    """``results`` with PyTorch and TensorFlow trading names, on ``workload``."""
    other = {"torch": "tensorflow", "tensorflow": "torch"}
    return [respec(r, workload=workload, framework=other[r.run_spec.framework]) for r in results]


def test_the_recommendation_when_workloads_disagree_and_when_none_is_won():
    text = [r for r in default_results() if r.run_spec.label() in ("torch/graph", "tensorflow/graph")]
    split = decide_each(summarise_groups(text + _swapped(text, "mnist")))
    assert card.recommendation(list(split.values())) == (
        "No single framework: TensorFlow wins mnist/tiny (win probability 99.8% there); PyTorch wins "
        "text_classifier/tiny (win probability 99.9% there) — win probability: the share of joint draws in which it "
        "leads.")
    noisy = decide_each(summarise_groups([r for r in quick_results() if r.run_spec.workload == "autoencoder"]))
    said = card.recommendation(list(noisy.values()))
    assert said.startswith("No recommendation: no framework wins any workload (unsettled on autoencoder/tiny); "
                           "the evidence leans to PyTorch, win probability 77%")
    assert card.decides(list(noisy.values())).startswith(
        "nothing yet: no leader is better on criteria that weigh more than those still unsettled")


def test_one_run_a_side_is_provisional_with_no_win_probability():
    results = [trial("torch", "eager", examples_per_s=900, time_to_target_s=2.0),
               trial("tensorflow", "graph", examples_per_s=500, time_to_target_s=4.0)]
    decided = decide_each(summarise_groups(results))
    built = card.build(decided, summarise_groups(results))
    assert [(r.standing, r.win_probability) for r in built.rows] == [("leads, provisional", "—"), ("", "—")]
    assert built.recommendation == ("PyTorch (provisional: fewer than 3 runs a side): it wins text_classifier/tiny; "
                                    "no win probability (one run a side: no spread to draw from).")
    # one run a side: no interval, so unsettled whatever the ratio (it was "loss 0.56x (1 run a side)")
    assert built.rows[1].cells[0] == card.Cell("unsettled 0.56x (one run a side: no interval)", "unsettled")
    assert not any("CI" in c.text or "95%" in c.text for c in built.rows[1].cells)


def test_the_page_opens_with_the_card_then_the_plots_and_says_each_verdict_once(quick, tmp_path):
    decided, _ = quick
    paths = render_report(quick_results(), tmp_path)
    md, page = paths["markdown"].read_text(), paths["html"].read_text()
    assert md.index("## Decision") < md.index("## Plots") < md.index("## autoencoder / tiny")
    for d in decided.values():
        assert md.count(d.verdict) == 1 and page.count(d.verdict) == 1
    for section in md.split("\n## ")[3:]:  # each workload's: the environment last, folded away
        assert section.rstrip().endswith("</details>")
        assert section.index("<details><summary>Environment</summary>") > section.index("### Trials that did not")
    assert page.count("<details><summary>Environment</summary>") == 3
    assert '<section id="decision">' in page and page.index('id="decision"') < page.index("<img")
    assert '<td class="worse">worse 0.67x<br>(0.60–0.74x)</td>' in page  # coloured by its class; two lines
    assert '<td class="l leader">★ PyTorch (eager)</td>' in page
    assert page.count('<div class="scroll">') == page.count("<table>")  # every table scrolls within its box
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    assert "@media print" in page


def test_the_card_fits_80_columns_on_a_terminal_and_off_one_with_every_word_whole(monkeypatch, quick):
    from bakeoff.cli import console as console_module

    decided, summaries = quick
    built = card.build(decided, summaries)
    for terminal in (False, True):
        out = io.StringIO()
        monkeypatch.setattr(console_module, "console", Console(file=out, width=80, force_terminal=terminal,
                                                               color_system=None, highlight=False))
        console_module.print_card(built)
        lines = [line.rstrip() for line in out.getvalue().splitlines()]
        # a table per workload, each ratio over its interval; 80 columns, no number cut (off a terminal it was the
        # report's one table, a row a line, over 200 columns)
        assert "mnist/tiny: PyTorch (eager) wins" in lines
        assert all(len(line) <= 80 for line in lines) and "…" not in out.getvalue()
        row = lines.index(next(line for line in lines if line.startswith(" TensorFlow   0%  ")))
        assert "worse" in lines[row] and "0.67x" in lines[row + 1] and "0.60–0.74" in lines[row + 2]
        said = " ".join(line.strip() for line in lines[lines.index(next(line for line in lines
                                                                       if line.startswith("recommendation"))):])
        assert f"recommendation: {built.recommendation} what decides it: {built.decides}" in said


def test_bakeoff_report_ends_with_the_card_a_given_score_beside_the_measured(tmp_path, capsys, monkeypatch):
    """``bakeoff report`` on a stored suite with a qualitative criterion: its scores are a column of the card (given,
    not measured, as the legend says), and the output ends with the card, then where the report is."""
    from bakeoff.cli import console as console_module
    from bakeoff.cli import main as cli
    from bakeoff.results.store import Store

    # the console as a pipe gets it when no COLUMNS is set (CI's environment sets one): the card at its own width
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(console_module, "console", console_module.make_console())

    with Store(tmp_path / "r.sqlite") as store:
        for result in default_results():
            store.put(result, "mine")
        store.put_suite("mine", "my.toml", {"team_familiarity": 0.5},
                        {"team_familiarity": {"torch": 1, "tensorflow": 5}})
    assert cli.main(["report", "--store", str(tmp_path / "r.sqlite"), "--suite", "mine",
                     "--out", str(tmp_path / "rep")]) == 0
    lines = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("framework "))
    assert lines[header - 1].split()[-1] == "team" and lines[header].split()[-1] == "familiarity"
    # TensorFlow leads on the team's score (weighted 0.5) although PyTorch wins on three measured criteria
    assert lines[header - 3] == "text_classifier/tiny: TensorFlow (graph) wins, not robust"
    assert lines[header + 2].split()[:3] == ["★", "TensorFlow", "66%"] and lines[header + 2].split()[-1] == "5/5"
    assert lines[header + 4].split()[:3] == ["PyTorch", "34%", "better"] and lines[header + 4].endswith("worse 1 vs 5")
    assert lines[header + 5].split()[1] == "1.83x" and lines[header + 6].split()[0] == "1.76–1.90"
    # 66% of the joint draws: the verdict says not robust, so the card does not say a bare "wins"
    # then the prose, wrapped between words at 100 columns into a pipe, and where the report is
    start = next(i for i, line in enumerate(lines) if line.startswith("recommendation: "))
    said = " ".join(line.strip() for line in lines[start:-1])
    assert said.startswith("recommendation: TensorFlow (not robust: see its verdict): it wins text_classifier/tiny; "
                           "win probability ")
    assert said.endswith("what decides it: team familiarity on text_classifier/tiny (5 vs 1, a score given, not "
                         "measured).")
    assert all(len(line) <= 100 for line in lines[start:-1])
    assert lines[-1].startswith("report: ")
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "team familiarity: a 0..5 score given in the suite, not measured" in md


def test_with_one_framework_no_recommendation_and_the_verdict_not_repeated():
    results = [trial("torch", "eager"), failed("tensorflow", "graph")]
    decided = decide_each(summarise_groups(results))
    built = card.build(decided, summarise_groups(results))
    assert [(r.framework, r.standing, r.win_probability) for r in built.rows] == [
        ("PyTorch (eager)", "only one compared", "—"), ("TensorFlow", "no successful trial", "—")]
    assert built.rows[1].cells == [card.Cell("—")] * len(built.criteria)
    assert built.recommendation == ("No recommendation: no workload had two frameworks to compare "
                                    "(text_classifier/tiny: its verdict below says why).")
    assert decided["text_classifier", "tiny"].verdict not in built.recommendation + built.decides
