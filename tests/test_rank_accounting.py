"""Every rank of a trial accounted for (#51): a group whose every process exited 0 but one rank wrote no result is
a failed trial naming that rank, never an "ok" made of the others; a rank's result that shows on shared storage a
little late is waited for. The group's members are small stand-ins (no framework) put in place of the launcher's."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from bakeoff.core.contract import TrialRequest
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec, Status
from bakeoff.run import launchers
from bakeoff.run.executors import local
from bakeoff.trial.main import rank_result_path

SPEC = RunSpec(workload="mnist", framework="torch", parallelism="multi_worker", workers=2, device="cpu",
               max_steps=2)


def _writes_result(rank: int) -> str:
    text = json.dumps(TrialResult(spec=SPEC.to_dict(), key=SPEC.key(), status=Status.OK).to_dict())
    return (f"import sys; from pathlib import Path; from bakeoff.trial.main import rank_result_path; "
            f"rank_result_path(Path(sys.argv[1]), {rank}).write_text({text!r})")


def _stand_ins(monkeypatch, *scripts: str) -> None:
    """The launcher's plan for SPEC, its ranks replaced by ``scripts`` (each given the result path its request
    names)."""
    def plan(spec, args, env, hosts=None, **_):
        result = str(TrialRequest.read(Path(args[0])).result)
        members = [launchers.Member(f"worker {i}", [sys.executable, "-c", script, result], env, True,
                                    hosts[i] if hosts else "") for i, script in enumerate(scripts)]
        return launchers.Plan("tf_config", members, len(scripts), len(scripts), 1)

    monkeypatch.setattr(launchers, "plan", plan)


def test_a_rank_that_wrote_no_result_fails_the_trial_naming_it(monkeypatch, tmp_path):
    _stand_ins(monkeypatch, _writes_result(0), "pass")  # rank 1 exits 0 and writes nothing
    result = local.run_one(SPEC, 60, tmp_path / "logs")
    assert result.status is Status.FAILED
    assert result.reason.startswith("rank 1 of 2 wrote no result although every process exited 0"), result.reason
    assert result.distributed.first_failure == "rank 1"


def test_across_nodes_a_missing_rank_is_waited_for_then_named(monkeypatch, tmp_path):
    monkeypatch.setattr(local, "RANK_GRACE_S", 1.0)
    _stand_ins(monkeypatch, "pass", _writes_result(1))
    # two hosts: the group's files on the store's folder, one unit per host (both started here: no placement)
    result = local.run_one(SPEC, 60, tmp_path / "logs", hosts=["h1", "h2"])
    assert result.status is Status.FAILED
    assert result.reason.startswith("rank 0 of 2 wrote no result within 1 s"), result.reason
    assert list((tmp_path / "tmp").iterdir()) == []  # the trial's shared folder is gone with it


def test_a_rank_result_that_shows_late_is_read(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(TrialResult(spec=SPEC.to_dict(), key=SPEC.key(), status=Status.OK).to_dict()))
    late = rank_result_path(path, 1)
    writer = threading.Timer(1.0, lambda: late.write_text(path.read_text()))
    writer.start()
    results = launchers.rank_results(path, 2, grace_s=30)  # rank 1's file is not there yet when it is called
    writer.join()
    assert [r is not None for r in results] == [True, True]
    assert launchers.rank_results(Path(tmp_path / "none.json"), 1) == [None]  # no grace: no wait
