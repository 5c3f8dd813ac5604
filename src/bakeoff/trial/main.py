"""One trial, one process: ``python -m bakeoff.trial SPEC.json RESULT.json [CHECKPOINT_DIR [TENSORBOARD_DIR]]``.

The runner starts this in a fresh interpreter per trial, so import cost, threads and memory are measured clean
and a crash takes down only its own trial. The result file is written whatever happens (atomically), with the
status and reason when the trial could not finish; the exit code is 0 when a result was written.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path

from bakeoff.core import frameworks
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import Parallelism, RunSpec, Status
from bakeoff.measure import ceiling
from bakeoff.measure.environment import host_environment
from bakeoff.measure.isolation import foreign_frameworks, loaded_frameworks, refuse_foreign
from bakeoff.results.model_dir import KEEP_MODEL_ENV
from bakeoff.trial.build import build_trial


def _classify(exc: BaseException, framework: str) -> Status:
    """Out of memory when the exception is Python's MemoryError or carries one of the framework's out-of-memory
    markers (its record's ``oom_markers``) in its type name or message; failed otherwise."""
    if isinstance(exc, MemoryError):
        return Status.OUT_OF_MEMORY
    text = f"{type(exc).__name__}: {str(exc)[:2000]}"
    markers = frameworks.FRAMEWORKS[framework].oom_markers if framework in frameworks.FRAMEWORKS else ()
    return Status.OUT_OF_MEMORY if any(m in text for m in markers) else Status.FAILED


def process_rank() -> int:
    """This process's rank in its trial's group: ``RANK`` (torchrun), ``BAKEOFF_RANK`` (bakeoff's TensorFlow
    launchers), else 0."""
    return int(os.environ.get("RANK") or os.environ.get("BAKEOFF_RANK") or 0)


def rank_result_path(path: Path, rank: int) -> Path:
    """Where rank ``rank`` writes its result: rank 0 at ``path``, the others beside it (``result.rank1.json``)."""
    return path if rank == 0 else path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def run_trial(spec: RunSpec, checkpoint_dir: Path | None = None, tensorboard_dir: Path | None = None) -> TrialResult:
    """Run one trial in this process and return its result (never raises for a trial failure)."""
    started = time.perf_counter()
    result = TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.FAILED)
    result.environment = host_environment()
    result.extras["started_at"] = _MAIN_AT  # the trial's first line, on its node's clock: executors' scheduling time
    launched = os.environ.get("BAKEOFF_LAUNCHED_AT")
    if launched:  # the launcher's clock when it started the group: process start, torchrun's agent included
        result.extras["launch_s"] = max(0.0, _MAIN_AT - float(launched))
    if spec.parallelism is not Parallelism.NONE:
        result.extras["rank"] = process_rank()
    engine = None
    try:
        parts = build_trial(spec)
        data, config = parts.data, parts.config
        result.extras["config"] = config
        result.extras["data"] = {**data.info, "rows": {"train": data.num_train, "test": data.num_test}}
        try:
            engine_cls = parts.engine_class()  # imports the framework
        except ImportError as exc:
            result.status = Status.UNSUPPORTED
            hint = frameworks.get(spec.framework.value).install_hint
            result.reason = f"{spec.framework} is not installed ({exc}); install it with: {hint}"
            return result
        result.import_s = parts.import_s
        engine = engine_cls(spec, parts.workload, config)
        parts.set_up(engine)
        result.build_s = parts.build_s
        result.num_params = engine.num_params()
        result.environment.update(engine.environment())

        from bakeoff.trial.loop import NO_EVALUATION_ENV, train

        train(engine, data, result, checkpoint_dir=checkpoint_dir, tensorboard_dir=tensorboard_dir,
              evaluate_quality=not os.environ.get(NO_EVALUATION_ENV))
        # One trial, one framework: another one in this process would be charged to the framework under test.
        loaded = loaded_frameworks()
        result.environment["frameworks_loaded"] = loaded
        foreign = foreign_frameworks(spec.framework.value, loaded)
        result.status, result.reason = (Status.FAILED, foreign) if foreign else (Status.OK, "")
        keep_dir = os.environ.get(KEEP_MODEL_ENV)
        if keep_dir and result.status is Status.OK and engine.is_chief():
            _keep(spec, config, engine, data.serving, result, Path(keep_dir))
    except Exception as exc:  # a trial failure is data, not a crash of the run
        from bakeoff.engines.base import Unsupported

        result.status = Status.UNSUPPORTED if isinstance(exc, Unsupported) else _classify(exc, spec.framework.value)
        result.reason = f"{type(exc).__name__}: {exc}"
        if result.status is Status.FAILED:
            result.extras["traceback"] = traceback.format_exc()[-4000:]
    finally:
        if engine is not None:
            try:  # the loop fills the memory figures; a trial that failed mid-way still gets its peak
                probe = engine.memory_probe()
                peak = probe.peak()
                if peak is not None:
                    result.peak_memory_bytes = max(result.peak_memory_bytes or 0, peak)
                result.memory_kind = result.memory_kind or probe.kind
                result.annotate(engine.extras())  # a section's figures into it (loss scaling), the rest to extras
            except Exception as exc:  # noqa: BLE001 - a failed probe must not hide the trial's own result
                result.extras["memory_probe_error"] = repr(exc)
        result.environment["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
        result.wall_s = time.perf_counter() - started
    if engine is not None and result.status is Status.OK:
        _profile(spec, engine, data, result)
    return result


def _profile(spec: RunSpec, engine, data, result: TrialResult) -> None:
    """When the runner asks (:mod:`bakeoff.trial.profile`), profile a few more steps: after every figure of the
    result is final, so that none of them changes. Each process of a distributed trial into its ``rank<N>``."""
    from bakeoff.trial import profile
    from bakeoff.trial.loop import next_steps

    request = profile.Request.from_env()
    if request is None:
        return
    if spec.parallelism is not Parallelism.NONE:
        request = dataclasses.replace(request, directory=request.directory / f"rank{process_rank()}")
    profile.profile(engine, next_steps(engine, data), request, result, first_step=len(result.step_times_s) + 1)


def _keep(spec: RunSpec, config: dict, engine, serving: dict, result: TrialResult, directory: Path) -> None:
    """Keep the trained model (:mod:`bakeoff.results.model_dir`); a trial asked to keep one fails when it cannot."""
    from bakeoff.core import formats
    from bakeoff.results.model_dir import check_keepable, keep

    t0 = time.perf_counter()
    try:
        check_keepable(spec)
        adapter = importlib.import_module(formats.adapter_module(spec.framework.value))  # its record's ``deploy``
        keep(spec, config, engine.impl.get_weights(), serving, result, directory, adapter)
    except Exception as exc:  # noqa: BLE001 - recorded as the trial's failure, with the message
        result.status = Status.FAILED
        result.reason = f"trained, but the model could not be kept in {directory}: {type(exc).__name__}: {exc}"
        result.extras["traceback"] = traceback.format_exc()[-4000:]
        return
    result.extras["kept_model"] = {"directory": str(directory), "keep_s": time.perf_counter() - t0}


def write_result(result: TrialResult, path: Path) -> None:
    """Write atomically, so a reader never sees half a result."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(result.to_dict(), indent=1))
    os.replace(tmp, path)


_MAIN_AT = time.time()  # when this interpreter reached this module (wall clock, comparable across processes)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not 2 <= len(argv) <= 4:
        sys.stderr.write("usage: python -m bakeoff.trial SPEC.json RESULT.json [CHECKPOINT_DIR [TENSORBOARD_DIR]]\n")
        return 2
    logging.basicConfig(level=logging.WARNING)
    spec = RunSpec.from_dict(json.loads(Path(argv[0]).read_text()))
    refused = refuse_foreign(spec.framework.value)
    dirs = [Path(a) if a else None for a in argv[2:]] + [None, None]
    result = run_trial(spec, dirs[0], dirs[1])
    result.environment["imports_refused"] = refused
    ceiling.in_trial(spec, result)  # when the runner asks: after every figure of the result is final
    write_result(result, rank_result_path(Path(argv[1]), process_rank()))
    return 0
