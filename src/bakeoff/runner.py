"""Runs specs as trials, each in a fresh subprocess, and records every outcome in the store.

Resume is the default: a trial whose spec key is already in the store is skipped, whatever its status, so an
interrupted run picks up where it stopped. ``retry_failed`` re-runs the recorded trials that did not succeed;
``fresh`` re-runs everything.

Order (:func:`order`): repeat by repeat; within a repeat the frameworks take turns (round-robin, the framework
that goes first rotating from one repeat to the next), and each framework's configurations are shuffled with a
seed and the repeat number. Slow drift of the machine (heat, background load) so lands on every framework alike.
Each result records its place in ``extras["order"]`` (``{"position": 3, "of": 18, "seed": 0}``, 1-based, in the
planned order of the whole run, skipped trials included). Store keys do not depend on the order.

Signals: inside :func:`interruptible` (``run`` and the batch-size search enter it), SIGINT and SIGTERM raise
:class:`Interrupted`. Each trial runs in its own process group, owned by :func:`process_group` while it runs;
an exception leaving that block kills the whole group (SIGTERM, then SIGKILL after :data:`KILL_GRACE_S`) before
it propagates. The stopped trial records nothing; its checkpoint directory is kept for the next run to resume
from. A result row is written whole or not at all: signals are held while it is stored.

Files: a store's trial logs (``logs/<key>.log``), checkpoints (``checkpoints/<key>/``) and TensorBoard runs
(``tensorboard/<workload>/<preset>/<framework-mode>/seed<N>``, see :func:`tensorboard_runs`) live in the folder
named after the store (:func:`bakeoff.store.artifacts_dir`: ``results/bakeoff.sqlite`` -> ``results/bakeoff/``).

A trial that dies of SIGKILL is out of memory only with evidence: the runner's own memory cap, or the kernel's
OOM-kill counter of this process's memory cgroup having risen during the trial (:func:`read_oom_kills`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from bakeoff import registry
from bakeoff.identity import identify
from bakeoff.spec import RunSpec, SpecError, Status, TrialResult
from bakeoff.store import Store

log = logging.getLogger("bakeoff.runner")

Progress = Callable[[str, RunSpec, TrialResult | None], None]
"""Called with ("queued" | "start" | "skip" | "done", spec, result) as the run goes: first "queued" for each
trial that will run, in order, then "skip", or "start" and "done", for each trial."""


@dataclasses.dataclass
class RunSummary:
    ran: list[TrialResult]
    skipped: list[RunSpec]
    specs: list[RunSpec] = dataclasses.field(default_factory=list)  # every spec of the run, content identified


KILL_GRACE_S = 3.0
"""Seconds an interrupted trial's process group gets between SIGTERM and SIGKILL."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached an :func:`interruptible` run; the running trial (if any) was killed, unrecorded."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        self.exit_code = 128 + signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM
        self.stopped: str | None = None  # what was running when it came, e.g. "mnist/tiny torch/eager seed 1"
        super().__init__(self.signal_name)


class _SignalGate:
    """Where SIGINT and SIGTERM go inside :func:`interruptible`: raised at once as :class:`Interrupted`, or held
    (see :meth:`hold`) while something must not be cut in half."""

    def __init__(self) -> None:
        self.held = 0
        self.pending: int | None = None

    def handler(self, signum: int, frame: object) -> None:
        if self.held:
            self.pending = self.pending or signum
            return
        raise Interrupted(signum)

    def check(self) -> None:
        """Raise the signal that came while held, if any."""
        if not self.held and self.pending is not None:
            signum, self.pending = self.pending, None
            raise Interrupted(signum)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Hold signals during the block; one that came meanwhile is raised when the block ends normally (when
        the block raises, it stays pending for the next :meth:`check`)."""
        self.held += 1
        try:
            yield
        finally:
            self.held -= 1
        self.check()


_GATE = _SignalGate()
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Turn SIGINT and SIGTERM into :class:`Interrupted` during the block (re-entrant; main thread only).

    A signal the process inherited as ignored (``nohup``, a non-interactive shell's ``&``) stays ignored.
    """
    if threading.current_thread() is not threading.main_thread() or any(
            signal.getsignal(s) == _GATE.handler for s in _SIGNALS):
        yield
        return
    previous = {s: signal.getsignal(s) for s in _SIGNALS}
    for s, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(s, _GATE.handler)
    try:
        yield
        _GATE.check()
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        _GATE.pending = None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal (it changed user): alive, not ours to kill
        return True
    return True


def kill_group(proc: subprocess.Popen, grace_s: float) -> None:
    """Kill the process group ``proc`` leads: SIGTERM, then SIGKILL to whatever is left after ``grace_s``
    (at once when ``grace_s`` is 0). Reaps ``proc``."""
    if grace_s > 0:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        # Wait for the whole group, not only its leader: a worker the trial started may outlive it.
        while (proc.poll() is None or _group_alive(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def process_group(command: Sequence[str], what: str, **popen: Any) -> Iterator[subprocess.Popen]:
    """Start ``command`` in a new session (its own process group) and own that group during the block.

    An exception leaving the block (:class:`Interrupted`, Ctrl-C, anything) kills the whole group first
    (SIGTERM, SIGKILL after :data:`KILL_GRACE_S`); when the block ends normally, whatever is left of the group
    (a worker the trial started) is killed with SIGKILL. So no trial or probe outlives its turn. ``what`` names
    the process for the interrupt message.
    """
    _GATE.held += 1  # a signal during the start is raised below, once the group is ours to kill
    try:
        proc = subprocess.Popen(command, start_new_session=True, **popen)
    finally:
        _GATE.held -= 1
    try:
        _GATE.check()
        yield proc
    except BaseException as exc:
        with _GATE.hold():
            kill_group(proc, KILL_GRACE_S)
            if isinstance(exc, KeyboardInterrupt):
                _GATE.pending = None  # already stopping: a second Ctrl-C during the grace adds nothing
        if isinstance(exc, Interrupted) and exc.stopped is None:
            exc.stopped = what
        raise
    with _GATE.hold():
        kill_group(proc, grace_s=0)


def data_key(spec: RunSpec) -> tuple:
    """What a spec's data set depends on: the workload, preset, data options and config overrides (which may
    change the data: the autoencoder's sizes, the text classifier's sequence length and vocabulary)."""
    return spec.workload, spec.preset, spec.data, spec.config


def validate(specs: Sequence[RunSpec]) -> dict[tuple, int]:
    """Check, before any trial starts, everything that can be checked without a framework.

    Unknown workloads, presets and config overrides raise :class:`SpecError`; unusable data raises
    ``DataError``. Each distinct :func:`data_key` is loaded once, here in the parent, with numpy only, and the
    configuration is resolved against it (checks that depend on the data, like a kernel against the image size,
    fail here). Returns the training-set size of each :func:`data_key`.
    """
    train_sizes: dict[tuple, int] = {}
    for spec in specs:
        workload = registry.workload(spec.workload)
        workload.config(spec.preset, spec)
        key = data_key(spec)
        if key not in train_sizes:
            data = workload.load_data(spec)
            workload.config(spec.preset, spec, data)
            train_sizes[key] = data.num_train
        examples, available = spec.batch_size * spec.grad_accum, train_sizes[key]
        if examples > available:
            raise SpecError(f"one step needs batch_size × grad_accum = {spec.batch_size} × {spec.grad_accum} = "
                            f"{examples} examples, more than the {available} in the training set of "
                            f"{spec.workload}: lower batch_size or grad_accum")
    return train_sizes


def _trial_env(spec: RunSpec, tmp: str) -> dict[str, str]:
    env = dict(os.environ)
    # Compile caches start empty in every trial, so graph-mode compile time is the cold cost, measured the same
    # way on every run, rather than whatever an earlier trial left on disk.
    env.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"), TRITON_CACHE_DIR=os.path.join(tmp, "triton"))
    threads = str(spec.threads or os.cpu_count() or 1)
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, TF_CPP_MIN_LOG_LEVEL="2",
               KERAS_BACKEND="tensorflow", PYTHONUNBUFFERED="1")
    if spec.device.value == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _failure(spec: RunSpec, status: Status, reason: str) -> TrialResult:
    return TrialResult(spec=spec.to_dict(), key=spec.key(), status=status, reason=reason)


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@dataclasses.dataclass(frozen=True)
class OomKills:
    """The kernel's OOM-kill counter of a memory cgroup: ``count`` read from ``source`` (None: ``source`` says
    why nothing could be read)."""

    count: int | None
    source: str


def _oom_counter_files() -> list[Path]:
    """Where this process's memory cgroup keeps its OOM-kill counter: its own cgroup first, then its ancestors
    (cgroup v2 ``memory.events``, v1 ``memory.oom_control``; both count kills in the cgroups below too)."""
    paths: dict[str, str] = {}  # "v2" | "v1" -> this process's cgroup path
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and not controllers:
            paths["v2"] = path
        elif "memory" in controllers.split(","):
            paths["v1"] = path
    files: list[Path] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        tail = fields[fields.index("-") + 1:]  # fstype, source, super options
        if tail[0] == "cgroup2" and "v2" in paths:
            version, name = "v2", "memory.events"
        elif tail[0] == "cgroup" and "v1" in paths and "memory" in tail[2].split(","):
            version, name = "v1", "memory.oom_control"
        else:
            continue
        root, mount = PurePosixPath(fields[3]), Path(fields[4])
        path = PurePosixPath(paths[version])
        directory = mount / path.relative_to(root) if path.is_relative_to(root) else mount
        while True:
            files.append(directory / name)
            if directory == mount:
                break
            directory = directory.parent
    return files


def read_oom_kills() -> OomKills:
    """How many processes the kernel's out-of-memory killer has killed in this process's memory cgroup."""
    try:
        files = _oom_counter_files()
    except (OSError, ValueError, IndexError) as exc:
        return OomKills(None, f"cannot read this process's cgroup ({exc})")
    for path in files:
        try:
            for line in path.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return OomKills(int(value), str(path))
        except (OSError, ValueError):
            continue
    return OomKills(None, "no cgroup OOM-kill counter is readable (memory.events or memory.oom_control)")


def _sigkill_failure(spec: RunSpec, before: OomKills, elapsed: float, tail: str) -> TrialResult:
    """A trial killed by SIGKILL from outside the runner: out of memory only if the kernel's counter says so."""
    after = read_oom_kills()
    if before.count is not None and after.count is not None and after.source == before.source:
        if after.count > before.count:
            return _failure(spec, Status.OUT_OF_MEMORY,
                            f"killed by SIGKILL after {elapsed:.0f} s by the kernel's out-of-memory killer "
                            f"(oom_kill in {after.source} rose from {before.count} to {after.count} during the "
                            f"trial); last output: {tail[-300:]}")
        evidence = f"oom_kill in {after.source} stayed at {after.count} during the trial"
    elif before.count is not None and after.count is not None:
        evidence = f"the OOM-kill counter read before ({before.source}) and after ({after.source}) differ"
    else:
        evidence = after.source if after.count is None else before.source
    return _failure(spec, Status.FAILED, f"killed by SIGKILL (no evidence of out-of-memory: {evidence}) after "
                                         f"{elapsed:.0f} s; last output: {tail[-300:]}")


def _wait(proc: subprocess.Popen, timeout_s: float, memory_cap: int | None) -> tuple[int | None, str]:
    """Wait for the trial; kill its process group on timeout or when its RSS passes ``memory_cap``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return proc.wait(timeout=0.05 if memory_cap else max(0.0, deadline - time.monotonic())), ""
        except subprocess.TimeoutExpired:
            rss = _rss_bytes(proc.pid) if memory_cap else 0
            if memory_cap and rss > memory_cap:
                why = f"resident memory {rss / 2**20:.0f} MiB passed the cap of {memory_cap / 2**20:.0f} MiB; killed"
            elif time.monotonic() >= deadline:
                why = f"no result after {timeout_s:.0f} s; killed"
            else:
                continue
            kill_group(proc, grace_s=0)
            return None, why


def run_one(spec: RunSpec, timeout_s: float, log_dir: Path, checkpoint_dir: Path | None = None,
            tensorboard_dir: Path | None = None, memory_cap: int | None = None) -> TrialResult:
    """Run one spec in a fresh interpreter; a crash, hang or kill becomes a result, never an exception.

    A checkpoint left in ``checkpoint_dir`` by an interrupted attempt is resumed from; it is deleted once the
    trial succeeds. ``tensorboard_dir`` receives the trial's TensorBoard event files. With ``memory_cap`` (bytes),
    the trial is killed and recorded as out of memory when its resident set grows past it.
    """
    if spec.framework.value not in registry.ENGINES:
        return _failure(spec, Status.UNSUPPORTED, f"bakeoff has no {spec.framework} engine yet")
    if not registry.installed(spec.framework.value):
        hint = registry.INSTALL_HINTS.get(spec.framework.value, "")
        return _failure(spec, Status.UNSUPPORTED, f"{spec.framework} is not installed; install it with: {hint}")
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{spec.key()}.log"
    with tempfile.TemporaryDirectory(prefix="bakeoff-trial-") as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_path.write_text(spec.to_json())
        started, oom_before = time.perf_counter(), read_oom_kills()
        command = [sys.executable, "-m", "bakeoff.trial", str(spec_path), str(result_path),
                   str(checkpoint_dir or ""), str(tensorboard_dir or "")]
        what = f"{spec.workload}/{spec.preset} {spec.label()} seed {spec.seed}"
        with log_path.open("w") as log_file, process_group(command, what, stdout=log_file, stderr=subprocess.STDOUT,
                                                           env=_trial_env(spec, tmp)) as proc:
            code, killed = _wait(proc, timeout_s, memory_cap)
            if killed:
                status = Status.TIMEOUT if killed.startswith("no result") else Status.OUT_OF_MEMORY
                return _failure(spec, status, f"{killed} (log: {log_path})")
        if result_path.exists():
            result = TrialResult.from_dict(json.loads(result_path.read_text()))
            result.extras["log"] = str(log_path)
            if tensorboard_dir is not None:
                result.extras["tensorboard"] = str(tensorboard_dir)
            if result.status is Status.OK and checkpoint_dir is not None:
                shutil.rmtree(checkpoint_dir, ignore_errors=True)
            return result
    tail = log_path.read_text(errors="replace")[-1500:].strip()
    elapsed = time.perf_counter() - started
    if code == -signal.SIGKILL:
        return _sigkill_failure(spec, oom_before, elapsed, tail)
    if code is not None and code < 0:
        return _failure(spec, Status.FAILED, f"trial process was killed by {signal.Signals(-code).name} after "
                                             f"{elapsed:.0f} s and wrote no result: {tail}")
    return _failure(spec, Status.FAILED, f"trial process exited with code {code} and wrote no result: {tail}")


def order(specs: Sequence[RunSpec], seed: int = 0) -> list[RunSpec]:
    """The order trials run in (see module docstring): repeat by repeat; within a repeat, frameworks take turns,
    the first framework rotating with the repeat, and each framework's configurations are shuffled with
    ``seed`` and the repeat."""
    frameworks = list(dict.fromkeys(spec.framework for spec in specs))  # in order of first appearance
    by_repeat: dict[int, dict] = {}
    for spec in specs:
        by_repeat.setdefault(spec.repeat, {f: [] for f in frameworks})[spec.framework].append(spec)
    out: list[RunSpec] = []
    for repeat in sorted(by_repeat):
        rng = random.Random(f"{seed}:{repeat}")  # str seeds hash the same in every process
        queues = list(by_repeat[repeat].values())
        for queue in queues:
            rng.shuffle(queue)
        turn = repeat % len(queues)
        queues = queues[turn:] + queues[:turn]
        for i in range(max(len(q) for q in queues)):
            out.extend(q[i] for q in queues if i < len(q))
    return out


def run(specs: Sequence[RunSpec], store: Store, suite: str, timeout_s: float = 900,
        fresh: bool = False, retry_failed: bool = False, log_dir: Path | None = None,
        progress: Progress | None = None, annotations: dict[str, dict] | None = None,
        validated: bool = False, order_seed: int = 0) -> RunSummary:
    """Run every spec not already recorded, in :func:`order`, storing each result as it finishes.

    ``annotations`` maps spec keys to extras recorded with that trial's result (e.g. its batch-size search).
    ``validated``: the caller already ran :func:`validate` on these specs (it loads every data set once).
    SIGINT or SIGTERM raises :class:`Interrupted` after killing the running trial, which is not recorded.
    """
    if not validated:
        validate(specs)
    # Keys by content (bakeoff.identity): a changed data file, configuration or version is a new trial.
    identified = identify(specs)
    annotations = {new.key(): (annotations or {}).get(old.key(), {}) for old, new in zip(specs, identified,
                                                                                           strict=True)}
    with interruptible():
        summary = _run(order(identified, order_seed), store, suite, timeout_s, fresh, retry_failed,
                       log_dir or store.artifacts / "logs", progress, annotations, order_seed)
    summary.specs = identified
    return summary


def to_run(spec: RunSpec, recorded: dict[str, Status], fresh: bool, retry_failed: bool) -> bool:
    """Whether a run with these options runs ``spec`` (identified) given the store's ``recorded`` statuses."""
    status = recorded.get(spec.key())
    return status is None or fresh or (retry_failed and status is not Status.OK)


TENSORBOARD_MARK = "bakeoff-trial.json"
"""The file in each TensorBoard run folder naming the trial (its key) that owns the folder."""


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._=+-" else "_" for c in name.replace("/", "-"))


def tensorboard_runs(specs: Sequence[RunSpec], root: Path) -> dict[str, Path]:
    """The TensorBoard run folder of each spec (by key) under ``root``: ``workload/preset/framework-mode/seedN``
    (``framework-mode`` is :meth:`RunSpec.label` with dashes: ``torch-eager-bf16-accum2``).

    Configurations that this would put in one folder are kept apart: within ``specs``, by the fields that differ
    (``torch-eager-batch_size=16``, as the report labels them), or by the key when no field does; against a folder an
    earlier trial of another key owns (its :data:`TENSORBOARD_MARK`), by the key: ``seed0-<key>``. A trial resumed
    or re-run under the same key writes into the same folder.
    """
    from bakeoff.analysis.stats import _distinct_labels  # the report's names for configurations sharing a label

    by_base: dict[PurePosixPath, dict[str, RunSpec]] = {}
    for spec in specs:
        base = PurePosixPath(spec.workload, spec.preset, _safe(spec.label()), f"seed{spec.seed}")
        by_base.setdefault(base, {})[spec.key()] = spec
    runs: dict[str, Path] = {}
    for base, group in by_base.items():
        names = {key: _safe(label) for key, label in zip(group, _distinct_labels(list(group.values())), strict=True)}
        if len(group) > 1 and len(set(names.values())) < len(group):
            names = {key: f"{_safe(group[key].label())}-{key[:8]}" for key in group}
        for key, name in names.items():
            folder = root / base.parent.parent / name / base.name
            try:
                owner = json.loads((folder / TENSORBOARD_MARK).read_text()).get("key")
            except (OSError, ValueError):
                owner = None
            runs[key] = folder.with_name(f"{base.name}-{key[:8]}") if owner not in (None, key) else folder
    return runs


def _claim(folder: Path, spec: RunSpec) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TENSORBOARD_MARK).write_text(json.dumps({"key": spec.key(), "label": spec.label(), "seed": spec.seed}))


def _run(specs: list[RunSpec], store: Store, suite: str, timeout_s: float, fresh: bool, retry_failed: bool,
         log_dir: Path, progress: Progress | None, annotations: dict[str, dict], order_seed: int) -> RunSummary:
    recorded = store.statuses()
    summary = RunSummary(ran=[], skipped=[])
    queued = [spec for spec in specs if to_run(spec, recorded, fresh, retry_failed)]
    tensorboard = tensorboard_runs(queued, store.artifacts / "tensorboard")
    if progress:
        for spec in queued:
            progress("queued", spec, None)
    for position, spec in enumerate(specs, 1):
        if not to_run(spec, recorded, fresh, retry_failed):
            summary.skipped.append(spec)
            if progress:
                progress("skip", spec, None)
            continue
        if progress:
            progress("start", spec, None)
        _claim(tensorboard[spec.key()], spec)
        result = run_one(spec, timeout_s, log_dir, store.artifacts / "checkpoints" / spec.key(),
                         tensorboard[spec.key()])
        result.extras.update(annotations.get(spec.key(), {}))
        result.extras["order"] = {"position": position, "of": len(specs), "seed": order_seed}
        with _GATE.hold():  # the row is written whole; a signal meanwhile is raised after it
            store.put(result, suite)
        summary.ran.append(result)
        log.info("%s %s: %s %s", spec.label(), spec.key(), result.status.value, result.reason)
        if progress:
            progress("done", spec, result)
    return summary
