"""The parent–child trial contract is written in one place (:mod:`bakeoff.core.contract` for what the parent asks,
:mod:`bakeoff.core.result`'s ``setup`` and ``execution`` sections for what comes back): a request travels as one
file, the launcher's per-process variables have one reader and writer, results stored with the old free ``extras``
keys load into the typed sections, and no other module reads a contract variable or a moved key by its string."""

from __future__ import annotations

import ast
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.core.contract import Placement, TrialRequest
from bakeoff.core.result import Execution, Setup, TrialResult
from bakeoff.core.spec import RunSpec, SpecError, Status
from bakeoff.results.store import Store

SRC = Path(__file__).resolve().parent.parent / "src" / "bakeoff"

# Typed in from the contract as it was before issue #53 (grep -rn "BAKEOFF_" src/ at 4bb7d66): the variables the
# parent set for its trial processes.
CONTRACT_VARIABLES = {"BAKEOFF_THREADS", "BAKEOFF_RANK", "BAKEOFF_LOCAL_RANK", "BAKEOFF_LAUNCHED_AT",
                      "BAKEOFF_KEEP_MODEL", "BAKEOFF_PROFILE", "BAKEOFF_PROFILE_STEPS", "BAKEOFF_NO_EVALUATION",
                      "BAKEOFF_PROBE_CEILING", "BAKEOFF_PROGRESS_S"}
# The user's settings, which stay environment variables read where they act (docs/architecture.md, "Contracts"),
# and the janitor's own variable of its shell script (bakeoff.core.files).
USER_SETTINGS = {"BAKEOFF_HEARTBEAT_S", "BAKEOFF_MACHINE_LOCK", "BAKEOFF_GEMM_RATES", "BAKEOFF_SPEECH_CACHE",
                 "BAKEOFF_POWERCAP_ROOT", "BAKEOFF_TEMPORARY"}
# The extras keys the two sides read of each other's before issue #53 (grep -rn 'extras\[\|extras.get(' src/ at
# 4bb7d66), now fields of the setup and execution sections.
MOVED_KEYS = {"config", "data", "started_at", "launch_s", "rank", "kept_model", "executor", "timeout_s", "hosts",
              "nodes", "host", "log", "tensorboard", "network", "port_retries", "suite"}


def _spec(**fields) -> RunSpec:
    return RunSpec(workload="mnist", **{"framework": "torch", "max_steps": 3, "batch_size": 32, **fields})


def test_a_request_round_trips_through_its_file_and_a_key_it_does_not_know_is_refused(tmp_path):
    request = TrialRequest(_spec(), tmp_path / "result.json", checkpoint_dir=tmp_path / "ckpt",
                           tensorboard_dir=None, keep_dir=tmp_path / "model", probe_ceiling=True,
                           profile_dir=tmp_path / "prof", profile_steps=3, evaluate=False, progress_s=0.5)
    path = request.write(tmp_path / "request.json")
    assert TrialRequest.read(path) == request  # a round trip: plumbing
    raw = json.loads(path.read_text())
    assert raw["spec"]["workload"] == "mnist" and raw["keep_dir"] == str(tmp_path / "model")
    assert raw["tensorboard_dir"] is None and raw["evaluate"] is False
    with pytest.raises(SpecError, match=r"unknown keys \['keep_model'\]"):
        TrialRequest.from_dict({**raw, "keep_model": "x"})
    with pytest.raises(SpecError, match="needs 'spec' and 'result'"):
        TrialRequest.from_dict({"spec": raw["spec"]})


def test_a_placement_is_the_launchers_variables_and_reads_back_from_them():
    placement = Placement(rank=1, local_rank=0, threads=4, launched_at=1700000000.25)
    assert placement.env() == {"BAKEOFF_RANK": "1", "BAKEOFF_LOCAL_RANK": "0", "BAKEOFF_THREADS": "4",
                               "BAKEOFF_LAUNCHED_AT": "1700000000.25"}
    assert Placement.read({"BAKEOFF_RANK": "2", "BAKEOFF_THREADS": "3", "OMP_NUM_THREADS": "9"}) == Placement(
        rank=2, threads=3)
    assert Placement.read({}) == Placement() and Placement().env() == {}


def test_every_member_of_a_group_is_given_the_request_file_alone():
    from bakeoff.run import launchers

    spec = _spec(parallelism="multi_worker", workers=2, framework="tensorflow")
    plan = launchers.plan(spec, ["/t/request.json"], {}, ports=[1, 2], cores=4)
    assert [m.command[-3:] for m in plan.members] == [["-m", "bakeoff.trial", "/t/request.json"]] * 2
    assert [(m.env["BAKEOFF_RANK"], m.env["BAKEOFF_LOCAL_RANK"], m.env["BAKEOFF_THREADS"]) for m in plan.members] \
        == [("0", "0", "2"), ("1", "1", "2")]


# A result as schema 4 wrote it, typed in: the contract's keys free in extras.
OLD = {
    "schema_version": 4, "key": "old-trial", "status": "timeout", "reason": "no result after 60 s; killed",
    "spec": {"workload": "mnist", "framework": "torch", "max_steps": 3},
    "training": {}, "extras": {
        "config": {"hidden": 64}, "data": {"rows": {"train": 1000, "test": 200}}, "started_at": 1700000000.5,
        "launch_s": 0.75, "rank": 0, "kept_model": {"directory": "models/m", "keep_s": 0.1},
        "executor": {"name": "slurm", "job_id": "105"}, "timeout_s": 59.5, "hosts": ["n1", "n1", "n2", "n2"],
        "nodes": ["a", "b"], "host": "n1", "log": "logs/old-trial.log", "tensorboard": "tb/old-trial",
        "network": {"rendezvous": "n1"}, "port_retries": 1, "suite": "quick",
        "traceback": "Traceback ...", "dynamo_graph_breaks_at": ["x.py:1"]}}


def _check_old(result: TrialResult) -> None:
    assert result.setup == Setup(config={"hidden": 64}, data={"rows": {"train": 1000, "test": 200}},
                                 started_at=1700000000.5, launch_s=0.75, rank=0,
                                 kept_model={"directory": "models/m", "keep_s": 0.1})
    assert result.execution == Execution(executor={"name": "slurm", "job_id": "105"}, timeout_s=59.5,
                                         hosts=["n1", "n1", "n2", "n2"], nodes=["a", "b"], host="n1",
                                         log="logs/old-trial.log", tensorboard="tb/old-trial",
                                         network={"rendezvous": "n1"}, port_retries=1, suite="quick")
    # the free notes stay free
    assert result.extras == {"traceback": "Traceback ...", "dynamo_graph_breaks_at": ["x.py:1"]}


def test_a_result_stored_with_the_old_free_keys_loads_into_the_typed_sections():
    _check_old(TrialResult.from_dict(json.loads(json.dumps(OLD))))


def test_a_store_holding_an_old_result_reads_it_typed_in_results_rows_and_timeouts(tmp_path):
    path = tmp_path / "r.sqlite"
    spec = RunSpec.from_dict(OLD["spec"])
    with Store(path) as store:  # a row for the trial, then its result replaced by the old one, as stored then
        store.put(TrialResult(spec=spec.to_dict(), key="old-trial", status=Status.TIMEOUT), "quick")
    with sqlite3.connect(path) as db:
        assert db.execute("UPDATE trials SET result = ? WHERE key = 'old-trial'", (json.dumps(OLD),)).rowcount == 1
    with Store(path, readonly=True) as store:
        [result] = store.results()
        [row] = store.trials()
        assert store.timeouts() == {"old-trial": 59.5}
    _check_old(result)
    assert (row.execution.log, row.execution.tensorboard) == ("logs/old-trial.log", "tb/old-trial")
    assert "log" not in row.extras


def _string_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, key) of every read or write of an ``extras`` key by its string: ``x.extras["k"]``,
    ``x.extras.get("k")`` (``pop``, ``setdefault``), ``x.extras.update(k=...)``."""
    def is_extras(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "extras") or (
            isinstance(node, ast.Name) and node.id == "extras")

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and is_extras(node.value) and isinstance(node.slice, ast.Constant):
            found.append((node.lineno, node.slice.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_extras(node.func.value):
            if node.func.attr in ("get", "pop", "setdefault") and node.args and isinstance(node.args[0], ast.Constant):
                found.append((node.lineno, node.args[0].value))
            found += [(node.lineno, k.arg) for k in node.keywords if node.func.attr == "update"]
    return found


def test_no_module_but_the_contracts_reads_a_contract_variable_or_a_moved_key_by_its_string():
    variables, keys = [], []
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        tree = ast.parse(path.read_text(), filename=name)
        if name != "core/contract.py":
            for node in ast.walk(tree):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                        and node.value.startswith("BAKEOFF_") and node.value.isidentifier()
                        and node.value not in USER_SETTINGS):
                    variables.append(f"{name}:{node.lineno}: {node.value}")
        if name != "core/result.py":  # its migration moves them
            keys += [f"{name}:{line}: extras[{key!r}]" for line, key in _string_reads(tree) if key in MOVED_KEYS]
    assert not variables, "contract variables named outside bakeoff.core.contract:\n" + "\n".join(variables)
    assert not keys, "moved extras keys read outside bakeoff.core.result:\n" + "\n".join(keys)
    contract = (SRC / "core" / "contract.py").read_text()
    assert all(f'"{v}"' in contract for v in ("BAKEOFF_THREADS", "BAKEOFF_RANK", "BAKEOFF_LOCAL_RANK",
                                               "BAKEOFF_LAUNCHED_AT", "BAKEOFF_PROGRESS_S"))
    gone = CONTRACT_VARIABLES - {"BAKEOFF_THREADS", "BAKEOFF_RANK", "BAKEOFF_LOCAL_RANK", "BAKEOFF_LAUNCHED_AT",
                                 "BAKEOFF_PROGRESS_S"}
    assert not [v for v in gone if v in contract]  # fields of the request now, not variables


def test_the_string_search_finds_what_it_looks_for():
    tree = ast.parse('r.extras["config"]; r.extras.get("log"); extras.pop("x"); r.extras.update(hosts=[1])')
    assert sorted(k for _, k in _string_reads(tree)) == ["config", "hosts", "log", "x"]


def test_a_trial_process_does_what_its_request_asks(tmp_path):
    pytest.importorskip("torch")
    request = TrialRequest(_spec(device="cpu", eval_every=1), tmp_path / "result.json", evaluate=False,
                           progress_s=0.0)
    run = subprocess.run([sys.executable, "-m", "bakeoff.trial", str(request.write(tmp_path / "request.json"))],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, **Placement(threads=1, launched_at=1.0).env()})
    assert run.returncode == 0, run.stderr[-3000:]
    result = TrialResult.from_dict(json.loads((tmp_path / "result.json").read_text()))
    assert result.status is Status.OK, result.reason
    assert result.curve == [] and result.training.evaluation.startswith("none")  # evaluate=False: never evaluated
    assert [line for line in run.stderr.splitlines() if line.startswith("bakeoff progress:")] == [
        "bakeoff progress: step 1/3", "bakeoff progress: step 2/3", "bakeoff progress: step 3/3"]  # every 0 s
    assert result.setup.config is not None and result.setup.data["rows"]["train"] > 0
    assert result.setup.launch_s is not None and result.setup.launch_s > 1.0  # since the "launch" at t = 1.0 s
    assert result.setup.kept_model is None and result.profile is None and result.ceiling_probe is None
