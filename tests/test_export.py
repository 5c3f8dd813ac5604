"""The CSV export: one row per trial, one column per measured quantity (the quantity records drive it)."""

from __future__ import annotations

import csv

from bakeoff.analysis.quantities import QUANTITIES
from bakeoff.results.store import export
from fake_results import MIB, failed, trial


def test_csv_has_a_column_per_quantity_with_the_memory_figures_and_the_budget(tmp_path):
    stopped = trial("torch", "graph", time_to_target_s=0.5, final_metric=0.9, steps=50)
    results = [stopped, trial("tensorflow", "graph", time_to_target_s=None), failed("tensorflow", "xla")]
    results[0].throughput["frames_per_s"] = 51_000.0
    with export(results, tmp_path / "t.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["key", "workload", "preset", "label", "seed", "repeat", "status", "reason",
                             *QUANTITIES, "memory_kind", "budget_examples"]
    torch, tf, xla = rows
    assert torch["memory_baseline_bytes"] == str(250 * MIB) and torch["memory_increment_bytes"] == str(150 * MIB)
    assert torch["memory_train_peak_bytes"] == str(400 * MIB) and torch["peak_memory_bytes"] == str(408 * MIB)
    assert torch["frames_per_s"] == "51000.0" and tf["frames_per_s"] == ""
    assert torch["budget_examples"] == tf["budget_examples"] == "1600.0"  # where the stopped trial's curve ends
    at_50 = next(p["metric"] for p in results[1].curve if p["step"] == 50)
    assert float(tf["metric_at_budget"]) == at_50
    assert tf["time_to_target_s"] == "" and float(torch["steps_to_target"]) > 0  # never reached: empty
    assert xla["status"] == "failed" and xla["examples_per_s"] == "" and xla["metric_at_budget"] == ""
