"""One export step, one process: ``python -m bakeoff.deploy.exporting REQUEST.json RESULT.json``.

The request names a model directory and either ``"format": "reference"`` — write the evaluation inputs (the first
``examples`` of the test split, and a probe batch of another size and a shorter sequence) and the framework
model's outputs on them, which every format is checked against — or a format to export into ``out``. The process
loads only the source framework (and TensorFlow for jax2tf); a converter that fails is recorded with its message.
The result file is always written (atomically); the exit code is 0 when it was.
"""

from __future__ import annotations

import importlib
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.core import formats
from bakeoff.core import frameworks as records
from bakeoff.deploy import Unsupported, request_main
from bakeoff.measure.isolation import refuse_all_but
from bakeoff.results import model_dir

INPUTS = "inputs.npz"  # the evaluation split (every array, for the metric) and the probe's serving inputs
REFERENCE = "reference.npz"  # the framework model's outputs on both


def export_loads(fmt: formats.Format) -> tuple[str, ...]:
    """The frameworks the export process of ``fmt`` loads: its source framework, and any other it converts
    through (jax2tf writes a TensorFlow SavedModel)."""
    return tuple(dict.fromkeys((fmt.framework, *(p for p in fmt.packages if p in records.FRAMEWORKS))))


def probe_batch(split: Mapping[str, np.ndarray], axes: Mapping[str, tuple[str | None, ...]],
                size: int = 3) -> dict[str, np.ndarray]:
    """The serving inputs of ``size`` examples with every variable-length axis (not the batch) cut to half its
    length: run once per format to show that its dynamic axes are dynamic. Lengths inputs (1-D besides the batch,
    ``feature_lengths``) are clipped to the new length."""
    out: dict[str, np.ndarray] = {}
    cut: dict[str, int] = {}
    for name, names in axes.items():
        array = np.asarray(split[name])[:size]
        index: list[Any] = [slice(None)] * array.ndim
        for axis, label in enumerate(names):
            if label is not None and label != "batch":
                cut[label] = cut.get(label, max(1, array.shape[axis] // 2))
                index[axis] = slice(0, cut[label])
        out[name] = np.ascontiguousarray(array[tuple(index)])
    for name, names in axes.items():  # a (batch,) lengths input of a cut axis: no length beyond the new end
        if names == ("batch",) and cut:
            out[name] = np.minimum(out[name], min(cut.values())).astype(out[name].dtype)
    return out


def _reference(request: Mapping[str, Any], manifest: model_dir.Manifest, directory: Path, out: Path,
               adapter: Any) -> dict[str, Any]:
    from bakeoff.core import registry

    workload = registry.workload(manifest.run_spec)
    data = workload.load_data(manifest.run_spec)
    n = min(int(request.get("examples", 256)), data.num_test)
    split = {k: np.asarray(v)[:n] for k, v in data.test.items()}
    axes = {k: tuple(v) for k, v in manifest.serving_inputs.items()}
    probe = probe_batch(split, axes)
    t0 = time.perf_counter()
    model = adapter.load_model(manifest.workload, manifest.config, directory)
    load_s = time.perf_counter() - t0
    batch = int(request.get("batch", 32))
    chunks = [adapter.predict(model, {k: split[k][i:i + batch] for k in axes}) for i in range(0, n, batch)]
    outputs = np.concatenate(chunks)
    probe_outputs = adapter.predict(model, probe)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / INPUTS, **{f"split.{k}": v for k, v in split.items()}, **{f"probe.{k}": v for k, v in probe.items()})
    np.savez(out / REFERENCE, outputs=outputs, probe=probe_outputs)
    return {"status": "ok", "examples": n, "load_s": load_s, "metric_name": workload.metric_name,
            "metric": workload.metric(outputs, split), "probe_shapes": {k: list(v.shape) for k, v in probe.items()}}


def read_inputs(exports: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """``(split, probe, reference)`` written by the reference step under ``exports``."""
    with np.load(exports / INPUTS) as z:
        split = {k[6:]: z[k] for k in z.files if k.startswith("split.")}
        probe = {k[6:]: z[k] for k in z.files if k.startswith("probe.")}
    with np.load(exports / REFERENCE) as z:
        reference = {k: z[k] for k in z.files}
    return split, probe, reference


def _export(fmt: formats.Format, manifest: model_dir.Manifest, directory: Path, out: Path,
            adapter: Any) -> dict[str, Any]:
    from bakeoff.core import registry

    registry.workload_class(manifest.run_spec)  # a workload from outside bakeoff: the adapter finds it by name next
    split, probe, _ = read_inputs(out.parent)
    axes = {k: tuple(v) for k, v in manifest.serving_inputs.items()}
    example = {k: split[k][:2] for k in axes}
    model = adapter.load_model(manifest.workload, manifest.config, directory)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    info = adapter.export(model, fmt.name, out / fmt.file, example, axes)
    export_s = time.perf_counter() - t0
    path = out / fmt.file
    files = [p for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file()]
    return {"status": "ok", "export_s": export_s, "path": str(path), "bytes": sum(p.stat().st_size for p in files),
            **info}


def run(request: Mapping[str, Any]) -> dict[str, Any]:
    """Carry out one request (module docstring) in this process; never raises for an export failure."""
    directory = Path(request["model_dir"])
    out = Path(request["out"])
    started = time.perf_counter()
    result: dict[str, Any] = {"format": request["format"], "status": "failed"}
    try:
        manifest = model_dir.read(directory)
        if request["format"] == "reference":
            result["refused"] = refuse_all_but(records.FRAMEWORKS[manifest.framework].loads)
            adapter = importlib.import_module(formats.adapter_module(manifest.framework))
            result.update(_reference(request, manifest, directory, out, adapter))
        else:
            fmt = formats.get(request["format"])
            result["refused"] = refuse_all_but(export_loads(fmt))
            adapter = importlib.import_module(fmt.adapter)
            result.update(_export(fmt, manifest, directory, out, adapter))
    except Unsupported as exc:
        result.update(status="unsupported", reason=str(exc))
    except ImportError as exc:
        hint = formats.FORMATS[request["format"]].install_hint if request["format"] in formats.FORMATS else ""
        result.update(status="unsupported", reason=f"not installed: {exc}" + (f"; install with: {hint}" if hint
                                                                                 else ""))
    except Exception as exc:  # a converter failure is data, not a crash of the run
        result.update(status="failed", reason=f"{type(exc).__name__}: {str(exc)[:2000]}",
                      traceback=traceback.format_exc()[-3000:])
    result["wall_s"] = time.perf_counter() - started
    return result


def main(argv: list[str] | None = None) -> int:
    return request_main("bakeoff.deploy.exporting", run, argv)


if __name__ == "__main__":
    sys.exit(main())
