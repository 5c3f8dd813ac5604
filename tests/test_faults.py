"""Faults a run must survive: SIGINT / SIGTERM mid-trial, a trial killed from outside, bad weights, trial order, two
runs on one machine."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bakeoff.analysis.decide import resolve_weights
from bakeoff.core import registry
from bakeoff.core.result import Order
from bakeoff.core.spec import RunSpec, Status
from bakeoff.plan import order as plan_order
from bakeoff.plan.suite import parse_suite
from bakeoff.run import machine, process, runner
from bakeoff.run.executors import local

TORCH = pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")


def processes_mentioning(text: str) -> dict[int, str]:
    """Live processes whose command line contains ``text`` (zombies have none)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found[int(entry.name)] = cmdline
    return found


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state, _, pgrp = (entry / "stat").read_text().rpartition(")")[2].split()[:3]
            except OSError:
                continue
            if int(pgrp) == pgid and state != "Z":
                members.append(int(entry.name))
    return members


def wait_for(condition, timeout: float = 180, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def gone(text: str, pgid: int | None = None) -> bool:
    """Whether every process mentioning ``text`` (and in group ``pgid``) has gone; SIGKILL takes moments."""
    try:
        wait_for(lambda: not processes_mentioning(text) and not (pgid and group_members(pgid)), timeout=5)
    except AssertionError:
        return False
    return True


@pytest.fixture
def reaper(tmp_path):
    """Process groups a test started; whatever of them (or mentions tmp_path) is left when it ends is killed, so a
    failing test leaves nothing behind either."""
    groups: list[int] = []
    yield groups
    for pid in processes_mentioning(str(tmp_path)):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for pgid in groups:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)


def rows(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    return sqlite3.connect(db).execute("SELECT seed, status, reason FROM trials ORDER BY seed").fetchall()


# --- the order trials run in -------------------------------------------------------------------------------------

ORDER_SUITE = """
repeats = 2
[defaults]
workload = "mnist"
max_steps = 2
[matrix]
framework = ["torch", "tensorflow"]
execution = ["eager", "graph", "xla"]
[[exclude]]
framework = "torch"
execution = "xla"
"""


def test_order_interleaves_frameworks_within_each_repeat_and_keeps_every_trial():
    specs = parse_suite(ORDER_SUITE).specs  # repeat-major, every torch configuration before every TF one
    ordered = plan_order.order(specs, seed=0)
    assert sorted(s.key() for s in ordered) == sorted(s.key() for s in specs)
    frameworks = [(s.repeat, s.framework.value) for s in ordered]
    # torch has 2 configurations, TF 3: they alternate, the rotation puts TF first in repeat 1
    assert frameworks == [(0, "torch"), (0, "tensorflow"), (0, "torch"), (0, "tensorflow"), (0, "tensorflow"),
                          (1, "tensorflow"), (1, "torch"), (1, "tensorflow"), (1, "torch"), (1, "tensorflow")]
    assert plan_order.order(specs, seed=0) == ordered  # the seed fixes the shuffle
    shuffles = {tuple(s.label() for s in plan_order.order(specs, seed=k) if s.framework.value == "tensorflow")
                for k in range(10)}
    assert len(shuffles) > 1  # configurations are shuffled, not kept in suite order


def test_each_result_records_its_position_in_the_run(tmp_path):
    from bakeoff.results.store import Store

    # JAX has no engine yet: each trial is recorded at once as unsupported, no process started
    specs = [RunSpec(workload="mnist", framework="jax", max_steps=2, repeat=r, seed=r) for r in (1, 0)]
    with Store(tmp_path / "r.sqlite") as store:
        summary = runner.run(specs, store, "order", validated=True, order_seed=7)
    assert [r.order for r in summary.ran] == [Order(position=1, of=2, seed=7), Order(position=2, of=2, seed=7)]
    assert [r.spec["repeat"] for r in summary.ran] == [0, 1]


# --- signals and process groups, without a framework -------------------------------------------------------------


def as_from_a_terminal() -> None:
    """In the child before it starts: SIGINT as a terminal gives it. A test run started in the background of a
    non-interactive shell (``cmd &``) inherits SIGINT ignored, and bakeoff, like any program, keeps an inherited
    SIG_IGN: Ctrl-C could not reach such a run, so the SIGINT tests would test nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends it
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", sys.argv[1], "grandchild"])
time.sleep(600)
"""

OWNER = """
import sys, time
from bakeoff.run import process
marker = sys.argv[1]
try:
    with process.interruptible(), process.process_group([sys.executable, "-c", sys.argv[2], marker], "stubborn"):
        print("started", flush=True)
        time.sleep(600)
except process.Interrupted as exc:
    print("stopped", exc.stopped, exc.signal_name, flush=True)
    sys.exit(exc.exit_code)
"""


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_kills_the_whole_group_even_a_process_that_ignores_sigterm(tmp_path, reaper, sig, code):
    marker = str(tmp_path / "owned")
    owner = subprocess.Popen([sys.executable, "-c", OWNER, marker, STUBBORN], stdout=subprocess.PIPE, text=True,
                             preexec_fn=as_from_a_terminal)
    assert owner.stdout.readline() == "started\n"
    [grandchild] = wait_for(lambda: [pid for pid, c in processes_mentioning(marker).items()
                                     if c.endswith(" grandchild ")], 30, "the grandchild")
    reaper.append(os.getpgid(grandchild))
    owner.send_signal(sig)
    out, _ = owner.communicate(timeout=60)
    assert owner.returncode == code
    assert out == f"stopped stubborn {sig.name}\n"
    assert gone(marker, reaper[0]), processes_mentioning(marker)


HOLDER = """
import os, signal, time
from bakeoff.run import process
with process.interruptible():
    try:
        with process.hold():  # as while a result row is written
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the handler runs here, and holds the signal
            print("written")
    except process.Interrupted as exc:
        print("then raised", exc.signal_name, exc.exit_code)
print("restored", signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)
"""


def test_a_signal_waits_until_a_result_is_written_then_interrupts():
    out = subprocess.run([sys.executable, "-c", HOLDER], capture_output=True, text=True, timeout=60)
    assert out.stdout == "written\nthen raised SIGTERM 143\nrestored True\n", out.stderr


# --- SIGKILL is out of memory only with evidence -----------------------------------------------------------------

@pytest.mark.parametrize(("after", "status", "reason"), [
    (process.OomKills(3, "/cg/memory.events"), Status.OUT_OF_MEMORY,
     "out-of-memory killer (oom_kill in /cg/memory.events rose from 2 to 3 during the trial)"),
    (process.OomKills(2, "/cg/memory.events"), Status.FAILED,
     "killed by SIGKILL (no evidence of out-of-memory: oom_kill in /cg/memory.events stayed at 2 during the trial)"),
    (process.OomKills(None, "no cgroup OOM-kill counter is readable"), Status.FAILED,
     "killed by SIGKILL (no evidence of out-of-memory: no cgroup OOM-kill counter is readable)"),
])
def test_sigkill_is_out_of_memory_only_when_the_kernel_counted_a_kill(monkeypatch, after, status, reason):
    monkeypatch.setattr(local, "read_oom_kills", lambda: after)
    spec = RunSpec(workload="mnist", framework="torch", max_steps=2)
    result = local._sigkill_failure(spec, process.OomKills(2, "/cg/memory.events"), 12.0, "last words")
    assert result.status is status and reason in result.reason and "last words" in result.reason


def test_this_machine_counter_is_read_or_says_why_not():
    kills = process.read_oom_kills()
    assert (kills.count is not None and kills.count >= 0 and Path(kills.source).name in
            ("memory.events", "memory.oom_control")) or (kills.count is None and kills.source)


# --- bad weights fail before anything runs -----------------------------------------------------------------------

def bakeoff(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bakeoff.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=env)


CRITERIA = ", ".join(resolve_weights({}, None))  # every measured criterion, as decide names them


@pytest.mark.parametrize(("weight", "message"), [
    ("speed=1", f"--weight speed=1: unknown criterion 'speed' in weights; accepted: {CRITERIA}"),
    ("throughput=abc", f"--weight throughput=abc: weight of 'throughput' must be a number >= 0, got 'abc'; "
                       f"accepted criteria: {CRITERIA}"),
])
def test_bad_report_weights_exit_2_with_the_accepted_criteria(tmp_path, weight, message):
    r = bakeoff("report", "--weight", weight, "--store", "r.sqlite", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr


def test_a_misspelt_suite_weight_exits_2_before_any_trial(tmp_path):
    (tmp_path / "bad.toml").write_text('name = "bad"\n[defaults]\nworkload = "mnist"\nframework = "torch"\n'
                                       'max_steps = 2\n[weights]\nthroughput = 0.5\nthrougput = 0.5\n')
    r = bakeoff("run", "--suite", "bad.toml", "--store", "r.sqlite", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert f"bad.toml, line 6: [weights]: unknown criterion 'througput' in weights; accepted: {CRITERIA}" in r.stderr
    assert not (tmp_path / "r.sqlite").exists() and not (tmp_path / "r").exists()  # no logs folder either


# --- real runs, interrupted ---------------------------------------------------------------------------------------

HANGER = """
import os
mode = os.environ.get("BAKEOFF_TEST_HANG")
if mode:
    import bakeoff.trial.loop as loop
    real_train = loop.train

    def train(engine, data, result, *args, checkpoint_dir=None, **kwargs):
        # The second trial (or, in mode "probe", the first batch-size probe) hangs mid-training, with a worker
        # process of its own.
        if engine.spec.seed == 1 if mode != "probe" else engine.spec.eval_every == 10**9:
            import signal, subprocess, sys, time
            if mode == "stubborn":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if checkpoint_dir is not None:
                checkpoint_dir.mkdir(parents=True, exist_ok=True)
                (checkpoint_dir / "partial").write_text("a checkpoint the next run resumes from")
            marker = os.environ["BAKEOFF_TEST_MARKER"]
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", marker, "worker"])
            time.sleep(600)
        return real_train(engine, data, result, *args, checkpoint_dir=checkpoint_dir, **kwargs)

    loop.train = train
"""

MNIST = ("run", "--workload", "mnist", "--framework", "torch", "--execution", "eager", "--max-steps", "2",
         "--repeats", "2", "--no-report")


def start_hanging_run(tmp_path: Path, reaper: list[int], mode: str, *args: str) -> tuple[subprocess.Popen, dict, int]:
    """Start ``bakeoff run``; once its trial hangs, return the run, its environment and the trial's pid (which
    is its process group: the trial leads it, its worker is in it)."""
    (tmp_path / "sitecustomize.py").write_text(HANGER)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}", "BAKEOFF_TEST_HANG": mode,
           "BAKEOFF_TEST_MARKER": str(tmp_path)}
    command = [sys.executable, "-m", "bakeoff.cli", *(args or MNIST), "--store", str(tmp_path / "r.sqlite")]
    run = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=as_from_a_terminal)
    [worker] = wait_for(lambda: [pid for pid, c in processes_mentioning(str(tmp_path)).items()
                                 if c.endswith(" worker ")], what="the hang")
    trial = os.getpgid(worker)
    reaper.append(trial)
    assert "-m bakeoff.trial " in (Path("/proc") / str(trial) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert os.getpgid(run.pid) != trial  # the trial has a process group of its own
    return run, env, trial


@pytest.mark.slow
@TORCH
@pytest.mark.parametrize(("sig", "code", "mode"), [(signal.SIGINT, 130, "plain"), (signal.SIGTERM, 143, "stubborn")],
                         ids=["SIGINT", "SIGTERM-ignored-by-the-trial"])
def test_interrupting_a_run_kills_the_trial_records_nothing_and_the_next_run_resumes(tmp_path, reaper, sig, code,
                                                                                     mode):
    run, env, trial = start_hanging_run(tmp_path, reaper, mode)  # seed 0 finished; seed 1 hangs in training
    run.send_signal(sig)
    out, err = run.communicate(timeout=120)
    assert run.returncode == code, err
    assert f"interrupted by {sig.name}; stopped mnist/tiny torch/eager seed 1 and killed its processes" in err
    assert "Traceback" not in err
    assert gone(str(tmp_path), trial), (processes_mentioning(str(tmp_path)), group_members(trial))
    assert [(seed, status) for seed, status, _ in rows(tmp_path / "r.sqlite")] == [(0, "ok")]
    [kept] = (tmp_path / "r" / "checkpoints").glob("*/partial")  # the interrupted trial's checkpoint is kept

    env.pop("BAKEOFF_TEST_HANG")
    again = bakeoff(*MNIST, "--store", str(tmp_path / "r.sqlite"), cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    assert "ran 1 trials, skipped 1 already in the store" in again.stdout
    assert [(seed, status) for seed, status, _ in rows(tmp_path / "r.sqlite")] == [(0, "ok"), (1, "ok")]
    assert not kept.exists()  # removed once the trial succeeded
    db = sqlite3.connect(tmp_path / "r.sqlite")
    orders = [json.loads(o) for (o,) in db.execute("SELECT json_extract(result, '$.order') FROM trials "
                                                   "ORDER BY seed")]
    assert orders == [{"position": 1, "of": 2, "seed": 0}, {"position": 2, "of": 2, "seed": 0}]


@pytest.mark.slow
@TORCH
def test_a_trial_killed_with_kill_9_is_failed_not_out_of_memory(tmp_path, reaper):
    run, _, trial = start_hanging_run(tmp_path, reaper, "plain")
    os.kill(trial, signal.SIGKILL)  # only the trial, as a person would: its worker lives on
    out, err = run.communicate(timeout=120)
    assert run.returncode == 1, err  # the run goes on and says not every trial succeeded
    [ok, killed] = rows(tmp_path / "r.sqlite")
    assert ok[:2] == (0, "ok") and killed[:2] == (1, "failed")
    assert killed[2].startswith("killed by SIGKILL (no evidence of out-of-memory: "), killed[2]
    assert gone(str(tmp_path), trial)  # the runner killed what was left of its group



@pytest.mark.slow
@TORCH
def test_interrupting_the_batch_size_search_kills_the_probe(tmp_path, reaper):
    run, _, probe = start_hanging_run(tmp_path, reaper, "probe", "run", "--workload", "mnist", "--framework", "torch",
                               "--execution", "eager", "--batch-size", "auto", "--max-steps", "2", "--no-report")
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130, err
    assert "interrupted by SIGINT; stopped batch-size probe mnist/tiny torch/eager batch 8" in err
    assert gone(str(tmp_path), probe), group_members(probe)
    assert not (tmp_path / "r.sqlite").exists()  # the search ends before the store is opened


# --- one measuring run per machine ---------------------------------------------------------------------------------

def test_a_second_measuring_run_waits_for_the_first_or_runs_at_once_when_told(tmp_path, monkeypatch):
    monkeypatch.setenv(machine.LOCK_ENV, str(tmp_path / "measuring.lock"))
    said: list[str] = []
    with machine.measuring("first.sqlite") as held:
        assert held
        with machine.measuring("second.sqlite", wait=False, say=said.append) as second:
            assert not second  # --concurrent: runs, unlocked, and says what it costs
        assert "first.sqlite" in said[0] and "running at once as asked (--concurrent)" in said[0]
        entered = threading.Event()

        def wait_for_the_machine() -> None:
            with machine.measuring("third.sqlite", say=said.append):
                entered.set()

        waiter = threading.Thread(target=wait_for_the_machine, daemon=True)
        waiter.start()
        assert not entered.wait(1.0), "a second run measured while the first held the machine"
        assert "waiting for it to finish" in said[1] and f"pid {os.getpid()}, store first.sqlite" in said[1]
    waiter.join(10)
    assert entered.is_set()


def test_a_killed_run_leaves_the_machine_free(tmp_path, monkeypatch):
    lock = tmp_path / "measuring.lock"
    monkeypatch.setenv(machine.LOCK_ENV, str(lock))
    holder = subprocess.Popen([sys.executable, "-c", "import time; from bakeoff.run import machine\n"
                               "with machine.measuring('r.sqlite'):\n    print('held', flush=True); time.sleep(120)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert f"pid {holder.pid}, store r.sqlite" in machine.holder()
    finally:
        holder.kill()
        holder.wait()
    with machine.measuring("next.sqlite", wait=False) as held:
        assert held  # the kernel released the dead holder's lock


@TORCH
def test_bakeoff_run_waits_while_another_run_measures(tmp_path, monkeypatch):
    """Two runs started together once stored mnist/torch at 110 examples/s (6,174-9,291 alone), unflagged."""
    monkeypatch.setenv(machine.LOCK_ENV, str(tmp_path / "measuring.lock"))
    out = tmp_path / "out.txt"
    with machine.measuring("the other run's store"), out.open("w") as sink:
        run = subprocess.Popen([sys.executable, "-m", "bakeoff.cli", "run", "--workload", "mnist", "--framework",
                                "torch", "--execution", "eager", "--max-steps", "2", "--eval-every", "2", "--store",
                                "r.sqlite", "--no-report"], cwd=tmp_path, stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while "waiting for it to finish" not in out.read_text() and time.monotonic() < deadline:
                assert run.poll() is None, out.read_text()
                time.sleep(0.2)
            assert "the other run's store" in out.read_text()
            time.sleep(1)
            assert run.poll() is None and not (tmp_path / "r.sqlite").exists()  # waiting, nothing started
        except BaseException:
            run.kill()
            raise
    assert run.wait(300) == 0, out.read_text()
    assert "ran 1 trials" in out.read_text()


# --- retries explain themselves ------------------------------------------------------------------------------------

@TORCH
def test_a_stored_timeout_is_explained_and_runs_again_under_a_longer_timeout(tmp_path):
    """Before: re-running after a timeout printed "ran 0 trials" and exited 1, naming neither --retry-failed nor
    that the stored result was a timeout."""
    trial = ["run", "--workload", "mnist", "--framework", "torch", "--execution", "eager", "--max-steps", "2",
             "--eval-every", "2", "--store", "r.sqlite", "--no-report"]
    first = bakeoff(*trial, "--timeout", "1", cwd=tmp_path)  # the framework's import alone takes longer
    assert first.returncode == 1 and "ran 1 trials" in first.stdout, first.stdout + first.stderr
    again = bakeoff(*trial, "--timeout", "1", cwd=tmp_path)
    assert again.returncode == 1 and "ran 0 trials, skipped 1" in again.stdout
    assert "1 did not succeed when stored (1 timeout)" in again.stdout and "--retry-failed" in again.stdout
    longer = bakeoff(*trial, "--timeout", "300", "--dry-run", cwd=tmp_path)
    assert "run  (stored: timeout)" in longer.stdout, longer.stdout
    longer = bakeoff(*trial, "--timeout", "300", cwd=tmp_path)
    assert longer.returncode == 0 and "ran 1 trials" in longer.stdout, longer.stdout + longer.stderr


def test_a_timeout_stored_before_its_budget_was_kept_is_read_from_its_reason(tmp_path):
    from bakeoff.core.result import Execution, TrialResult
    from bakeoff.results.store import Store

    spec = RunSpec(workload="mnist", framework="torch", max_steps=2)
    old = TrialResult(spec=spec.to_dict(), key="k1", status=Status.TIMEOUT, reason="no result after 8 s; killed "
                      "(log: x.log)")
    new = TrialResult(spec=spec.to_dict(), key="k2", status=Status.TIMEOUT, reason="no result after 60 s; killed",
                      execution=Execution(timeout_s=59.5))
    with Store(tmp_path / "r.sqlite") as store:
        store.put(old, "s")
        store.put(new, "s")
        assert store.timeouts() == {"k1": 8.0, "k2": 59.5}
        assert plan_order.measure_again(store, 900) == {"k1", "k2"}  # a longer timeout: both run again
        assert plan_order.measure_again(store, 59.5) == {"k1"}
        assert plan_order.measure_again(store, 8) == set()  # the same timeout: the stored result stands
    assert plan_order.to_run(spec, {spec.key(): Status.TIMEOUT}, False, False, again={spec.key()})
    assert not plan_order.to_run(spec, {spec.key(): Status.TIMEOUT}, False, False, again={"k1"})
    assert plan_order.to_run(spec, {spec.key(): Status.TIMEOUT}, False, True)  # --retry-failed


# --- no traceback, nothing half-written ----------------------------------------------------------------------------

MNIST_RUN = ("run", "--workload", "mnist", "--framework", "torch", "--execution", "eager", "--max-steps", "2",
             "--eval-every", "2", "--no-report")


def _stored_trial(store: Path) -> None:
    import fake_results
    from bakeoff.results.store import Store

    with Store(store) as s:
        s.put(fake_results.trial("torch", "eager"), "quick")


@pytest.mark.parametrize("command", [MNIST_RUN, ("report",), ("show",)])
def test_a_damaged_store_is_an_exit_2_message_not_a_traceback(tmp_path, command):
    store = tmp_path / "r.sqlite"
    _stored_trial(store)
    data = bytearray(store.read_bytes())
    data[:16] = b"not a store, no\0"  # the header SQLite reads first
    store.write_bytes(bytes(data))
    done = bakeoff(*command, "--store", str(store), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{store} is not a bakeoff results store" in done.stderr and "Traceback" not in done.stderr
    assert store.read_bytes() == bytes(data)  # left as it was, for the user to recover


def test_a_store_that_names_a_folder_is_refused_before_any_trial(tmp_path):
    done = bakeoff(*MNIST_RUN, "--store", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"--store {tmp_path} is a folder; a store is one file" in done.stderr


def test_report_out_naming_a_file_is_refused(tmp_path):
    store, taken = tmp_path / "r.sqlite", tmp_path / "report.html"
    _stored_trial(store)
    taken.write_text("mine")
    for form in ("html", "json"):
        done = bakeoff("report", "--store", str(store), "--out", str(taken), "--format", form, cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"--out {taken} is a file; a report is a folder" in done.stderr
    assert taken.read_text() == "mine"


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A real full disk: a tmpfs of ``size`` mounted at ``path`` (skips where mounting is not allowed)."""
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path) -> None:
    with contextlib.suppress(OSError), (disk / "filler").open("wb") as f:
        while True:
            f.write(b"\0" * 4096)
            f.flush()


def fill_once_training(disk: Path, store: Path, logs: Path, cwd: Path) -> str:
    """Run the tiny MNIST trial into ``store``, fill ``disk`` once its trial has started (a log in ``logs``), and
    return the run's standard error once it ends with exit 2 (its output goes to ``cwd/out.txt``)."""
    with (cwd / "out.txt").open("w") as sink:
        run = subprocess.Popen([sys.executable, "-m", "bakeoff.cli", *MNIST_RUN, "--store", str(store)],
                               cwd=cwd, stdout=sink, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(logs.glob("*.log")) and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.05)
    fill(disk)  # the trial is running: its suite is stored, its result will not be
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 2, stderr
    return stderr


def test_a_full_disk_while_writing_the_report_leaves_the_old_one_whole(tmp_path):
    store = tmp_path / "r.sqlite"
    _stored_trial(store)
    with small_disk(tmp_path / "disk", "2m") as disk:
        out = disk / "report"
        first = bakeoff("report", "--store", str(store), "--out", str(out), cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        fill(disk)
        again = bakeoff("report", "--store", str(store), "--out", str(out), cwd=tmp_path)
        assert again.returncode == 2 and "Traceback" not in again.stderr, again.stderr
        assert "could not write the report" in again.stderr and "No space left on device" in again.stderr
        # The command to write it again is the one given, with its store and folder (not the defaults).
        assert f"make room and run `bakeoff report --store {store} --out {out}`" in again.stderr, again.stderr
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no half-written file, no leftover


@TORCH
def test_a_full_disk_while_storing_keeps_the_result_and_the_next_run_stores_it(tmp_path):
    """Before: `database or disk is full` as a traceback; the trial ran and its result was discarded. The store is
    alone on a small disk (its logs folder is a link to a roomy one), filled once the trial has started."""
    from bakeoff.results.store import Store

    with small_disk(tmp_path / "disk", "4m") as disk:
        store, roomy = disk / "r.sqlite", tmp_path / "artifacts"
        roomy.mkdir()
        (disk / "r").symlink_to(roomy)  # the store's folder of logs, checkpoints and events
        stderr = fill_once_training(disk, store, roomy / "logs", tmp_path)
        assert "Traceback" not in stderr, stderr
        assert (f"could not store mnist/tiny torch/eager seed 0 in {store}: no space left on {disk} (0.0 MB free), "
                "free 5 MB or more there (SQLite: database or disk is full); its result (ok) is kept in") in stderr
        kept = list(roomy.glob("logs/unstored-*.json"))
        assert len(kept) == 1 and f"kept in {disk / 'r' / 'logs' / kept[0].name}" in stderr
        assert json.loads(kept[0].read_text())["status"] == "ok"
        (disk / "filler").unlink()
        again = bakeoff(*MNIST_RUN, "--store", str(store), cwd=tmp_path)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "ran 0 trials, skipped 1 already in the store" in again.stdout  # stored from the kept file, not re-run
        assert not list(roomy.glob("logs/unstored-*.json"))
        with Store(store) as s:
            assert [r.status for r in s.results()] == [Status.OK]


# --- asking for what the machine lacks ------------------------------------------------------------------------------

def test_visible_gpus_are_counted_from_the_driver_devices_and_cuda_visible_devices(tmp_path):
    from bakeoff.measure.environment import cuda_devices

    assert cuda_devices(tmp_path, {})[0] == 0 and "no NVIDIA GPU on this machine" in cuda_devices(tmp_path, {})[1]
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    assert cuda_devices(tmp_path, {}) == (2, "")
    assert cuda_devices(tmp_path, {"CUDA_VISIBLE_DEVICES": "1"}) == (1, "")
    for hidden in ("", "-1"):
        count, why = cuda_devices(tmp_path, {"CUDA_VISIBLE_DEVICES": hidden})
        assert count == 0 and f"CUDA_VISIBLE_DEVICES={hidden!r} hides the machine's 2 GPU(s)" == why


@pytest.mark.skipif(bool(list(Path("/dev").glob("nvidia[0-9]*"))), reason="this machine has a GPU")
def test_device_cuda_without_a_gpu_is_refused_before_any_trial(tmp_path):
    """Before: exit 0, every trial recorded as unsupported, nothing run."""
    done = bakeoff(*MNIST_RUN, "--device", "cuda", "--store", "r.sqlite", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "--device cuda: no NVIDIA GPU on this machine" in done.stderr and "--device cpu" in done.stderr
    assert not (tmp_path / "r.sqlite").exists()


# --- other work on the trial's cores --------------------------------------------------------------------------------

@TORCH
def test_a_trial_measured_beside_other_work_is_flagged_and_measured_again_on_request(tmp_path):
    """Busy loops share the one core the run is confined to: the trial, in a session of its own, gets about half of
    it (Linux shares a contested core between sessions first), over steady steps of a second or more (CPU time is
    counted in 10 ms ticks), and its record says other processes used the rest, however its rival might have fared."""
    from bakeoff.measure.environment import OTHER_WORK_SHARE
    from bakeoff.results.store import Store

    core = {min(os.sched_getaffinity(0))}

    def confine() -> None:
        os.sched_setaffinity(0, core)

    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=confine) for _ in range(4)]
    trial = [*MNIST_RUN, "--max-steps", "120", "--eval-every", "120", "--store", "r.sqlite"]
    try:
        done = subprocess.run([sys.executable, "-m", "bakeoff.cli", *trial], cwd=tmp_path, capture_output=True,
                              text=True, timeout=600, preexec_fn=confine)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert done.returncode == 0, done.stdout + done.stderr
    with Store(tmp_path / "r.sqlite") as store:
        (other,) = store.other_work().values()
        (result,) = store.results()
    assert other > OTHER_WORK_SHARE, result.environment["cpu_sharing"]
    assert "run  (stored: ok)" in bakeoff(*trial, "--retry-busy", "--dry-run", cwd=tmp_path).stdout
    assert "skip (stored: ok)" in bakeoff(*trial, "--dry-run", cwd=tmp_path).stdout


# --- no process outlives its trial ----------------------------------------------------------------------------------

def _marked(mark: str) -> list[int]:
    """Live processes whose environment holds ``mark`` (the trial's processes inherit the test's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if mark.encode() in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


@pytest.mark.parametrize("framework, parallelism", [("torch", "data_parallel"), ("tensorflow", "multi_worker"),
                                                    ("jax", "multi_worker")])
def test_a_timed_out_two_rank_trial_leaves_no_process(monkeypatch, tmp_path, framework, parallelism):
    """The fault as a user met it: `--timeout` recorded a DDP trial as timed out while torchrun's ranks, each in a
    session of its own, trained on through the next trial. Every framework's 2-rank group, hung past its timeout
    (far more steps than it can run), is killed whole."""
    if not registry.installed(framework):
        pytest.skip(f"needs {framework}")
    mark = f"BAKEOFF_TEST_GROUP={os.urandom(8).hex()}"
    monkeypatch.setenv(*mark.split("="))
    spec = RunSpec(workload="mnist", framework=framework, execution="graph", parallelism=parallelism, workers=2,
                   batch_size=32, max_steps=100_000, eval_every=100_000)
    seen: set[int] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for pid in _marked(mark):
                with contextlib.suppress(OSError):
                    if b"bakeoff.trial" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        seen.add(pid)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = local.run_one(spec, 12, tmp_path / "logs")  # the ranks are up within seconds
    finally:
        stop.set()
        watcher.join(5)
        left = _marked(mark)
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    assert len(seen) >= 2, "the ranks were never seen running"
    assert result.status is Status.TIMEOUT, result.reason
    assert left == [], "a process of the timed-out trial outlived it"


@TORCH
@pytest.mark.parametrize("parallelism", ["none", "data_parallel"])
def test_killing_bakeoff_itself_kills_its_trial(tmp_path, parallelism):
    """kill -9 of `bakeoff run` (or its crash, or an out-of-memory kill) can run no clean-up: the kernel kills each
    member when the runner dies (bakeoff.core.tether), and torchrun's ranks when torchrun dies."""
    mark = f"BAKEOFF_TEST_GROUP={os.urandom(8).hex()}"
    env = {**os.environ, mark.split("=")[0]: mark.split("=")[1]}
    run = subprocess.Popen([sys.executable, "-m", "bakeoff.cli", "run", "--workload", "mnist", "--framework", "torch",
                            "--execution", "eager", "--parallelism", parallelism, "--workers",
                            "1" if parallelism == "none" else "2", "--max-steps", "100000", "--eval-every", "100000",
                            "--store", "r.sqlite", "--no-report"], cwd=tmp_path, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        trials: list[int] = []
        wanted = 1 if parallelism == "none" else 2
        while time.monotonic() < deadline and len(trials) < wanted:
            trials = [pid for pid in _marked(mark) if pid != run.pid and _is_trial_process(pid)]
            time.sleep(0.1)
        assert len(trials) >= wanted, "the trial never started"
        time.sleep(2)  # past the ranks' start, which the kernel's tether covers from its first statement on
        run.kill()
        run.wait()
        deadline = time.monotonic() + 10
        while _marked(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _marked(mark) == [], "a process of the trial outlived bakeoff"
    finally:
        run.kill()
        for pid in _marked(mark):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _is_trial_process(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return b"bakeoff.trial" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    return False
