"""The LiteRT runtime: a ``.tflite`` flatbuffer run by the LiteRT interpreter (``ai-edge-litert``), without
TensorFlow: what a phone or an edge box runs. It serves ``litert`` and ``litert-int8``.

The interpreter is driven directly, not through its signature runner, whose every call resizes the inputs and
re-allocates the tensors: here they are resized only when an input's shape changes.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter

from bakeoff.core.formats import ran_on

SIGNATURE = "serving_default"


def load_runtime(fmt: str, path: Path, threads: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """A callable running the flatbuffer at ``path`` with ``threads`` threads (0: the interpreter's default):
    numpy inputs, cast to the model's declared dtypes, to its one output as numpy."""
    interpreter = Interpreter(model_path=str(path), num_threads=threads if threads > 0 else None)
    interpreter.allocate_tensors()
    runner = interpreter.get_signature_runner(SIGNATURE)  # names, tensor indices and dtypes
    inputs, outputs = runner.get_input_details(), list(runner.get_output_details().values())
    del runner  # it holds views of the interpreter's tensors, which would refuse the next allocate_tensors
    main = {d["index"] for d in interpreter.get_input_details()}  # the interpreter's own calls address subgraph 0
    if len(outputs) != 1 or not {d["index"] for d in inputs.values()} <= main:
        raise ValueError(f"{fmt} model {path}: expected one {SIGNATURE} signature on the main subgraph with one "
                         f"output; it has signatures {list(interpreter.get_signature_list())}")
    output = outputs[0]["index"]
    shapes = {name: tuple(d["shape"]) for name, d in inputs.items()}
    signatures = {name: tuple(int(n) for n in d["shape_signature"]) for name, d in inputs.items()}  # -1: dynamic

    def run(feed: dict[str, np.ndarray]) -> np.ndarray:
        arrays = {name: np.ascontiguousarray(feed[name], d["dtype"]) for name, d in inputs.items()}
        changed = [name for name, a in arrays.items() if a.shape != shapes[name]]
        for name in changed:  # every input checked before any is resized
            shape, signature = arrays[name].shape, signatures[name]
            if len(shape) != len(signature) or any(s not in (-1, n) for s, n in zip(signature, shape, strict=False)):
                raise ValueError(f"{fmt} model input {name!r} has shape {list(signature)} (-1: dynamic); "
                                 f"got {list(shape)}")
        for name in changed:
            interpreter.resize_tensor_input(inputs[name]["index"], arrays[name].shape, strict=True)
            shapes[name] = arrays[name].shape
        if changed:
            interpreter.allocate_tensors()
        for name, a in arrays.items():
            interpreter.set_tensor(inputs[name]["index"], a)
        interpreter.invoke()
        return interpreter.get_tensor(output)  # a copy: the next invoke does not overwrite it

    return ran_on(run, "cpu")  # the interpreter without a delegate: bakeoff adds none


def runtime_version() -> str:
    return f"LiteRT {importlib.metadata.version('ai-edge-litert')}"
