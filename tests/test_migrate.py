"""Stored results of an older schema still read: ``tests/data/store_schema2.sqlite`` was written by bakeoff at
da9c770 (schema 2: the training loop's figures, a batch-size search, a profile and a profiler's failure in
``extras``), and this bakeoff reads it through
:func:`bakeoff.core.result.migrate` — results, listing rows, ``bakeoff show`` and ``bakeoff report`` — and
writes new trials beside the old ones. A schema it cannot read is refused, naming it."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from bakeoff.core.result import MIGRATIONS, SCHEMA_VERSION, BatchSearch, Profile, Training, TrialResult, migrate
from bakeoff.core.spec import SpecError
from bakeoff.results.store import Store
from fake_results import trial

OLD_STORE = Path(__file__).parent / "data" / "store_schema2.sqlite"
TRAINING_KEYS = {f.name for f in dataclasses.fields(Training)}


@pytest.fixture
def old_store(tmp_path):
    copy = tmp_path / "old.sqlite"
    shutil.copy(OLD_STORE, copy)  # the shipped file is never written
    return copy


def test_a_store_of_schema_2_reads_with_the_training_figures_in_their_section(old_store):
    with Store(old_store, readonly=True) as store:
        results = store.results()
        rows = store.trials()
    assert len(results) == 4 and {r.schema_version for r in results} == {SCHEMA_VERSION}
    for r in results:
        assert not TRAINING_KEYS & set(r.extras)  # moved, not copied
        assert r.training.target_rule == "the preset's measured target"
        assert r.training.steady_steps == len(r.step_times_s) - 1 - r.run_spec.warmup_steps
        assert r.training.epochs is not None and r.training.steady_statistic == "median"  # schema 2 had no key
        graph = r.run_spec.label() == "tensorflow/graph"
        assert (r.training.graph_builds, r.training.graph_build_steps) == ((1, [1]) if graph else (0, []))
        assert r.training.graph_build_s == (0.25 if graph else None)
        assert "config" in r.extras and "order" in r.extras  # what has no section yet stays where it was
    assert sorted(len(row.training.resumed_at_steps) for row in rows) == [0, 0, 0, 1]
    moved = {"batch_search", "profile", "profile_error", "profile_traceback"}
    assert not moved & {key for r in results for key in r.extras}
    [searched] = [r for r in results if r.batch_search is not None]
    assert searched.batch_search == BatchSearch(64, 700 * 2**20, "rss_high_water", [
        {"batch_size": 64, "status": "ok"}, {"batch_size": 128, "status": "out_of_memory"}])
    profiles = sorted((r.profile for r in results if r.profile is not None), key=lambda p: p.error)
    assert [p.error for p in profiles] == ["", "no profile written into r/profiles/y: OSError: disk full"]
    assert profiles[0] == Profile("r/profiles/x", "torch.profiler", 5, 1, 8, {"h.pt.trace.json": 1234}, ["open it"],
                                  [0.1] * 5, 2.5)
    assert profiles[1].traceback == "Traceback ..." and profiles[1].files == {}
    assert {row.key: row.training for row in rows} == {r.key: r.training for r in results}


def test_show_and_report_read_a_schema_2_store_and_new_trials_go_beside_the_old(old_store, tmp_path):
    from bakeoff.cli.main import main

    assert main(["show", "--store", str(old_store)]) == 0
    assert main(["report", "--store", str(old_store), "--out", str(tmp_path / "rep")]) == 0
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "graph builds (their extra s)" in report and "64 ok, 128 out_of_memory" in report
    new = trial("torch", "eager", seed=7)
    with Store(old_store) as store:
        store.put(new, "quick")
        results = store.results()
    assert len(results) == 5 and next(r for r in results if r.key == new.key).training == new.training


def test_a_result_round_trips_and_each_migration_lands_on_the_current_schema():
    result = trial("tensorflow", "graph")
    result.training.graph_build_steps.append(1)
    assert TrialResult.from_dict(result.to_dict()) == result
    old = {**result.to_dict(), "schema_version": 2, "training": {}, "extras": {**result.extras, "graph_builds": 2}}
    assert migrate(old)["training"] == {"graph_builds": 2} and migrate(old)["schema_version"] == SCHEMA_VERSION
    assert sorted(MIGRATIONS) == list(range(min(MIGRATIONS), SCHEMA_VERSION))  # no version skipped


@pytest.mark.parametrize(("version", "message"), [
    (SCHEMA_VERSION + 1, "It was written by a newer bakeoff: upgrade to read it"),
    (1, "Re-run the trials with this version"),
    (None, "schema_version None"),
])
def test_a_schema_this_bakeoff_cannot_read_is_refused_naming_it(version, message):
    raw = {**trial("torch", "eager").to_dict(), "schema_version": version}
    with pytest.raises(SpecError, match=message):
        TrialResult.from_dict(raw)
