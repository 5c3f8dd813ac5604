"""Contracts: RunSpec identity and validation, TrialResult versions, the SQLite store."""

from __future__ import annotations

import json
import sqlite3

import pytest

from bakeoff.core.result import SCHEMA_VERSION, TrialResult
from bakeoff.core.spec import Execution, Framework, RunSpec, SpecError, Status
from bakeoff.results.store import Store, export


def spec(**kw) -> RunSpec:
    return RunSpec(**{"workload": "text_classifier", "framework": "torch", "max_steps": 10, **kw})


def test_runspec_normalises_strings_and_is_hashable():
    a = spec(execution="graph", data={"train": "x.csv", "label_column": "y"})
    b = RunSpec(workload="text_classifier", framework=Framework.TORCH, execution=Execution.GRAPH, max_steps=10,
                data=(("train", "x.csv"), ("label_column", "y")))
    assert a == b and hash(a) == hash(b) and a.key() == b.key()
    assert {a, b} == {a}
    assert a.data == (("label_column", "y"), ("train", "x.csv"))
    with pytest.raises(AttributeError):
        a.seed = 3  # frozen


def test_runspec_json_round_trip_and_key_changes_with_any_field():
    a = spec(seed=3, batch_size=16)
    back = RunSpec.from_dict(json.loads(a.to_json()))
    assert back == a and back.key() == a.key()
    assert spec(seed=4, batch_size=16).key() != a.key()
    assert a.label() == "torch/eager"
    assert spec(precision="bf16", grad_accum=4).label() == "torch/eager/bf16/accum4"


@pytest.mark.parametrize(("kw", "message"), [
    ({"framework": "mxnet"}, "unknown framework 'mxnet'; accepted: torch, tensorflow, jax"),
    ({"execution": "jit"}, "unknown execution mode 'jit'; accepted: eager, graph, xla"),
    ({"precision": "fp8"}, "accepted: fp32, bf16, fp16"),
    ({"batch_size": 0}, "batch_size must be a positive integer"),
    ({"max_steps": None}, "needs a budget"),
    # each replica would stop on its own clock and leave the others waiting in a collective
    ({"parallelism": "data_parallel", "workers": 2, "max_seconds": 60},
     "max_seconds 60 cannot stop 2 synchronous replicas.*give the budget as max_steps or max_epochs"),
])
def test_runspec_rejects_bad_values_naming_the_accepted_ones(kw, message):
    with pytest.raises(SpecError, match=message):
        spec(**kw)


def test_runspec_from_dict_rejects_unknown_fields():
    with pytest.raises(SpecError, match="unknown spec field.*colour"):
        RunSpec.from_dict({"workload": "w", "framework": "torch", "max_steps": 1, "colour": "red"})


def _result(s: RunSpec, status: Status = Status.OK) -> TrialResult:
    return TrialResult(spec=s.to_dict(), key=s.key(), status=status, step_times_s=[1.0, 0.5, 0.25],
                       losses=[0.7, 0.6, 0.5], curve=[{"step": 3, "train_s": 1.75, "metric": 0.8}],
                       throughput={"examples_per_s": 128.0})


def test_trial_result_rejects_unknown_schema_version():
    raw = _result(spec()).to_dict()
    assert TrialResult.from_dict(raw).status is Status.OK
    raw["schema_version"] = SCHEMA_VERSION + 1
    refused = f"schema_version {SCHEMA_VERSION + 1}.*reads versions 2 to {SCHEMA_VERSION}.*newer bakeoff"
    with pytest.raises(SpecError, match=refused):
        TrialResult.from_dict(raw)


def test_store_keeps_results_and_every_raw_sample(tmp_path):
    a, b = spec(seed=1), spec(seed=2, framework="tensorflow")
    with Store(tmp_path / "r.sqlite") as store:
        store.put(_result(a), "s1")
        store.put(_result(b, Status.FAILED), "s2")
        assert store.statuses() == {a.key(): Status.OK, b.key(): Status.FAILED}
        assert [r.key for r in store.results(suite="s1")] == [a.key()]
        assert store.samples(a.key(), "step_time") == [(1, None, 1.0), (2, None, 0.5), (3, None, 0.25)]
        assert store.samples(a.key(), "eval") == [(3, 1.75, 0.8)]
        store.put(_result(a), "s1")  # replacing a trial replaces its samples, no duplicates
        assert len(store.samples(a.key(), "loss")) == 3
        assert store.suites() == ["s1", "s2"]
    # plain SQL works without bakeoff
    rows = sqlite3.connect(tmp_path / "r.sqlite").execute("SELECT label, status FROM trials ORDER BY seed").fetchall()
    assert rows == [("torch/eager", "ok"), ("tensorflow/eager", "failed")]


def test_a_retired_mode_is_refused_with_why():
    with pytest.raises(SpecError, match=r"unknown parallelism 'horovod' \(bakeoff never had a horovodrun launcher.*"
                                        r"accepted: none, data_parallel, multi_worker, parameter_server$"):
        spec(parallelism="horovod", workers=2)


def test_a_stored_trial_of_a_retired_mode_is_read_past_with_why(tmp_path, caplog):
    kept, retired = spec(seed=1), spec(seed=2, parallelism="data_parallel", workers=2)
    with Store(tmp_path / "r.sqlite") as store:
        store.put(_result(kept), "s1")
        store.put(_result(retired, Status.UNSUPPORTED), "s1")
    # as an older bakeoff stored it: a horovod trial, recorded unsupported (written by hand, not by this bakeoff)
    db = sqlite3.connect(tmp_path / "r.sqlite")
    raw = json.loads(db.execute("SELECT result FROM trials WHERE key = ?", (retired.key(),)).fetchone()[0])
    raw["spec"]["parallelism"] = "horovod"
    db.execute("UPDATE trials SET result = ? WHERE key = ?", (json.dumps(raw), retired.key()))
    db.commit()
    db.close()
    with Store(tmp_path / "r.sqlite", readonly=True) as store:
        assert [r.key for r in store.results()] == [kept.key()]
    assert "1 stored trial(s) of a retired mode read past, horovod: bakeoff never had a horovodrun" in caplog.text
    assert f"{retired.key()} (parallelism 'horovod', unsupported)" in caplog.text


def test_store_refuses_other_versions(tmp_path):
    path = tmp_path / "r.sqlite"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '99' WHERE name = 'store_version'")
    db.commit()
    with pytest.raises(SpecError, match="version 99"):
        Store(path)


def test_export_csv_and_json(tmp_path):
    results = [_result(spec(seed=1))]
    csv_text = export(results, tmp_path / "t.csv").read_text().splitlines()
    assert csv_text[0].startswith("key,workload,preset,label")
    assert ",128.0," in csv_text[1]
    data = json.loads(export(results, tmp_path / "t.json").read_text())
    assert data["trials"][0]["step_times_s"] == [1.0, 0.5, 0.25]
    with pytest.raises(SpecError, match="json or .csv"):
        export(results, tmp_path / "t.xlsx")


MOUNTINFO = """\
27 1 252:0 / / rw,relatime - ext4 /dev/vda rw
60 27 0:50 / /shared rw,relatime - nfs4 server:/export rw,vers=4.2
61 60 0:51 / /shared/local\\040disk rw,relatime - ext4 /dev/vdb rw
"""


def test_the_file_system_of_a_path_is_its_longest_mount_point() -> None:
    from pathlib import Path

    from bakeoff.results.disk import file_system

    assert file_system(Path("/shared/results/bakeoff.sqlite"), MOUNTINFO) == "nfs4"
    assert file_system(Path("/shared/local disk/bakeoff.sqlite"), MOUNTINFO) == "ext4"
    assert file_system(Path("/sharedother/bakeoff.sqlite"), MOUNTINFO) == "ext4"  # a prefix is not a parent
    assert file_system(Path("/shared"), MOUNTINFO) == "nfs4"


def test_a_store_on_a_network_file_system_keeps_a_rollback_journal_not_wal(tmp_path, monkeypatch) -> None:
    """SQLite's WAL shares its index through memory of one machine: on NFS a store must not use it."""
    from bakeoff.results import disk

    with Store(tmp_path / "local.sqlite") as local:
        assert local._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    monkeypatch.setattr(disk, "file_system", lambda path: "nfs4")
    with Store(tmp_path / "shared.sqlite") as shared:
        assert shared._db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    with Store(tmp_path / "local.sqlite") as moved:  # a store copied onto NFS leaves WAL when opened there
        assert moved._db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
