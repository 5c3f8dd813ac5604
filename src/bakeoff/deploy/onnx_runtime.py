"""The ONNX Runtime runtime, for every ONNX format (torch-onnx and tf-onnx alike); imports no framework.

The graph declares its input names and element types; inputs are cast to them (the data's int32 tokens for a
graph exported with int64, say) and its output called ``outputs`` is returned.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort

from bakeoff.core.formats import ran_on

Run = Callable[[dict[str, np.ndarray]], np.ndarray]

_DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
           "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16,
           "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


def runtime_version() -> str:
    return f"onnxruntime {ort.__version__}"


CUDA_OPTIONS = {"use_tf32": "0"}
"""The CUDA provider's options: no TF32 (its default is on), so fp32 is fp32 as in the trials and the other formats."""


def providers() -> list[str | tuple[str, dict[str, str]]]:
    """CUDA first where this onnxruntime build has it (with :data:`CUDA_OPTIONS`), then the CPU."""
    available = ort.get_available_providers()
    return [(p, CUDA_OPTIONS) if p == "CUDAExecutionProvider" else p
            for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


def load_runtime(fmt: str, path: Path, threads: int) -> Run:
    """An ONNX Runtime session on ``path``: ``threads`` intra-op threads (0: onnxruntime's default, the physical
    cores), one inter-op thread (the graphs run sequentially)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=providers())
    outputs = [o.name for o in session.get_outputs()]
    if "outputs" not in outputs:
        raise ValueError(f"{path} has no output called 'outputs' (it has {', '.join(outputs)})")
    types = {}
    for arg in session.get_inputs():
        if arg.type not in _DTYPES:
            raise ValueError(f"{path}: input {arg.name} has type {arg.type}; known: {', '.join(_DTYPES)}")
        types[arg.name] = _DTYPES[arg.type]

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        feeds = {name: np.ascontiguousarray(inputs[name], dtype) for name, dtype in types.items()}
        return session.run(["outputs"], feeds)[0]  # host numpy: the run has finished

    used = session.get_providers()  # what the session took, in order of preference: nodes go to the first
    cuda = session.get_provider_options().get("CUDAExecutionProvider", {})
    device = f"cuda:{cuda.get('device_id', '0')}" if used[0] == "CUDAExecutionProvider" else "cpu"
    facts = {"providers": used, **({"tf32": cuda.get("use_tf32") not in ("0", 0)} if cuda else {})}
    return ran_on(run, device, **facts)
