"""Stored results of an older schema still read: ``tests/data/store_schema2.sqlite`` was written by bakeoff at
da9c770 (schema 2: the training loop's figures, a batch-size search, a profile and a profiler's failure in
``extras``) and ``tests/data/store_schema3.sqlite`` by b06b4d1 (schema 3: distributed figures, MFU, a probed
ceiling, the run order and an adaptive run's plan in ``extras``; ``tests/data/write_store_schema3.py``), and this
bakeoff reads them through :func:`bakeoff.core.result.migrate` — results, listing rows, ``bakeoff show`` and
``bakeoff report`` — and writes new trials beside the old ones. A schema it cannot read is refused, naming it."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

import fake_results as fake
from bakeoff.core import registry
from bakeoff.core.result import (
    MIGRATIONS,
    MOVED_IN_4,
    SCHEMA_VERSION,
    AdaptiveRepeats,
    BatchSearch,
    CeilingProbe,
    Distributed,
    Mfu,
    Order,
    Profile,
    Training,
    TrialResult,
    migrate,
)
from bakeoff.core.spec import SpecError
from bakeoff.results.store import Store
from fake_results import trial

OLD_STORE = Path(__file__).parent / "data" / "store_schema2.sqlite"
SCHEMA3_STORE = Path(__file__).parent / "data" / "store_schema3.sqlite"
TRAINING_KEYS = {f.name for f in dataclasses.fields(Training)}
MIB = 2**20


@pytest.fixture
def old_store(tmp_path):
    copy = tmp_path / "old.sqlite"
    shutil.copy(OLD_STORE, copy)  # the shipped file is never written
    return copy


@pytest.fixture
def schema3_store(tmp_path):
    copy = tmp_path / "schema3.sqlite"
    shutil.copy(SCHEMA3_STORE, copy)
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
        assert r.setup.config is not None and r.setup.data is not None  # 4 → 5: into their section
        assert not {"config", "data"} & set(r.extras)  # moved, not copied
        assert r.order == Order(1, 1, 0) and not set(MOVED_IN_4) & set(r.extras)  # 2 → 3 → 4
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


def test_a_store_of_schema_3_reads_with_distributed_mfu_probe_order_and_plan_in_their_sections(schema3_store):
    with Store(schema3_store, readonly=True) as store:
        results = store.results()
        rows = store.trials()
        kept = {r.mfu.ceiling_key: store.ceiling(r.mfu.ceiling_key) for r in results
                if r.mfu is not None and r.mfu.value is not None}
    assert len(results) == 10 and {r.schema_version for r in results} == {SCHEMA_VERSION}
    assert not set(MOVED_IN_4) & {k for r in results for k in r.extras}  # moved, not copied
    assert not set(MOVED_IN_4) & {k for row in rows for k in row.extras}  # listing rows alike
    assert sum(r.setup.config is not None for r in results) == 9  # every trial but the group that wrote no result
    assert [r.order for r in results] == [Order(i, 10, 7) for i in range(1, 11)]
    assert all(r.adaptive_repeats == AdaptiveRepeats(first=3, max=5, looks=3) for r in results)

    by_label = {}
    for r in results:
        by_label.setdefault(r.run_spec.label(), []).append(r)
    flops = registry.workload("text_classifier").flops_per_example(fake.CONFIG)
    for r in by_label["torch/eager"] + by_label["tensorflow/graph"]:
        assert r.mfu.value == pytest.approx(flops * r.throughput["examples_per_s"] / 1e11)
        assert (r.mfu.ceiling_range, r.mfu.ceiling_n, r.mfu.ceiling_where) == ([0.9e11, 1.1e11], 1024,
                                                                                "trial process")
    assert {r.mfu.missing for r in by_label["torch/eager/data_parallelx2"]} == {
        "not computed for multi-process trials yet (a ceiling is one process's)"}
    [failed] = by_label["tensorflow/graph/multi_workerx2"]
    assert failed.mfu is None and failed.ceiling_probe is None

    probed = [r for r in results if r.ceiling_probe is not None]  # the first trial of each fingerprint
    assert [(r.run_spec.label(), r.order.position) for r in probed] == [("torch/eager", 1), ("tensorflow/graph", 4)]
    for r in probed:
        assert r.ceiling_probe.status == "ok" and r.ceiling_probe.precisions["fp32"]["median_flops_per_s"] == 1e11
        assert r.ceiling_probe.kept() == kept[r.mfu.ceiling_key]["result"]  # as b06b4d1's runner kept it

    ddp = by_label["torch/eager/data_parallelx2"]
    for r in ddp:
        d = r.distributed
        assert (d.launcher, d.replicas, d.processes, d.replicas_identical) == ("torchrun", 2, 2, True)
        assert d.strategy == "DistributedDataParallel (gloo), 2 ranks" and d.setup_parts_s["ddp_wrap_s"] == 0.01
        assert [rank["rank"] for rank in d.ranks] == [0, 1] and d.batch_size == {"global": 32, "per_replica": 16}
        assert d.sync["per_step_s"] == 0.005 and d.sync["buckets"] == 1
        assert d.startup_s == pytest.approx(0.9 + 2.0 + 0.1)  # rank 1's launch, import and build
        assert d.member_peak_rss_bytes == {"torchrun": 90 * MIB} and d.other == {}
        assert r.execution.log and "log" not in r.extras  # a free note until schema 5, its section's since
    [ps] = by_label["tensorflow/graph/parameter_serverx2"]
    assert ps.distributed.synchronous is False and ps.distributed.servers_wait_s == 0.7
    assert ps.distributed.asynchronous == {"in_flight": 2, "step_losses": [0.69, 0.68]}
    assert failed.distributed == Distributed(launcher="tf_config", first_failure="worker 1 of the trial's 2 "
                                             "processes", exit_codes={"worker 0": -9, "worker 1": 1},
                                             logs=["logs/mw.log", "logs/mw.worker1.log"])


def test_show_and_report_read_a_schema_3_store_from_its_migrated_sections(schema3_store, tmp_path, capsys):
    from bakeoff.cli.main import main

    with Store(schema3_store, readonly=True) as store:
        ddp = next(r for r in store.results() if r.run_spec.label() == "torch/eager/data_parallelx2")
    assert main(["show", "--store", str(schema3_store)]) == 0
    assert main(["show", "--store", str(schema3_store), ddp.key]) == 0
    shown = capsys.readouterr().out
    assert "10 of 10 stored trials shown" in shown and '"launcher": "torchrun"' in shown
    assert main(["report", "--store", str(schema3_store), "--out", str(tmp_path / "rep")]) == 0
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "shuffled with order seed 7" in report  # order
    assert "adaptive repeats (runs added while a verdict is unsettled, up to 3 looks)" in report  # the plan
    assert "fp32 on CPU, 2 threads: 100 GFLOP/s (samples 90–110), measured" in report  # MFU
    # distributed: 1,550 / (2 × 950) = 82%; all-reduce alone 5 ms; start-up 3 s; largest worker peak 408 MiB
    assert ("| torch/eager/data_parallelx2 | DDP | 2 | 1,550 (1,500–1,600) | 82% (77%–86%) | torch/eager | 5 | 24 "
            "| 1 | 3 | 408 | yes | 2/2 |") in report
    assert "| tensorflow/graph/parameter_serverx2 | ParameterServerStrategy | 2 | 700 |" in report
    new = trial("torch", "eager", seed=7)
    new.order, new.mfu = Order(1, 1, 0), Mfu(missing="no ceiling kept for this machine")
    with Store(schema3_store) as store:
        store.put(new, "adaptive")
        results = store.results()
    assert len(results) == 11 and next(r for r in results if r.key == new.key) == new


def test_a_schema_3_result_migrates_its_extras_and_keeps_a_figure_it_has_no_field_for():
    result = trial("torch", "eager")
    result.distributed = Distributed(strategy="DDP", sync={"per_step_s": 0.01}, replicas_identical=True)
    result.mfu, result.order = Mfu(value=0.2, ceiling_flops_per_s=1e11, ceiling_range=[1e11, 1e11]), Order(2, 3, 1)
    result.ceiling_probe = CeilingProbe("failed", reason="OSError: no", wall_s=0.1, where="trial process")
    result.adaptive_repeats = AdaptiveRepeats(3, 4, 2)
    assert TrialResult.from_dict(result.to_dict()) == result
    sections = {name: dataclasses.asdict(getattr(result, name)) for name in MOVED_IN_4}
    sections["distributed"] = {k: v for k, v in sections["distributed"].items() if v not in (None, "", [], {})}
    sections["distributed"]["in_flight_s"] = 0.3  # a figure an older bakeoff wrote
    old = {**result.to_dict(), **dict.fromkeys(MOVED_IN_4), "schema_version": 3,
           "extras": {**result.extras, **sections}}
    migrated = TrialResult.from_dict(old)
    assert migrated.distributed == dataclasses.replace(result.distributed, other={"in_flight_s": 0.3})
    assert (migrated.mfu, migrated.order, migrated.ceiling_probe, migrated.adaptive_repeats) == (
        result.mfu, result.order, result.ceiling_probe, result.adaptive_repeats)
    assert migrated.extras == result.extras
    row = migrate({"schema_version": 3, "extras": {"log": "a.log", "order": {"position": 1, "of": 1, "seed": 0}},
                   "training": {}})  # a listing row's part of a result
    assert row["extras"] == {} and row["order"] == {"position": 1, "of": 1, "seed": 0}
    assert row["execution"] == {"log": "a.log"}  # 4 → 5
