"""Runs specs as trials, each in a fresh subprocess, and records every outcome in the store.

Resume is the default: a trial whose spec key is already in the store is skipped, whatever its status, so an
interrupted run picks up where it stopped. ``retry_failed`` re-runs the recorded trials that did not succeed;
``fresh`` re-runs everything.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bakeoff import registry
from bakeoff.spec import RunSpec, SpecError, Status, TrialResult
from bakeoff.store import Store

log = logging.getLogger("bakeoff.runner")

Progress = Callable[[str, RunSpec, TrialResult | None], None]
"""Called with ("start" | "skip" | "done", spec, result) as the run goes."""


@dataclasses.dataclass
class RunSummary:
    ran: list[TrialResult]
    skipped: list[RunSpec]


def validate(specs: Sequence[RunSpec]) -> dict[tuple, int]:
    """Check, before any trial starts, everything that can be checked without a framework.

    Unknown workloads and presets raise :class:`SpecError`; unusable data raises ``DataError``. Each distinct
    (workload, data) pair is loaded once, here in the parent, with numpy only. Returns the training-set size
    of each (workload, preset, data).
    """
    train_sizes: dict[tuple, int] = {}
    for spec in specs:
        workload = registry.workload(spec.workload)
        workload.config(spec.preset, spec)
        data_key = (spec.workload, spec.preset, spec.data)
        if data_key not in train_sizes:
            train_sizes[data_key] = workload.load_data(spec).num_train
        examples, available = spec.batch_size * spec.grad_accum, train_sizes[data_key]
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
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
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
        started = time.perf_counter()
        with log_path.open("w") as log_file:
            command = [sys.executable, "-m", "bakeoff.trial", str(spec_path), str(result_path),
                       str(checkpoint_dir or ""), str(tensorboard_dir or "")]
            proc = subprocess.Popen(command,
                                    stdout=log_file, stderr=subprocess.STDOUT, env=_trial_env(spec, tmp),
                                    start_new_session=True)  # its own process group: a timeout kills it all
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
        return _failure(spec, Status.OUT_OF_MEMORY,
                        f"killed by SIGKILL after {elapsed:.0f} s, most likely the kernel's out-of-memory killer; "
                        f"last output: {tail[-300:]}")
    return _failure(spec, Status.FAILED, f"trial process exited with code {code} and wrote no result: {tail}")


def run(specs: Sequence[RunSpec], store: Store, suite: str, timeout_s: float = 900,
        fresh: bool = False, retry_failed: bool = False, log_dir: Path | None = None,
        progress: Progress | None = None, annotations: dict[str, dict] | None = None,
        validated: bool = False) -> RunSummary:
    """Run every spec not already recorded (see module docstring), storing each result as it finishes.

    ``annotations`` maps spec keys to extras recorded with that trial's result (e.g. its batch-size search).
    ``validated``: the caller already ran :func:`validate` on these specs (it loads every data set once).
    """
    if not validated:
        validate(specs)
    recorded = store.statuses()
    log_dir = log_dir or store.path.parent / "logs"
    summary = RunSummary(ran=[], skipped=[])
    for spec in specs:
        status = recorded.get(spec.key())
        if status is not None and not fresh and not (retry_failed and status is not Status.OK):
            summary.skipped.append(spec)
            if progress:
                progress("skip", spec, None)
            continue
        if progress:
            progress("start", spec, None)
        root = store.path.parent
        tensorboard = root / "tensorboard" / suite / f"{spec.label().replace('/', '_')}-seed{spec.seed}-{spec.key()}"
        result = run_one(spec, timeout_s, log_dir, root / "checkpoints" / spec.key(), tensorboard)
        result.extras.update((annotations or {}).get(spec.key(), {}))
        store.put(result, suite)
        summary.ran.append(result)
        log.info("%s %s: %s %s", spec.label(), spec.key(), result.status.value, result.reason)
        if progress:
            progress("done", spec, result)
    return summary
