"""PaddlePaddle's deployment adapter: keep a model as its ``state_dict`` (``paddle.save``), and export it to
Paddle's two formats.

* ``paddle-inference`` — ``paddle.jit.save`` of :class:`Serving` with one ``InputSpec`` per serving input (``None``
  on every named axis): Paddle 3's static program (PIR, ``model.json``) and its parameters (``model.pdiparams``),
  in a directory with ``bakeoff.json`` (the inputs' names and dtypes, and the program's output name), run by
  ``paddle.inference``'s predictor (:mod:`bakeoff.frameworks.paddle.runtime`).
* ``paddle-onnx`` — the same saved program through ``paddle2onnx.export`` (opset 17, ``optimize_tool="None"``:
  its default calls polygraphy, which tries to pip-install a package at run time), its output renamed
  ``outputs`` and its dynamic dimensions named after the serving axes, run by ONNX Runtime.

Every format is made from :class:`Serving`, which takes the serving inputs as one dict and returns exactly the
model's ``outputs(batch)``, so an export cannot drift from what training evaluated. Each export is then run again
by its own runtime at other shapes (batch 1, one more example than given, every other named axis halved) and
compared with the dygraph model there: an axis is reported dynamic only when that comparison passed
(:func:`check_dynamic`).

Paddle Lite (mobile) is not a format here: its converter (``paddle_lite_opt``, in the ``paddlelite`` wheel, whose
last release is 2.12 of November 2022) is not installable from this project's package index (pip finds no
distribution), and it reads the older ProgramDesc ``.pdmodel``, not the PIR ``model.json`` Paddle 3's ``jit.save``
writes (Paddle 3 writes a ``.pdmodel`` only with ``FLAGS_enable_pir_api=0``: a second export path, untested
against any Lite runtime). ONNX (ONNX Runtime Mobile runs the same file) covers mobile here.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import paddle

from bakeoff.core import dynamic_axes, registry
from bakeoff.core.workload import Weights
from bakeoff.frameworks.paddle.runtime import META, PROGRAM

log = logging.getLogger(__name__)

NATIVE_FILE = "model.pdparams"  # paddle.save of the Layer's state_dict
OPSET = 17

Axes = Mapping[str, tuple[str | None, ...]]


class Serving(paddle.nn.Layer):
    """The serving inputs, as one dict, to ``impl.outputs(batch)`` (the dict's keys are the program's input
    names)."""

    def __init__(self, impl: Any) -> None:
        super().__init__()
        self.net = impl.module  # a sublayer, so jit.save finds the parameters
        self.impl = impl

    def forward(self, inputs: dict[str, paddle.Tensor]) -> paddle.Tensor:
        return self.impl.outputs(inputs)


def _impl(workload: str, config: dict, weights: Weights) -> Any:
    impl = registry.model_class(workload, "paddle")(config, "cpu")
    impl.build(weights)
    return impl


def save_model(workload: str, config: dict, weights: Weights, directory: Path) -> list[str]:
    """Build the model from canonical ``weights`` and write its ``state_dict`` to ``directory / NATIVE_FILE``.

    Called at the end of a trial, in its process: Paddle's current device is left as the trial set it."""
    impl = _impl(workload, config, weights)
    Path(directory).mkdir(parents=True, exist_ok=True)
    paddle.save(impl.module.state_dict(), str(Path(directory) / NATIVE_FILE))
    return [NATIVE_FILE]


def load_model(workload: str, config: dict, directory: Path) -> Any:
    """The model (its ModelImpl, on CPU, eval mode) rebuilt from ``config`` and the saved ``state_dict``.

    A missing or extra tensor, or one of another shape, is refused naming it: ``set_state_dict`` itself only
    warns and keeps the initial values. Called in the export and reference processes, which run on the host as
    torch's and JAX's do: Paddle's current device is set to the CPU.
    """
    paddle.set_device("cpu")
    impl = _impl(workload, config, registry.workload(workload).init_weights(config, 0))  # shapes only
    state = paddle.load(str(Path(directory) / NATIVE_FILE))
    own = impl.module.state_dict()
    missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or extra:
        raise ValueError(f"{directory / NATIVE_FILE} does not fit the config: missing {missing}, extra {extra}")
    for name, value in state.items():
        if tuple(value.shape) != tuple(own[name].shape):
            raise ValueError(f"{name}: the file holds shape {tuple(value.shape)}, the config's model expected "
                             f"shape {tuple(own[name].shape)}")
    impl.module.set_state_dict(state)
    impl.module.eval()
    return impl


def predict(model: Any, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """``model.outputs`` on numpy inputs (dygraph, inference mode, fp32), as host numpy."""
    batch = {k: paddle.to_tensor(np.ascontiguousarray(v)) for k, v in inputs.items()}
    with paddle.no_grad():
        return model.outputs(batch).astype("float32").numpy()


def export(model: Any, fmt: str, out: Path, example: dict[str, np.ndarray], axes: Axes) -> dict[str, Any]:
    """Write ``model`` as format ``fmt`` to ``out`` and return its info (files, dynamic axes, converter, notes);
    a converter's own exception when it fails."""
    if fmt not in _EXPORTERS:
        raise ValueError(f"{fmt!r} is not a Paddle deployment format; accepted: {', '.join(_EXPORTERS)}")
    missing = sorted(set(axes) - set(example))
    if missing:
        raise ValueError(f"the example lacks the serving input(s) {', '.join(missing)}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    converter, notes = _EXPORTERS[fmt](model, out, example, axes)
    return {"files": [out.name], "dynamic": check_dynamic(model, fmt, out, example, axes), "converter": converter,
            "notes": notes}


def _dtype(value: np.ndarray) -> str:
    """What the program declares for an input like ``value``: its own integer type, float32 otherwise."""
    value = np.asarray(value)
    return str(value.dtype) if np.issubdtype(value.dtype, np.integer) else "float32"


def save_program(model: Any, prefix: Path, example: Mapping[str, np.ndarray], axes: Axes) -> dict[str, Any]:
    """``paddle.jit.save`` of :class:`Serving` at ``prefix`` (``prefix.json``, ``prefix.pdiparams``), ``None`` on
    every named axis; returns the metadata the runtime needs (input dtypes, output name)."""
    specs = {}
    for name, dims in axes.items():
        shape = np.shape(example[name])
        if len(shape) != len(dims):
            raise ValueError(f"serving input {name!r} has {len(shape)} axes, the workload names {len(dims)}")
        specs[name] = paddle.static.InputSpec([None if a else n for a, n in zip(dims, shape, strict=True)],
                                              _dtype(example[name]), name=name)
    serving = Serving(model)
    serving.eval()
    paddle.jit.save(serving, str(prefix), input_spec=[specs])
    config = paddle.inference.Config(f"{prefix}.json", f"{prefix}.pdiparams")
    config.disable_glog_info()
    config.switch_ir_optim(False)  # only the output's name is read here: no passes
    outputs = paddle.inference.create_predictor(config).get_output_names()
    if len(outputs) != 1:
        raise ValueError(f"the saved program has {len(outputs)} outputs ({', '.join(outputs)}); bakeoff serves one")
    return {"inputs": {n: _dtype(example[n]) for n in axes}, "output": outputs[0]}


def _paddle_inference(model: Any, out: Path, example: Mapping[str, np.ndarray], axes: Axes) -> tuple[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    meta = save_program(model, out / PROGRAM, example, axes)
    (out / META).write_text(json.dumps(meta))
    return (f"paddle.jit.save (paddle {paddle.__version__}, PIR program)",
            f"{PROGRAM}.json + {PROGRAM}.pdiparams, None on every named axis; output {meta['output']!r}")


def _paddle_onnx(model: Any, out: Path, example: Mapping[str, np.ndarray], axes: Axes) -> tuple[str, str]:
    from importlib import metadata

    import onnx

    with tempfile.TemporaryDirectory(dir=out.parent) as scratch:  # the program is an intermediate here
        prefix = Path(scratch) / PROGRAM
        meta = save_program(model, prefix, example, axes)
        convert(prefix, out)
    graph = onnx.load(str(out))
    name_graph(graph, meta["output"], axes)
    onnx.checker.check_model(graph)
    onnx.save(graph, str(out))
    return (f"paddle.jit.save + paddle2onnx.export (paddle {paddle.__version__}, paddle2onnx "
            f"{metadata.version('paddle2onnx')}, opset {OPSET}, optimize_tool='None')",
            f"output {meta['output']!r} renamed 'outputs'; dynamic dimensions named after the serving axes")


_CONVERT = ("import sys, paddle2onnx; paddle2onnx.export(sys.argv[1] + '.json', sys.argv[1] + '.pdiparams', "
            "sys.argv[2], opset_version=int(sys.argv[3]), optimize_tool='None', enable_onnx_checker=True, "
            "verbose=False)")


def convert(prefix: Path, out: Path) -> None:
    """paddle2onnx's conversion of the program at ``prefix`` into ``out``, in a child process of its own:
    paddle2onnx 2.0.1's library segfaults in a process that has loaded TensorFlow's (measured: with ``import
    tensorflow`` anywhere before it, before or after Paddle), and an export in a process that holds other frameworks
    (a test's, a user's notebook) must not take it down. bakeoff's own export process loads Paddle alone; the child
    costs it one import of paddle2onnx. ``optimize_tool="None"``: the default, polygraphy, pip-installs a package at
    run time."""
    done = subprocess.run([sys.executable, "-c", _CONVERT, str(prefix), str(out), str(OPSET)], capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0 or not out.exists():
        said = (done.stderr or done.stdout).strip().splitlines()
        raise RuntimeError(f"paddle2onnx failed (exit {done.returncode}): {said[-1] if said else 'no output'}")


def name_graph(graph: Any, output: str, axes: Axes) -> None:
    """Rename the ONNX graph's output ``output`` to ``outputs`` (what bakeoff's ONNX Runtime runtime reads) and
    each input's dynamic dimension to its axis' name (paddle2onnx writes ``DynamicDimension.N``, one per input, so
    an axis named in two inputs becomes one symbol)."""
    for node in graph.graph.node:
        node.input[:] = ["outputs" if n == output else n for n in node.input]
        node.output[:] = ["outputs" if n == output else n for n in node.output]
    for value in graph.graph.output:
        if value.name == output:
            value.name = "outputs"
    for value in graph.graph.input:
        for dim, axis in zip(value.type.tensor_type.shape.dim, axes.get(value.name, ()), strict=False):
            if axis and dim.HasField("dim_param"):
                dim.dim_param = axis


_EXPORTERS = {"paddle-inference": _paddle_inference, "paddle-onnx": _paddle_onnx}


# --- the dynamic-axes claim, tested (bakeoff.core.dynamic_axes) ------------------------------------------------


def check_dynamic(model: Any, fmt: str, path: Path, example: dict[str, np.ndarray], axes: Axes) -> dict[str, str]:
    """``{axis: "yes" | "no: <why>"}``: the export at ``path`` against the model at other shapes."""
    return dynamic_axes.check(fmt, path, example, axes, lambda inputs: predict(model, inputs))
