"""The deployment half: keep a trained model, export it to each framework's deployment formats, and measure
inference in a fresh process per format with that format's own runtime.

The flow::

    trial (request keep_dir=DIR) ──► model directory: manifest.json + weights.npz (canonical) + native file
    python -m bakeoff.deploy.exporting MODEL_DIR --reference  ──► eval inputs + the framework model's outputs
    python -m bakeoff.deploy.exporting MODEL_DIR FORMAT ...   ──► one format, one process, the source framework
    python -m bakeoff.deploy.infer REQUEST.json RESULT.json    ──► one format, one process, its runtime only

Nothing here imports a framework: each framework's adapter and runtime are in its folder
(``bakeoff.frameworks.<name>.deploy``, ``.runtime``), the framework-free runtimes (``<runtime>_runtime.py``: ONNX
Runtime, LiteRT) here; :mod:`bakeoff.core.formats` names which module serves which format and holds the contract's
types (:class:`Unsupported`, :func:`ran_on`).

**Adapter contract** (module ``bakeoff.frameworks.<name>.deploy``)::

    NATIVE_FILE: str                                                   # e.g. "model.pt"
    save_model(workload: str, config: dict, weights: Weights, directory: Path) -> list[str]
    load_model(workload: str, config: dict, directory: Path) -> Any    # the framework model, ready to predict
    predict(model: Any, inputs: dict[str, np.ndarray]) -> np.ndarray   # inference mode, fp32, host numpy
    export(model: Any, fmt: str, out: Path, example: dict[str, np.ndarray],
           axes: dict[str, tuple[str | None, ...]]) -> dict[str, Any]  # writes ``out``; returns info (below)

``export`` returns ``{"files": [...], "dynamic": {axis: "yes" | "no: <why>"}, "converter": "<tool and version>",
"notes": "..."}`` and raises :class:`Unsupported` for a format that cannot be made here (TensorRT without CUDA),
any other exception for a converter failure (recorded ``failed`` with its message).

**Runtime contract** (module ``bakeoff.frameworks.<name>.runtime`` or ``bakeoff.deploy.<runtime>_runtime``)::

    load_runtime(fmt: str, path: Path, threads: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]
    runtime_version() -> str
    THREADS_APPLIED: bool = True                                       # False: ``threads`` cannot be set (JAX)

The callable takes the model's inputs as numpy arrays and returns its output as host numpy (synchronised), so the
caller's clock measures the whole inference. It says where it computes (:func:`ran_on`): ``run.device``, the
device its runtime uses as the runtime reports it, and ``run.facts``, settings read from the runtime (TF32), both
recorded in the format's deployment row.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bakeoff.core.formats import Run, Unsupported, ran_on

__all__ = ["Run", "Unsupported", "ran_on", "request_main"]

def request_main(module: str, handle: Callable[[Mapping[str, Any]], dict[str, Any]], argv: list[str] | None) -> int:
    """``python -m module REQUEST.json RESULT.json``: the result of ``handle(request)`` written atomically (a reader
    never sees half a file); exit 0 when it was written, 2 for a wrong command line."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        sys.stderr.write(f"usage: python -m {module} REQUEST.json RESULT.json\n")
        return 2
    result = handle(json.loads(Path(argv[0]).read_text()))
    path = Path(argv[1])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1, default=str))
    os.replace(tmp, path)
    return 0
