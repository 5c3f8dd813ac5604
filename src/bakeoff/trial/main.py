"""One trial, one process: ``python -m bakeoff.trial REQUEST.json``.

The runner starts this in a fresh interpreter per trial, so import cost, threads and memory are measured clean
and a crash takes down only its own trial. What the parent asks is one :class:`bakeoff.core.contract.TrialRequest`
(the spec, the result's path, the folders, keep, probe, profile, evaluate), read here once; where this process
stands in its group (its rank, its threads) is the launcher's :class:`bakeoff.core.contract.Placement`. The result
file is written whatever happens (atomically), with the status and reason when the trial could not finish; the exit
code is 0 when a result was written.

By hand, ``python -m bakeoff.trial SPEC.json RESULT.json [CHECKPOINT_DIR [TENSORBOARD_DIR]]`` asks for the trial
and nothing more.
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
from bakeoff.core.contract import Placement, TrialRequest
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import Parallelism, RunSpec, Status
from bakeoff.measure import ceiling
from bakeoff.measure.environment import host_environment
from bakeoff.measure.isolation import foreign_frameworks, loaded_frameworks, refuse_foreign
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
    """This process's rank in its trial's group: ``RANK`` (torchrun), the launcher's (:class:`Placement`: bakeoff's
    TensorFlow and JAX launchers), else 0."""
    return int(os.environ.get("RANK") or Placement.read().rank or 0)


def rank_result_path(path: Path, rank: int) -> Path:
    """Where rank ``rank`` writes its result: rank 0 at ``path``, the others beside it (``result.rank1.json``)."""
    return path if rank == 0 else path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def run_trial(request: TrialRequest) -> TrialResult:
    """Run the requested trial in this process and return its result (never raises for a trial failure)."""
    spec = request.spec
    started = time.perf_counter()
    result = TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.FAILED)
    result.environment = host_environment()
    result.setup.started_at = _MAIN_AT  # the trial's first line, on its node's clock: executors' scheduling time
    launched = Placement.read().launched_at
    if launched is not None:  # the launcher's clock when it started the group: process start, torchrun's included
        result.setup.launch_s = max(0.0, _MAIN_AT - launched)
    if spec.parallelism is not Parallelism.NONE:
        result.setup.rank = process_rank()
    engine = None
    try:
        parts = build_trial(spec)
        data, config = parts.data, parts.config
        result.setup.config = config
        result.setup.data = {**data.info, "rows": {"train": data.num_train, "test": data.num_test}}
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

        from bakeoff.trial.loop import train

        train(engine, data, result, checkpoint_dir=request.checkpoint_dir, tensorboard_dir=request.tensorboard_dir,
              evaluate_quality=request.evaluate, progress_s=request.progress_s)
        # One trial, one framework: another one in this process would be charged to the framework under test.
        loaded = loaded_frameworks()
        result.environment["frameworks_loaded"] = loaded
        foreign = foreign_frameworks(spec.framework.value, loaded)
        result.status, result.reason = (Status.FAILED, foreign) if foreign else (Status.OK, "")
        if request.keep_dir is not None and result.status is Status.OK and engine.is_chief():
            _keep(spec, config, engine, data.serving, result, request.keep_dir)
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
        _profile(request, engine, data, result)
    return result


def _profile(asked: TrialRequest, engine, data, result: TrialResult) -> None:
    """When the runner asks (:mod:`bakeoff.trial.profile`), profile a few more steps: after every figure of the
    result is final, so that none of them changes. Each process of a distributed trial into its ``rank<N>``."""
    from bakeoff.trial import profile
    from bakeoff.trial.loop import next_steps

    spec = asked.spec
    request = profile.Request.from_trial(asked)
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
    result.setup.kept_model = {"directory": str(directory), "keep_s": time.perf_counter() - t0}


def write_result(result: TrialResult, path: Path) -> None:
    """Write atomically, so a reader never sees half a result."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(result.to_dict(), indent=1))
    os.replace(tmp, path)


_MAIN_AT = time.time()  # when this interpreter reached this module (wall clock, comparable across processes)


USAGE = ("usage: python -m bakeoff.trial REQUEST.json\n"
         "       python -m bakeoff.trial SPEC.json RESULT.json [CHECKPOINT_DIR [TENSORBOARD_DIR]]\n")


def request_from_args(argv: list[str]) -> TrialRequest | None:
    """The trial's request: the file of its one argument, or, by hand, a spec file, a result path and optional
    checkpoint and TensorBoard folders (asking for nothing more); None for other arguments."""
    if len(argv) == 1:
        return TrialRequest.read(Path(argv[0]))
    if not 2 <= len(argv) <= 4:
        return None
    dirs = [Path(a) if a else None for a in argv[2:]] + [None, None]
    return TrialRequest(spec=RunSpec.from_dict(json.loads(Path(argv[0]).read_text())), result=Path(argv[1]),
                        checkpoint_dir=dirs[0], tensorboard_dir=dirs[1])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    request = request_from_args(argv)
    if request is None:
        sys.stderr.write(USAGE)
        return 2
    logging.basicConfig(level=logging.WARNING)
    refused = refuse_foreign(request.spec.framework.value)
    result = run_trial(request)
    result.environment["imports_refused"] = refused
    if request.probe_ceiling:  # when the runner asks: after every figure of the result is final
        ceiling.in_trial(request.spec, result)
    write_result(result, rank_result_path(request.result, process_rank()))
    return 0
