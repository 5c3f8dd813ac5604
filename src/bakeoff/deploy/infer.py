"""One exported format, measured in one fresh process with its own runtime:
``python -m bakeoff.deploy.infer REQUEST.json RESULT.json``.

The process refuses every framework the format's runtime does not need (an ONNX Runtime or LiteRT process loads
none), then measures, in this order:

* ``import_s`` and ``load_s``: importing the runtime, and loading the file into it;
* ``first_s``: the first inference (one example), where lazy initialisation and any compilation land;
* latency at batch 1: ``calls`` timed calls after ``warmup`` untimed ones, cycling over the evaluation examples,
  every sample kept; p50, p95 and p99;
* throughput at ``batch``: after two untimed batches (a runtime that compiles per input shape does it there),
  ``rounds`` passes over the evaluation examples, examples/s per pass, median kept;
* output parity: the first pass's outputs against the framework model's (maximum absolute difference against the
  format's tolerance) and the workload's metric on them; the probe batch (another size, shorter sequences) against
  the framework model's outputs at that shape, which shows whether the dynamic axes are dynamic;
* memory: resident set after loading, and the process's peak resident set.

Every call is timed on the host clock around a runtime call that returns host numpy, so the time is the whole
inference. ``timer_s`` is the median cost of the timing itself (a timed empty call), so a reader can see it is
negligible against the latencies.
"""

from __future__ import annotations

import importlib
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.core import formats
from bakeoff.core.spec import RunSpec
from bakeoff.deploy import Unsupported, request_main
from bakeoff.measure.isolation import foreign_frameworks, loaded_frameworks, refuse_all_but
from bakeoff.measure.memory import RssProbe

Runner = Callable[[dict[str, np.ndarray]], np.ndarray]


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50, p95 and p99 of ``samples`` (linear interpolation between order statistics), in seconds."""
    values = np.asarray(samples, np.float64)
    return {f"p{q}": float(np.percentile(values, q)) for q in (50, 95, 99)}


def timer_cost(calls: int = 2000) -> float:
    """Median seconds that timing one call costs: perf_counter around an empty call."""
    def nothing(_: Any) -> None:
        return None

    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        nothing(None)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def latencies(run: Runner, examples: list[dict[str, np.ndarray]], calls: int, warmup: int) -> list[float]:
    """Seconds of each of ``calls`` batch-1 calls, after ``warmup`` untimed ones, cycling over ``examples``."""
    for i in range(warmup):
        run(examples[i % len(examples)])
    samples = []
    for i in range(calls):
        example = examples[i % len(examples)]
        t0 = time.perf_counter()
        run(example)
        samples.append(time.perf_counter() - t0)
    return samples


def _batches(inputs: Mapping[str, np.ndarray], size: int) -> list[dict[str, np.ndarray]]:
    n = len(next(iter(inputs.values())))
    return [{k: v[i:i + size] for k, v in inputs.items()} for i in range(0, n, size)]


def compare(outputs: np.ndarray, reference: np.ndarray) -> float:
    """Largest absolute difference; ``inf`` when the shapes differ or a value is not finite where the reference's
    is."""
    if outputs.shape != reference.shape:
        return float("inf")
    diff = np.abs(outputs.astype(np.float64) - reference.astype(np.float64))
    return float(np.nanmax(np.where(np.isfinite(reference), diff, 0.0))) if diff.size else 0.0


def measure(fmt: formats.Format, path: Path, threads: int, batch: int, calls: int, warmup: int, rounds: int,
            exports: Path, workload_name: RunSpec | str) -> dict[str, Any]:
    """Everything the module docstring lists, for ``fmt`` at ``path``."""
    from bakeoff.core import registry
    from bakeoff.deploy.exporting import read_inputs

    split, probe, reference = read_inputs(exports)
    names = list(probe)
    workload = registry.workload(workload_name)
    out: dict[str, Any] = {"threads": threads, "batch": batch, "calls": calls, "warmup": warmup, "rounds": rounds,
                           "examples": len(reference["outputs"]), "rss_before_bytes": RssProbe().current(),
                           "load_average_1m_at_start": round(os.getloadavg()[0], 2), "cores": os.cpu_count()}
    t0 = time.perf_counter()
    runtime = importlib.import_module(fmt.runtime_module)
    out["import_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    run = runtime.load_runtime(fmt.name, path, threads)
    out["load_s"] = time.perf_counter() - t0
    out["rss_loaded_bytes"] = RssProbe().current()
    out["runtime"] = runtime.runtime_version()
    out["device"] = getattr(run, "device", "not reported by the runtime")  # where it computes, as it says
    out.update(getattr(run, "facts", {}))
    out["threads_applied"] = getattr(runtime, "THREADS_APPLIED", True)  # JAX's CPU runtime has no thread setting
    singles = [{k: split[k][i:i + 1] for k in names} for i in range(len(reference["outputs"]))]
    t0 = time.perf_counter()
    run(singles[0])
    out["first_s"] = time.perf_counter() - t0
    out["latency_samples_s"] = latencies(run, singles, calls, warmup)
    out["latency_s"] = percentiles(out["latency_samples_s"])
    out["timer_s"] = timer_cost()
    chunks = _batches({k: split[k] for k in names}, batch)
    for c in chunks[:2]:  # untimed: a runtime that compiles per input shape does it here, not in a timed pass
        run(c)
    passes, outputs = [], None
    for r in range(rounds):
        t0 = time.perf_counter()
        got = [run(c) for c in chunks]
        passes.append(len(reference["outputs"]) / (time.perf_counter() - t0))
        if r == 0:
            outputs = np.concatenate([np.asarray(g) for g in got])
    out["throughput_samples"] = passes
    out["examples_per_s"] = statistics.median(passes)
    out["max_abs_diff"] = compare(outputs, reference["outputs"])
    out["tolerance"] = fmt.tolerance
    out["metric_name"] = workload.metric_name
    out["metric"] = workload.metric(outputs, split) if outputs.shape == reference["outputs"].shape else None
    out["reference_metric"] = workload.metric(reference["outputs"], split)
    try:
        out["probe_max_abs_diff"] = compare(np.asarray(run(probe)), reference["probe"])
    except Exception as exc:  # noqa: BLE001 - a format that cannot take the probe's shapes: recorded, not fatal
        out["probe_error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    out["peak_rss_bytes"] = RssProbe().peak()
    out["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)  # other work on the machine skews latencies
    return out


def parity(result: Mapping[str, Any]) -> str:
    """"ok" (within the tolerance), "differs" (beyond it), or "reported" (a quantised format: no tolerance)."""
    tol = result.get("tolerance")
    if tol is None:
        return "reported"
    return "ok" if result.get("max_abs_diff", float("inf")) <= tol else "differs"


def dynamic(result: Mapping[str, Any]) -> str:
    """Whether the probe batch (another batch size, shorter sequences) ran and matched: "yes", or "no: why"."""
    if "probe_error" in result:
        return f"no: {result['probe_error']}"
    tol = result.get("tolerance") or 0.05
    diff = result.get("probe_max_abs_diff")
    if diff is None:
        return "no: not measured"
    return "yes" if diff <= tol else f"no: outputs at the probe's shapes differ by {diff:.3g}"


def _workload(request: Mapping[str, Any]) -> RunSpec | str:
    """The workload of the kept model: its trial's spec (which says where a workload from outside bakeoff is), or
    its name."""
    return RunSpec.from_dict(request["spec"]) if request.get("spec") else request["workload"]


def run_request(request: Mapping[str, Any]) -> dict[str, Any]:
    fmt = formats.get(request["format"])
    result: dict[str, Any] = {"format": fmt.name, "status": "failed",
                              "refused": refuse_all_but(fmt.loads)}  # first: before anything imports a framework
    try:
        result.update(measure(fmt, Path(request["path"]), int(request["threads"]), int(request["batch"]),
                              int(request["calls"]), int(request["warmup"]), int(request["rounds"]),
                              Path(request["exports"]), _workload(request)))
        loaded = loaded_frameworks()
        result["frameworks_loaded"] = loaded
        foreign = [fw for fw in loaded if fw not in fmt.loads]
        if foreign:
            result["status"] = "failed"
            result["reason"] = (f"the {fmt.display} runtime loaded {', '.join(foreign)}, which it should not need: "
                                f"{foreign_frameworks(fmt.loads[0] if fmt.loads else '', loaded)}")
        else:
            result["status"] = "ok"
            result["parity"], result["dynamic"] = parity(result), dynamic(result)
    except Unsupported as exc:
        result.update(status="unsupported", reason=str(exc))
    except ImportError as exc:
        result.update(status="unsupported", reason=f"not installed: {exc}; install with: {fmt.install_hint}")
    except MemoryError as exc:
        result.update(status="out_of_memory", reason=repr(exc))
    except Exception as exc:  # a runtime that cannot run the file is data, not a crash of the run
        result.update(status="failed", reason=f"{type(exc).__name__}: {str(exc)[:2000]}",
                      traceback=traceback.format_exc()[-3000:])
    return result


def main(argv: list[str] | None = None) -> int:
    return request_main("bakeoff.deploy.infer", run_request, argv)


if __name__ == "__main__":
    sys.exit(main())
