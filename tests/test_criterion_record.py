"""A measured criterion is one record: added to :data:`~bakeoff.analysis.quantities.CRITERIA` alone, it is weighed by
the decision, a column of the card, a row of the report's weights and head to head, a column of the CSV and of the
decision JSON, and in the calibration's weights — with nothing else edited.

The criterion added here, "overhead", reads a figure no quantity reads yet: the seconds a trial's process spent
outside its training clock (``wall_s - train_s``). ``tests/fake_results.py`` makes every trial's whole process its
training clock plus its framework import plus 1 s, so by hand: PyTorch 1.9 + 1 = 2.9 s, TensorFlow 3.4 + 1 = 4.4 s.
"""

from __future__ import annotations

import csv
import json

import pytest

from bakeoff.analysis import calibration
from bakeoff.analysis.decide import decide, resolve_weights
from bakeoff.analysis.quantities import CRITERIA, QUANTITIES, Criterion, Quantity
from bakeoff.analysis.stats import summarise_groups
from bakeoff.cli import main as cli
from bakeoff.report import card
from bakeoff.results.store import Store
from fake_results import default_results, store_as_readme

TORCH, TENSORFLOW = 1.9 + 1.0, 3.4 + 1.0  # seconds outside the training clock, by hand (module docstring)
WEIGHT = 0.2
WEIGHED = 0.3 + 0.3 + 0.1 + 0.1 + 0.2 + WEIGHT  # the measured criteria's default weights, energy's 0 aside


def _outside_training(r, _budget):
    return r.wall_s - r.train_s if r.wall_s is not None and r.train_s is not None else None


OVERHEAD = Criterion(
    "overhead", Quantity("overhead_s", "s", False, _outside_training, "outside the training clock", header="overhead"),
    "seconds outside the training clock: import, build, evaluation, exit (median)", WEIGHT,
    legend="{unit} outside the training clock")


@pytest.fixture
def overhead(monkeypatch):
    """The one record, in the registry for this test only."""
    monkeypatch.setitem(CRITERIA, "overhead", OVERHEAD)
    return OVERHEAD


@pytest.fixture
def stored(tmp_path, overhead):
    """The default bake-off stored as a run stores it, read back from the store."""
    store_as_readme(tmp_path, default_results())
    with Store(tmp_path / "results" / "bakeoff.sqlite", readonly=True) as store:
        return store.results()


def section(markdown: str, heading: str) -> str:
    """The text under a ``### heading`` up to the next heading."""
    return markdown.split(f"### {heading}\n", 1)[1].split("\n#", 1)[0]


def rows(text: str) -> dict[str, list[str]]:
    """The body rows of the first Markdown table in ``text``, by their first cell."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    cells = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[2:]]
    return {row[0]: row for row in cells}


def test_the_record_brings_its_quantity_after_the_listed_ones_and_leaves_with_it(overhead):
    assert list(QUANTITIES)[-1] == "overhead_s" and QUANTITIES["overhead_s"] is overhead.quantity
    assert resolve_weights({"overhead": 1.0}, None)["overhead"] == 1.0  # --weight overhead=1 is accepted
    assert resolve_weights(None, None)["overhead"] == WEIGHT


def test_without_the_record_nothing_knows_it():
    assert "overhead" not in CRITERIA and "overhead_s" not in QUANTITIES
    with pytest.raises(ValueError, match="unknown criterion 'overhead'"):
        resolve_weights({"overhead": 1.0}, None)


def test_the_decision_weighs_it_and_compares_leader_and_runner_up_on_it(stored):
    d = decide(summarise_groups(stored))
    assert d.given["overhead"] == WEIGHT and d.weights["overhead"] == pytest.approx(WEIGHT / WEIGHED)
    parts = {c.label: c.parts["overhead"] for c in d.configs}
    # lower is better: best / v, the best being PyTorch's 2.9 s (graph and eager alike)
    assert parts["torch/graph"] == pytest.approx(1.0) and parts["torch/eager"] == pytest.approx(1.0)
    assert parts["tensorflow/graph"] == pytest.approx(TORCH / TENSORFLOW)
    h2h = d.head_to_head["overhead"]
    assert (h2h.a, h2h.b) == (pytest.approx(TORCH), pytest.approx(TENSORFLOW))
    assert h2h.ratio == pytest.approx(TORCH / TENSORFLOW) and h2h.outcome == "better" and h2h.better == "a"


def test_the_card_shows_it_as_a_column_with_its_legend(stored):
    summaries = summarise_groups(stored)
    built = card.build({("text_classifier", "tiny"): decide(summaries)}, summaries)
    assert built.criteria[-1] == "overhead" and built.header[-1] == "overhead"
    leader, runner_up = built.rows[0], built.rows[1]
    assert leader.framework == "PyTorch (graph)" and leader.cells[-1] == card.Cell("2.9", "leader")
    assert runner_up.cells[-1].outcome == "worse"
    assert runner_up.cells[-1].text.startswith(f"worse {TENSORFLOW / TORCH:.2f}x")
    assert "; overhead: s outside the training clock." in built.legend[0]


def test_the_report_the_csv_and_the_json_show_it(stored, tmp_path, capsys):
    db, out = tmp_path / "results" / "bakeoff.sqlite", tmp_path / "report"
    assert cli.main(["report", "--store", str(db), "--out", str(out), "--export", str(tmp_path / "trials.csv")]) == 0
    assert "overhead" in capsys.readouterr().out  # the console's card
    md = (out / "report.md").read_text()

    assert md.split("\n| workload |", 1)[1].split("\n", 1)[0].endswith("| overhead |")  # the card's header
    configurations = section(md, "Configurations")
    header = configurations.splitlines()[1].strip("|").split(" | ")
    column = [h.strip() for h in header].index("overhead")
    assert rows(configurations)["torch/graph"][column] == "2.9"
    assert rows(configurations)["tensorflow/graph"][column] == "4.4"
    assert "overhead: outside the training clock, s" in configurations  # the column's legend
    weights = rows(section(md, "Weights"))["overhead"]
    assert weights[1:] == ["measured", OVERHEAD.description, "0.2", f"{WEIGHT / WEIGHED:.3f}"]
    assert rows(section(md, "Head to head"))["overhead"][1:4] == ["2.9", "4.4", f"{TORCH / TENSORFLOW:.2f}x"]

    with (tmp_path / "trials.csv").open() as f:
        table = list(csv.DictReader(f))
    assert list(table[0])[-3:] == ["overhead_s", "memory_kind", "budget_examples"]
    by_label = {}
    for row in table:
        by_label.setdefault(row["label"], []).append(row["overhead_s"])
    assert [float(v) for v in by_label["torch/graph"]] == pytest.approx([TORCH] * 3)
    assert [float(v) for v in by_label["tensorflow/graph"]] == pytest.approx([TENSORFLOW] * 3)
    assert by_label["tensorflow/xla"] == [""]  # failed: nothing measured

    assert cli.main(["report", "--store", str(db), "--out", str(out), "--format", "json"]) == 0
    decision = json.loads((out / "decision.json").read_text())["decisions"][0]
    configuration = next(c for c in decision["configurations"] if c["label"] == "torch/graph")
    assert configuration["quantities"]["overhead_s"]["median"] == pytest.approx(TORCH)
    assert configuration["quantities"]["overhead_s"]["unit"] == "s"


def test_the_calibration_weighs_it_and_a_simulation_that_cannot_draw_it_is_left_as_it_was(monkeypatch):
    scenario = calibration.Scenario("two sides, 5%", 3, (calibration.Noise.uniform(0.05),) * 2)
    before = calibration.simulate(scenario, 3)
    monkeypatch.setitem(CRITERIA, "overhead", OVERHEAD)
    assert calibration.user_weights()[-1] == ("overhead", 0.0)  # two criteria level, every other one dropped
    after = calibration.simulate(scenario, 3)
    # its simulated trials record no whole-process clock: weighed 0.2 by default, it is left out of every decision
    assert (after.wins, after.robust, after.covered, after.intervals) == (
        before.wins, before.robust, before.covered, before.intervals) and "overhead" not in after.intervals
    # nor does speed move its truth (calibration.SPEED): no coverage column, as for first step, memory and quality
    assert [k for k in calibration.table([after])[0] if k.startswith("coverage")] == [
        "coverage throughput", "coverage time to target"]
