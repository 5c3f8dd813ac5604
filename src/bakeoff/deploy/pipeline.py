"""Train and keep, export, measure: the deployment half as the CLI runs it.

* :func:`train` runs trials through the runner (one fresh process each, stored like any trial) asking each to keep
  its model; a model directory already kept for a trial's key is reused, not trained again.
* :func:`export_and_measure` takes a model directory through the reference step, then for each format an export
  process and, when it exported, an inference process; each is a fresh process with a deadline, and one that
  crashes, hangs or fails is recorded with its reason while the other formats go on. Every format's row goes into
  the store as it finishes; a row already stored for the same model, format and settings is reused (``fresh``
  measures again).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bakeoff.core import formats
from bakeoff.core import frameworks as records
from bakeoff.core.files import temporary_folder
from bakeoff.core.spec import RunSpec, SpecError
from bakeoff.measure.environment import usable_cores
from bakeoff.results import model_dir
from bakeoff.results.store import Store

log = logging.getLogger("bakeoff.deploy")

ROW_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Settings:
    """How each format is measured; equal for every format and recorded with each row."""

    threads: int = 0  # CPU threads every runtime is given; 0: all cores
    batch: int = 32  # the throughput batch
    calls: int = 200  # timed batch-1 calls
    warmup: int = 10  # untimed batch-1 calls before them
    rounds: int = 3  # throughput passes over the evaluation examples
    examples: int = 256  # evaluation examples from the test split
    timeout_s: float = 900.0  # per process

    def __post_init__(self) -> None:
        for name in ("batch", "calls", "rounds", "examples"):
            if getattr(self, name) < 1:
                raise SpecError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.threads < 0 or self.warmup < 0 or not self.timeout_s > 0:
            raise SpecError("threads and warmup must not be negative, and the timeout must be above 0")

    @property
    def cpu_threads(self) -> int:
        return self.threads or usable_cores()


Progress = Callable[[str, str, dict[str, Any] | None], None]
"""Called with ("start" | "done" | "skip", format name, row or None) as formats go."""


def train(specs: Sequence[RunSpec], store: Store, models: Path, timeout_s: float = 900.0,
          progress: Any = None) -> list[tuple[RunSpec, Path | None, str]]:
    """Train each spec and keep its model under ``models``; ``(identified spec, model directory or None, reason)``
    per spec, reusing a model already kept for the same trial key."""
    from bakeoff.core.identity import identify
    from bakeoff.run import runner

    runner.validate(specs)
    identified = identify(specs)
    todo = [s for s in identified if not _kept(models / model_dir.directory_name(s))]
    reasons: dict[str, str] = {}
    if todo:
        summary = runner.run(todo, store, "train", timeout_s=timeout_s, fresh=True, progress=progress,
                             validated=True, keep_models=models)
        reasons = {r.key: f"{r.status.value}: {r.reason}" for r in summary.ran if r.status.value != "ok"}
    out = []
    for spec in identified:
        directory = models / model_dir.directory_name(spec)
        ok = _kept(directory)
        out.append((spec, directory if ok else None, "" if ok else reasons.get(spec.key(), "no model was kept")))
    return out


def _kept(directory: Path) -> bool:
    try:
        model_dir.read(directory)
    except model_dir.ModelDirError:
        return False
    return True


def row_key(manifest: model_dir.Manifest, fmt: str, settings: Settings) -> str:
    """A deployment row's identity: the kept model, the format, the settings and bakeoff's version."""
    from bakeoff.core.identity import bakeoff_version

    raw = json.dumps([ROW_VERSION, manifest.key, manifest.created_at, fmt, dataclasses.asdict(settings),
                      settings.cpu_threads, bakeoff_version()])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _env(frameworks_loaded: Sequence[str], threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    for name in frameworks_loaded:
        env.update(records.get(name).env)
    return env


def run_process(module: str, request: dict[str, Any], timeout_s: float, env: dict[str, str],
                log_path: Path) -> dict[str, Any]:
    """``python -m module REQUEST RESULT`` in a fresh process group; its result, or a failure / timeout row with
    the log's tail when it wrote none. The whole group is killed on timeout."""
    with temporary_folder("bakeoff-deploy-") as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps(request))
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "w") as logf:
            proc = subprocess.Popen([sys.executable, "-m", module, str(req), str(res)], stdout=logf,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                code = proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return {"status": "timeout", "reason": f"no result after {timeout_s:.0f} s (log: {log_path})"}
            except BaseException:  # interrupted: take the process down with us
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise
        if res.is_file():
            return json.loads(res.read_text())
    tail = log_path.read_text(errors="replace")[-600:].strip() if log_path.is_file() else ""
    what = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    status = "out_of_memory" if code == -signal.SIGKILL else "failed"
    return {"status": status, "reason": f"the process {what} and wrote no result: {tail} (log: {log_path})"}


def _reference(directory: Path, manifest: model_dir.Manifest, settings: Settings, logs: Path) -> dict[str, Any]:
    exports = directory / "exports"
    marker = exports / "reference.json"
    wanted = {"examples": settings.examples, "batch": settings.batch, "created_at": manifest.created_at}
    if marker.is_file():
        done = json.loads(marker.read_text())
        if done.get("status") == "ok" and all(done.get(k) == v for k, v in wanted.items()):
            return done
    request = {"model_dir": str(directory), "format": "reference", "out": str(exports), **wanted}
    env = _env(records.get(manifest.framework).loads, settings.cpu_threads)
    result = run_process("bakeoff.deploy.exporting", request, settings.timeout_s, env, logs / "reference.log")
    result.update(wanted)
    if result.get("status") == "ok":
        exports.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps(result, indent=1))
    return result


def evaluate(directory: Path, timeout_s: float = 900.0, batch: int = 256) -> dict[str, Any]:
    """The kept model's metric on its whole test split, computed again from its native file in a fresh process
    of its framework: ``{"status", "metric", "metric_name", "examples", "trained_metric"}`` (or the reason)."""
    manifest = model_dir.read(directory)
    with temporary_folder("bakeoff-evaluate-") as tmp:
        request = {"model_dir": str(directory), "format": "reference", "out": tmp, "examples": 10**12,
                   "batch": batch}
        env = _env(records.get(manifest.framework).loads, usable_cores())
        result = run_process("bakeoff.deploy.exporting", request, timeout_s, env, Path(tmp) / "evaluate.log")
    return {**result, "trained_metric": manifest.final_metric}


def export_and_measure(directory: Path, store: Store, settings: Settings, names: Sequence[str] | None = None,
                       fresh: bool = False, progress: Progress | None = None) -> list[dict[str, Any]]:
    """Export the model in ``directory`` to each format (``names``, default all of its framework's) and measure
    each in its runtime; the rows, each stored as it finishes.

    Raises:
        ModelDirError: the directory is missing, from another version, or incomplete.
        SpecError: a format that is not one of this framework's.
    """
    manifest = model_dir.read(directory)
    own = formats.for_framework(manifest.framework)
    if names:
        chosen = [formats.get(n) for n in names]
        foreign = [f.name for f in chosen if f.framework != manifest.framework]
        if foreign:
            raise SpecError(f"{', '.join(foreign)}: not formats of {manifest.framework}, whose model {directory} "
                            f"holds; its formats: {', '.join(f.name for f in own)}")
    else:
        chosen = own
    logs = directory / "exports" / "logs"
    stored = {row["key"]: row for row in store.deployments(model_keys=[manifest.key])}
    base = {"model_key": manifest.key, "model_dir": str(directory), "workload": manifest.workload,
            "preset": manifest.preset, "framework": manifest.framework, "label": manifest.label,
            "settings": {**dataclasses.asdict(settings), "cpu_threads": settings.cpu_threads},
            "trained_metric": manifest.final_metric, "metric_name": manifest.metric_name,
            "higher_is_better": manifest.higher_is_better, "version": ROW_VERSION}
    pending = []
    rows = []
    for fmt in chosen:
        key = row_key(manifest, fmt.name, settings)
        if not fresh and stored.get(key, {}).get("status") in ("ok", "unsupported"):
            rows.append(stored[key])
            if progress:
                progress("skip", fmt.name, stored[key])
        else:
            pending.append((fmt, key))
    if not pending:
        return rows
    reference = _reference(directory, manifest, settings, logs)
    for fmt, key in pending:
        if progress:
            progress("start", fmt.name, None)
        row = {**base, "key": key, "format": fmt.name, "display": fmt.display, "runtime": fmt.runtime,
               "targets": list(fmt.targets), "quantised": fmt.quantised}
        if reference.get("status") != "ok":
            row.update(status="failed", reason=f"the framework model could not be evaluated, so no format can be "
                                               f"checked against it: {reference.get('reason', '')}")
        else:
            row["reference"] = {k: reference.get(k) for k in ("metric", "metric_name", "examples", "load_s")}
            row.update(_one_format(directory, manifest, fmt, settings, logs))
        store.put_deployment(row)
        (directory / "exports").mkdir(parents=True, exist_ok=True)
        (directory / "exports" / f"{fmt.name}.json").write_text(json.dumps(row, indent=1, default=str))
        rows.append(row)
        if progress:
            progress("done", fmt.name, row)
    return rows


def _one_format(directory: Path, manifest: model_dir.Manifest, fmt: formats.Format, settings: Settings,
                logs: Path) -> dict[str, Any]:
    from bakeoff.deploy.exporting import export_loads

    exports = directory / "exports"
    out = exports / fmt.name
    request = {"model_dir": str(directory), "format": fmt.name, "out": str(out)}
    exported = run_process("bakeoff.deploy.exporting", request, settings.timeout_s,
                           _env(export_loads(fmt), settings.cpu_threads), logs / f"{fmt.name}.export.log")
    row: dict[str, Any] = {"export": exported, "status": exported.get("status", "failed"),
                           "reason": exported.get("reason", "")}
    if row["status"] != "ok":
        row["stage"] = "export"
        return row
    request = {"format": fmt.name, "path": exported["path"], "exports": str(exports), "workload": manifest.workload,
               "spec": manifest.spec, "threads": settings.cpu_threads, "batch": settings.batch, "calls": settings.calls,
               "warmup": settings.warmup, "rounds": settings.rounds}
    measured = run_process("bakeoff.deploy.infer", request, settings.timeout_s, _env(fmt.loads, settings.cpu_threads),
                           logs / f"{fmt.name}.infer.log")
    row.update(inference=measured, status=measured.get("status", "failed"), reason=measured.get("reason", ""))
    if row["status"] != "ok":
        row["stage"] = "inference"
    return row
