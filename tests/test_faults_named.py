"""Faults named for what they are (issue #50, item 5): a full disk is a full disk, not a damaged store; two runs on
one store never run one trial at once; a JSON-lines file with other keys is one error naming the keys it has; a
killed run leaves nothing in the temporary folder, a resumed one nothing in its logs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fake_results
from bakeoff.core import registry
from bakeoff.core.contract import TrialRequest
from bakeoff.core.spec import RunSpec, Status
from bakeoff.data import DataError
from bakeoff.data.text import load_text_dataset
from bakeoff.results.store import Store
from test_faults import MNIST_RUN, fill, fill_once_training, small_disk


def bakeoff(*args: str, cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bakeoff.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=timeout)


# --- a JSON-lines file whose objects have other keys ---------------------------------------------------------------

def test_a_jsonl_file_with_other_keys_is_one_error_naming_the_keys_found(tmp_path):
    """Before: the same bad-row error for each of its 400 lines, then, with the suggested skip_bad_rows=true, 'no
    JSON objects' (there were 400)."""
    data = tmp_path / "reviews.jsonl"
    data.write_text("".join(json.dumps({"review": f"a review, number {i}", "stars": i % 5}) + "\n" for i in range(400)))
    run = ("run", "--workload", "text_classifier", "--framework", "torch", "--max-steps", "1", "--no-report",
           "--store", str(tmp_path / "r.sqlite"), "--data", f"train={data}")
    said = (f"{data}: the text key 'text' and the label key 'label' are in none of its 400 JSON objects; keys "
            "found: 'review' (in 400 of them), 'stars' (in 400 of them). Name the keys to read with --data "
            "text_column=KEY --data label_column=KEY")
    for skip in ((), ("--data", "skip_bad_rows=true")):
        done = bakeoff(*run, *skip, cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert said in done.stderr and done.stderr.count(str(data)) == 1, done.stderr
        assert "line " not in done.stderr and "no JSON objects" not in done.stderr
    assert not (tmp_path / "r.sqlite").exists()
    with pytest.raises(DataError) as one_key:
        load_text_dataset({"train": str(data), "text_column": "review"})
    assert str(one_key.value) == (f"{data}: the label key 'label' is in none of its 400 JSON objects; keys found: "
                                  "'review' (in 400 of them), 'stars' (in 400 of them). Name the key to read with "
                                  "--data label_column=KEY")
    assert len(load_text_dataset({"train": str(data), "text_column": "review", "label_column": "stars"}).classes) == 5


def test_skip_bad_rows_that_leaves_no_row_says_every_row_was_bad(tmp_path):
    data = tmp_path / "reviews.jsonl"
    data.write_text("".join(json.dumps({"text": " ", "label": i % 2}) + "\n" for i in range(30)))
    with pytest.raises(DataError) as caught:
        load_text_dataset({"train": str(data), "skip_bad_rows": "true"})
    assert str(caught.value) == (f"{data}: no usable rows: all 30 are bad and skip_bad_rows left them all out "
                                 "(the first, line 1: empty text in column 'text')")


# --- a full disk ---------------------------------------------------------------------------------------------------

def test_a_full_disk_is_named_and_the_store_left_untouched(tmp_path):
    """Before: 'not a bakeoff results store (disk I/O error): a damaged or other file. Keep it aside and start a new
    store' — and after freeing space the store read fine. (SQLite reports its WAL index not growing as an I/O
    error.)"""
    with small_disk(tmp_path / "disk", "2m") as disk:
        store = disk / "r.sqlite"
        with Store(store) as s:
            s.put(fake_results.trial("torch", "eager"), "quick")
        fill(disk)
        before = sorted(p.name for p in disk.iterdir()), store.read_bytes()
        for command in (("report", "--out", str(tmp_path / "report")), MNIST_RUN):
            done = bakeoff(*command, "--store", str(store), cwd=tmp_path)
            assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
            assert (f"cannot open the store {store}: no space left on {disk} (0.0 MB free), free 5 MB or more there "
                    "and run the same command again (SQLite: disk I/O error). The store is untouched"
                    in done.stderr), done.stderr
            assert "damaged" not in done.stderr
            assert (sorted(p.name for p in disk.iterdir()), store.read_bytes()) == before  # not even a -wal left
        new = bakeoff(*MNIST_RUN, "--store", str(disk / "new.sqlite"), cwd=tmp_path)
        assert new.returncode == 2 and f"cannot open the store {disk / 'new.sqlite'}: no space left on {disk}" in \
            new.stderr and "No store was created" in new.stderr, new.stderr
        assert sorted(p.name for p in disk.iterdir()) == before[0]
        (disk / "filler").unlink()
        shown = bakeoff("show", "--store", str(store), cwd=tmp_path)
        assert shown.returncode == 0 and "1 trials (1 ok)" in shown.stdout, shown.stdout + shown.stderr


@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
def test_a_result_that_cannot_be_written_anywhere_leaves_no_part_file_and_the_resume_stores_it(tmp_path):
    """Before: a 0-byte ``unstored-*.part`` stayed in the logs after the resumed run succeeded. The store and its
    logs share one small disk, filled once the trial has started: neither can take the result."""
    with small_disk(tmp_path / "disk", "4m") as disk:
        store, logs = disk / "r.sqlite", disk / "r" / "logs"
        stderr = fill_once_training(disk, store, logs, tmp_path)
        printed, said = stderr.splitlines()  # the result (JSON), whose reason may quote the trial's traceback
        assert json.loads(printed)["spec"]["workload"] == "mnist"
        assert said.startswith(f"bakeoff run: error: could not store mnist/tiny torch/eager seed 0 in {store}: no "
                               f"space left on {disk} (0.0 MB free), free 5 MB or more there"), said
        assert "is printed above (JSON), as it could not be written either" in said
        assert [p.name for p in logs.iterdir() if p.name.startswith("unstored-")] == []  # no empty .part
        (disk / "filler").unlink()
        again = bakeoff(*MNIST_RUN, "--store", str(store), cwd=tmp_path)
        assert again.returncode == 0 and "ran 1 trials" in again.stdout, again.stdout + again.stderr
        assert [p.name for p in logs.iterdir() if p.name.startswith("unstored-")] == []
        with Store(store) as s:
            assert [r.status for r in s.results()] == [Status.OK]


# --- a killed run ----------------------------------------------------------------------------------------------------

@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
def test_killing_bakeoff_run_leaves_no_trial_folder_in_the_temporary_folder(tmp_path):
    """Before: `kill -9` of `bakeoff run` (which the kernel's tether turns into the trial's death too) left its
    ``bakeoff-trial-*`` folder in the temporary folder for good."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    run = subprocess.Popen([sys.executable, "-m", "bakeoff.cli", "run", "--workload", "mnist", "--framework", "torch",
                            "--execution", "eager", "--max-steps", "100000", "--eval-every", "100000", "--store",
                            "r.sqlite", "--no-report"], cwd=tmp_path, env={**os.environ, "TMPDIR": str(temporary)},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "r" / "logs").glob("*.log")) and time.monotonic() < deadline:
            assert run.poll() is None, "the run ended before its trial started"
            time.sleep(0.1)
        [folder] = temporary.glob("bakeoff-trial-*")
        [request] = (tmp_path / "r" / "logs").glob("*.request.json")  # beside the trial's log
        assert TrialRequest.read(request).result.parent == folder  # the trial's own folder, in use
    finally:
        run.kill()
        run.wait()
    deadline = time.monotonic() + 15
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(temporary.iterdir()) == [], list(temporary.rglob("*"))[:5]


def test_a_folder_is_removed_when_its_owner_is_killed_though_a_job_steps_end_signals_its_janitor_too(tmp_path):
    """A Slurm step's end (scancel, a timeout) sends SIGTERM to every process of the step, then SIGKILL: a node's
    compile caches (``bakeoff-node-*``) were left on each node. The janitor outlives the signal, then its owner."""
    owner = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom bakeoff.core.files import temporary_folder\n"
        f"with temporary_folder('bakeoff-node-', {str(tmp_path)!r}) as f:\n"
        "    print(f, flush=True)\n    time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)
    folder = Path(owner.stdout.readline().strip())
    assert folder.is_dir() and folder.parent == tmp_path
    janitors = [p for p in Path("/proc").glob("[0-9]*") if _environ(p).get("BAKEOFF_TEMPORARY") == str(folder)]
    assert janitors  # the shell, and the `cat` reading the pipe
    for janitor in janitors:
        os.kill(int(janitor.name), signal.SIGTERM)  # the step's SIGTERM reaches the janitor first
    owner.kill()  # then its owner dies as a SIGKILL ends it
    owner.wait()
    deadline = time.monotonic() + 15
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not folder.exists() and list(tmp_path.iterdir()) == []


def test_a_folder_whose_janitor_died_with_its_owner_is_swept_by_the_next_unit_on_the_node(tmp_path):
    """A Slurm step's end SIGKILLs the janitor too (it is of the step): the next unit on the node sweeps what its dead
    owner left, and never a live process's folder, nor one whose name holds no process id."""
    from bakeoff.core.files import owned_prefix, sweep_orphans

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a process id no process holds now
    orphan = tmp_path / f"bakeoff-node-{dead.pid}-abc123"
    (orphan / "triton").mkdir(parents=True)
    live = tmp_path / f"{owned_prefix('bakeoff-node-')}def456"  # this test's own process: alive
    live.mkdir()
    unowned = tmp_path / "bakeoff-node-xyz789"  # a name from before the owner was named in it
    unowned.mkdir()
    assert sweep_orphans("bakeoff-node-", tmp_path) == [orphan]
    assert not orphan.exists() and live.is_dir() and unowned.is_dir()


def _environ(process: Path) -> dict[str, str]:
    try:
        raw = (process / "environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


# --- two runs on one store ----------------------------------------------------------------------------------------

GATE = """
import os
gate = os.environ.get("BAKEOFF_TEST_GATE")
if gate:
    import bakeoff.trial.loop as loop
    real_train = loop.train

    def train(engine, data, result, *args, **kwargs):
        # Each trial says it is training, then waits for the test to open the gate.
        import pathlib, time
        pathlib.Path(f"{gate}.seed{engine.spec.seed}.pid{os.getppid()}").touch()
        while not pathlib.Path(gate).exists():
            time.sleep(0.05)
        return real_train(engine, data, result, *args, **kwargs)

    loop.train = train
"""


def wait_until(condition, what: str, runs: list[subprocess.Popen], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        assert all(run.poll() is None for run in runs), f"a run ended while waiting for {what}"
        time.sleep(0.1)


@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
def test_two_concurrent_runs_on_one_store_never_run_one_trial_twice(tmp_path):
    """Before: two `bakeoff run --concurrent` on one store both ran every trial, and the store silently kept the
    second's figures (printed 1,012 ex/s, stored 493). Here the first run's seed 0 and the second's seed 1 are held
    training until both runs have met the other's claim."""
    (tmp_path / "sitecustomize.py").write_text(GATE)
    gate = tmp_path / "gate"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}",
           "BAKEOFF_TEST_GATE": str(gate)}
    command = [sys.executable, "-m", "bakeoff.cli", "run", "--workload", "mnist", "--framework", "torch", "--execution",
               "eager", "--max-steps", "5", "--eval-every", "5", "--no-report", "--repeats", "2", "--concurrent",
               "--store", str(tmp_path / "r.sqlite")]  # 5 steps: 2 timed after the 3 of warm-up
    outs = [tmp_path / "first.txt", tmp_path / "second.txt"]
    runs: list[subprocess.Popen] = []
    try:
        with outs[0].open("w") as sink:
            runs.append(subprocess.Popen(command, cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT))
        wait_until(lambda: list(tmp_path.glob("gate.seed0.*")), "the first run's seed 0 to train", runs)
        with outs[1].open("w") as sink:
            runs.append(subprocess.Popen(command, cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT))
        wait_until(lambda: list(tmp_path.glob(f"gate.seed*.pid{runs[1].pid}")), "the second run to train", runs)
        gate.touch()
        for run in runs:
            assert run.wait(300) == 0, "\n".join(out.read_text() for out in outs)
    finally:
        for run in runs:
            run.kill()
    first, second = (" ".join(out.read_text().split()) for out in outs)  # as one line: the console wraps
    first_pid, second_pid = (run.pid for run in runs)
    assert [p.name for p in sorted(tmp_path.glob("gate.seed*"))] == [f"gate.seed0.pid{first_pid}",
                                                                     f"gate.seed1.pid{second_pid}"]  # each ran once
    assert (f"mnist/tiny torch/eager seed 0 is being run by another bakeoff run on this store (pid {first_pid} on "
            in second) and "running the others first" in second
    # whichever run finished first waited for the other's trial: the first for seed 1, or the second for seed 0
    assert (f"waiting for mnist/tiny torch/eager seed 1, which another bakeoff run on this store is running (pid "
            f"{second_pid} on" in first) or (f"waiting for mnist/tiny torch/eager seed 0, which another bakeoff run on "
                                            f"this store is running (pid {first_pid} on" in second)
    kept = "stored by another bakeoff run on this store since this one started; its result is kept, not measured again"
    assert f"mnist/tiny torch/eager seed 1: {kept}" in first and f"mnist/tiny torch/eager seed 0: {kept}" in second
    assert "ran 1 trials, skipped 1 already in the store" in first and "ran 1 trials, skipped 1" in second
    with Store(tmp_path / "r.sqlite") as store:
        stored = {r.run_spec.seed: r.throughput["examples_per_s"] for r in store.results()}
    printed = {int(seed): figure for text in (first, second)
               for seed, figure in re.findall(r"torch/eager seed (\d): ok ([\d,]+) ex/s", text)}
    assert len(printed) == 2 and printed == {seed: f"{eps:,.0f}" for seed, eps in stored.items()}  # as printed
    assert not list((tmp_path / "r" / "claims").iterdir())  # every claim let go


def test_a_claim_is_refused_while_its_holder_lives_and_free_once_it_is_killed(tmp_path):
    """The kernel frees a dead run's claims, however it died: no stale claim to clear by hand."""
    from bakeoff.results.trial_claims import Claims

    folder = tmp_path / "r" / "claims"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
                               "from bakeoff.results.trial_claims import Claims\n"
                               f"Claims(Path({str(folder)!r})).take('k1', 'mnist/tiny torch/eager seed 0')\n"
                               "print('held', flush=True)\ntime.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        claims = Claims(folder)
        said = claims.take("k1", "the same trial")
        assert said is not None and said.startswith(f"pid {holder.pid} on "), said
        assert claims.take("k2", "another trial") is None  # claims are per trial
    finally:
        holder.kill()
        holder.wait()
    assert claims.take("k1", "the same trial") is None  # at once: the kernel let the killed holder's lock go
    claims.release_all()
    assert list(folder.iterdir()) == []


def test_an_executor_running_several_trials_leaves_a_trial_another_run_holds_and_never_waits_on_it(tmp_path):
    """A cluster's executor takes every job before any result is stored: had it waited for the other run's trial
    while holding its own, two such runs on one store could each wait on the other for good."""
    from bakeoff.core.identity import identify
    from bakeoff.run import runner
    from test_executors import LastFirst

    specs = [RunSpec(workload="mnist", framework="torch", seed=seed, max_steps=2) for seed in (0, 1)]
    held = identify(specs)[0].key()
    holder = subprocess.Popen([sys.executable, "-c", "import time\nfrom pathlib import Path\n"
                               "from bakeoff.results.trial_claims import Claims\n"
                               f"Claims(Path({str(tmp_path / 'r' / 'claims')!r})).take({held!r}, 'seed 0')\n"
                               "print('held', flush=True)\ntime.sleep(120)"], stdout=subprocess.PIPE, text=True)
    said: list[str] = []
    try:
        assert holder.stdout.readline().strip() == "held"
        executor = LastFirst()
        with Store(tmp_path / "r.sqlite") as store:
            summary = runner.run(specs, store, "s", executor=executor, say=said.append)
            stored = [r.run_spec.seed for r in store.results()]
    finally:
        holder.kill()
        holder.wait()
    assert [job.spec.seed for job in executor.submitted] == [1] and stored == [1]
    assert [r.run_spec.seed for r in summary.ran] == [1] and summary.skipped == []
    assert said[0].startswith(f"mnist/tiny torch/eager seed 0 is being run by another bakeoff run on this store "
                              f"(pid {holder.pid} on ")
    assert said[1].startswith("mnist/tiny torch/eager seed 0 is still being run by another bakeoff run on this "
                              f"store (pid {holder.pid} on ")
    assert said[1].endswith("left to it, not run here: its result is stored by that run")
    # this run's claim let go, its file with it; the killed holder's file stays, free for whoever comes next
    assert [p.name for p in (tmp_path / "r" / "claims").iterdir()] == [f"{held}.lock"]
