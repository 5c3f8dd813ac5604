"""TensorFlow's adapter: the Keras model's own weights file, and its deployment formats.

* ``savedmodel`` — a ``tf.Module`` holding the model's variables and a ``tf.function`` whose input signature has
  ``None`` on every dynamic axis; its ``serving_default`` signature returns ``{"outputs": impl.outputs(batch)}``.
* ``litert`` / ``litert-int8`` — that SavedModel through ``tf.lite.TFLiteConverter``, builtin ops only (the LiteRT
  interpreter without TensorFlow cannot run Flex ops). Where the builtins cannot lower the graph with every axis
  dynamic, only the batch stays dynamic (see :func:`_litert`). int8: ``Optimize.DEFAULT`` with no calibration
  set, i.e. int8 weights and activations quantised on the fly (dynamic range).
* ``tf-onnx`` — the same ``tf.function`` through ``tf2onnx.convert.from_function``.
* ``tf-tensorrt`` — TF-TRT on that SavedModel, only where a GPU and a TensorRT-enabled TensorFlow are there.

The model the adapter hands around is the workload's TensorFlow ``ModelImpl``; ``impl.module`` is its Keras model.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bakeoff.core import registry  # noqa: E402
from bakeoff.core.formats import Unsupported  # noqa: E402
from bakeoff.core.workload import Weights  # noqa: E402

log = logging.getLogger(__name__)

NATIVE_FILE = "model.weights.h5"  # Keras 3's save_weights (HDF5); Keras requires the .weights.h5 ending
ONNX_OPSET = 18  # the highest opset tf2onnx 1.17 knows (tf2onnx.constants.OPSET_TO_IR_VERSION)
Axes = Mapping[str, tuple[str | None, ...]]
Example = Mapping[str, np.ndarray]


def _build(workload: str, config: Mapping[str, Any], weights: Weights) -> Any:
    # fp32 means fp32, as in the trials: the reference outputs and every export's are computed without TF32
    tf.config.experimental.enable_tensor_float_32_execution(False)
    impl = registry.model_class(workload, "tensorflow")(dict(config))
    impl.build(weights)
    return impl


def save_model(workload: str, config: dict, weights: Weights, directory: Path) -> list[str]:
    """Write the weights of the Keras model ``weights`` describe with ``save_weights``; returns the file names."""
    _build(workload, config, weights).module.save_weights(str(Path(directory) / NATIVE_FILE))
    return [NATIVE_FILE]


def load_model(workload: str, config: dict, directory: Path) -> Any:
    """The TensorFlow ``ModelImpl`` of ``workload`` with its Keras model's weights read from :data:`NATIVE_FILE`."""
    path = Path(directory) / NATIVE_FILE
    impl = _build(workload, config, registry.workload(workload).init_weights(config, 0))  # the variables, then
    stored, wanted = _stored_shapes(path), sorted(tuple(v.shape) for v in impl.module.weights)
    if stored != wanted:  # Keras loads a file with more layers than the model without a word
        raise ValueError(f"{path} holds {len(stored)} arrays of {_values(stored)} values; the {workload} model "
                         f"this config describes has {len(wanted)} of {_values(wanted)}")
    impl.module.load_weights(str(path))  # their values from the file
    return impl


def _stored_shapes(path: Path) -> list[tuple[int, ...]]:
    import h5py  # Keras' own dependency for .weights.h5

    shapes: list[tuple[int, ...]] = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda _, item: shapes.append(item.shape) if isinstance(item, h5py.Dataset) else None)
    return sorted(shapes)


def _values(shapes: list[tuple[int, ...]]) -> int:
    return int(sum(np.prod(s) for s in shapes))


def predict(model: Any, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """``model.outputs(inputs)``: inference mode, fp32, as numpy."""
    return np.asarray(model.outputs({k: tf.convert_to_tensor(v) for k, v in inputs.items()}), np.float32)


def export(model: Any, fmt: str, out: Path, example: dict[str, np.ndarray], axes: Axes) -> dict[str, Any]:
    """Write ``model`` as ``fmt`` at ``out`` (see the module docstring); returns its files, which axes are dynamic,
    the converter and notes. Raises :class:`Unsupported` for TF-TRT without a GPU."""
    if fmt not in _EXPORTERS:
        raise ValueError(f"TensorFlow exports no format {fmt!r}; accepted: {', '.join(_EXPORTERS)}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return _EXPORTERS[fmt](model, out, example, axes)


# --- the serving function -----------------------------------------------------------------------------------

def _signature(example: Mapping[str, np.ndarray], axes: Axes, only: tuple[str, ...] = ()) -> list[tf.TensorSpec]:
    """One TensorSpec per serving input, in ``axes``' order: ``None`` on each named axis (on those in ``only``
    when given) and the example's size on the others; integers as int32 and floats as float32 (the runtimes cast
    the data's arrays to these)."""
    specs = []
    for name, names in axes.items():
        value = np.asarray(example[name])
        if value.ndim != len(names):
            raise ValueError(f"serving input {name!r} has {value.ndim} axes; the workload names {len(names)}")
        dtype = tf.int32 if np.issubdtype(value.dtype, np.integer) else tf.float32
        shape = [None if a and (not only or a in only) else n for a, n in zip(names, value.shape, strict=True)]
        specs.append(tf.TensorSpec(shape, dtype, name))
    return specs


class _Serving(tf.Module):
    """What a SavedModel keeps: the model's variables and the serving function.

    The variables, not the Keras model: saving a Keras 3 model as a child traces its own default signature, a
    one-argument call, which fails for speech's two inputs.
    """

    def __init__(self, impl: Any, specs: list[tf.TensorSpec]) -> None:
        super().__init__()
        self.variables_ = [v.value for v in impl.module.weights]  # the tf.Variables behind Keras' variables
        names = [s.name for s in specs]

        def serve(*tensors: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"outputs": impl.outputs(dict(zip(names, tensors, strict=True)))}

        self.serve = tf.function(serve, input_signature=specs, autograph=False)


def _save(impl: Any, out: Path, specs: list[tf.TensorSpec]) -> None:
    module = _Serving(impl, specs)
    tf.saved_model.save(module, str(out), signatures={"serving_default": module.serve.get_concrete_function()})


def _dynamic(axes: Axes, kept: Callable[[str, int], bool], why: str) -> dict[str, str]:
    """``{axis: "yes" | "no: why"}``: an axis is dynamic when ``kept(input, position)`` holds wherever it occurs."""
    places: dict[str, list[tuple[str, int]]] = {}
    for name, names in axes.items():
        for i, axis in enumerate(names):
            if axis:
                places.setdefault(axis, []).append((name, i))
    return {axis: "yes" if all(kept(*p) for p in where) else f"no: {why}" for axis, where in places.items()}


# --- the formats -------------------------------------------------------------------------------------------

def _savedmodel(impl: Any, out: Path, example: Example, axes: Axes) -> dict[str, Any]:
    specs = _signature(example, axes)
    _save(impl, out, specs)
    dynamic = {s.name: [d is None for d in s.shape] for s in specs}
    return {"files": [out.name], "dynamic": _dynamic(axes, lambda n, i: dynamic[n][i], "fixed in the signature"),
            "converter": f"tf.saved_model.save (TensorFlow {tf.__version__})",
            "notes": "serving_default signature; None on every dynamic axis"}


def _tflite(impl: Any, specs: list[tf.TensorSpec], int8: bool) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        _save(impl, Path(tmp) / "savedmodel", specs)
        converter = tf.lite.TFLiteConverter.from_saved_model(str(Path(tmp) / "savedmodel"))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]  # no Flex: LiteRT runs without TF
        if int8:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]  # no representative dataset: dynamic range
        return converter.convert()


def _litert(impl: Any, out: Path, example: Example, axes: Axes, int8: bool = False) -> dict[str, Any]:
    """The TFLite flatbuffer, every named axis dynamic where the builtins allow it.

    Indexing with ``tf.newaxis`` (``x[:, tf.newaxis]``, a StridedSlice with ``new_axis_mask``) has no builtin
    lowering on a tensor with two dynamic axes (``tf.expand_dims`` has); the text and speech models index so. The
    converter then names the ops it would need from TensorFlow, and the export is made again with only the batch
    dynamic, every other axis fixed at the example's size.
    """
    why = ""
    try:
        flat = _tflite(impl, _signature(example, axes), int8)
    except Exception as e:  # the converter's ConverterError is not public API
        needed = sorted(set(re.findall(r"'(tf\.\w+)' op is neither a custom op nor a flex op", str(e))))
        if not needed or all(a in ("batch", None) for names in axes.values() for a in names):
            raise
        cause = " (x[:, tf.newaxis] in the model)" if needed == ["tf.StridedSlice"] else ""
        why = (f"LiteRT's builtin ops cannot lower {', '.join(needed)}{cause} with these axes dynamic; fixed at "
               "the example's size, the batch kept dynamic")
        log.info("litert: %s", why)
        flat = _tflite(impl, _signature(example, axes, only=("batch",)), int8)
    out.write_bytes(flat)
    shapes = _tflite_shapes(flat)
    return {"files": [out.name], "dynamic": _dynamic(axes, lambda n, i: shapes[n][i] == -1, why or "fixed"),
            "converter": f"tf.lite.TFLiteConverter.from_saved_model (TensorFlow {tf.__version__}), builtin ops",
            "notes": ("int8 weights, dynamic-range activations (Optimize.DEFAULT, no calibration set)" if int8
                      else "fp32, builtin ops only")}


def _tflite_shapes(flat: bytes) -> dict[str, list[int]]:
    """Each serving input's shape signature in the flatbuffer (-1 on a dynamic axis)."""
    from ai_edge_litert.interpreter import Interpreter  # tf.lite.Interpreter is deprecated for it

    runner = Interpreter(model_content=flat).get_signature_runner("serving_default")
    return {name: list(d["shape_signature"]) for name, d in runner.get_input_details().items()}


def _onnx(impl: Any, out: Path, example: Example, axes: Axes) -> dict[str, Any]:
    import google.protobuf
    import tf2onnx

    specs = _signature(example, axes)
    module = _Serving(impl, specs)
    proto, _ = tf2onnx.convert.from_function(module.serve, input_signature=specs, opset=ONNX_OPSET)
    graph = proto.graph
    if len(graph.output) != 1:
        raise ValueError(f"tf2onnx made {len(graph.output)} outputs ({[o.name for o in graph.output]}); expected 1")
    _rename_output(graph, graph.output[0].name, "outputs")
    _captures_as_initializers(graph, module.serve.get_concrete_function(), len(specs))
    if [i.name for i in graph.input] != [s.name for s in specs]:
        raise ValueError(f"tf2onnx named the inputs {[i.name for i in graph.input]}; expected {list(axes)}")
    out.write_bytes(proto.SerializeToString())
    symbolic = {i.name: [d.HasField("dim_param") for d in i.type.tensor_type.shape.dim] for i in graph.input}
    return {"files": [out.name], "dynamic": _dynamic(axes, lambda n, i: symbolic[n][i], "fixed by tf2onnx"),
            "converter": f"tf2onnx {tf2onnx.__version__} (opset {ONNX_OPSET}, TensorFlow {tf.__version__}, "
                         f"protobuf {google.protobuf.__version__})",
            "notes": "tf2onnx.convert.from_function on the serving function"}


def _captures_as_initializers(graph: Any, function: Any, num_inputs: int) -> None:
    """Turn the graph inputs tf2onnx made of the function's captured constants (not variables: those it freezes)
    into initializers holding their values: speech's positional table is a ``tf.constant`` the model captures."""
    from onnx import numpy_helper

    captured = {placeholder.name: value for placeholder, value in
                zip(function.inputs[num_inputs:], function.captured_inputs, strict=True)
                if value.dtype != tf.resource}
    for graph_input in [i for i in graph.input if i.name in captured]:
        graph.initializer.append(numpy_helper.from_array(captured[graph_input.name].numpy(), graph_input.name))
        graph.input.remove(graph_input)


def _rename_output(graph: Any, old: str, new: str) -> None:
    if old == new:
        return
    for node in graph.node:
        node.output[:] = [new if o == old else o for o in node.output]
        node.input[:] = [new if i == old else i for i in node.input]
    graph.output[0].name = new


def _tensorrt(impl: Any, out: Path, example: Example, axes: Axes) -> dict[str, Any]:
    if not tf.config.list_physical_devices("GPU"):
        raise Unsupported("TF-TRT needs a CUDA GPU; TensorFlow sees none here (tensorflow-cpu has no GPU support)")
    try:
        from tensorflow.compiler.tf2tensorrt._pywrap_py_utils import is_tensorrt_enabled
        from tensorflow.python.compiler.tensorrt import trt_convert as trt
    except ImportError as e:
        raise Unsupported(f"this TensorFlow has no TF-TRT ({e})") from e
    if not is_tensorrt_enabled():
        raise Unsupported(f"TensorFlow {tf.__version__} here was built without TensorRT")
    with tempfile.TemporaryDirectory() as tmp:
        _save(impl, Path(tmp) / "savedmodel", _signature(example, axes))
        converter = trt.TrtGraphConverterV2(input_saved_model_dir=str(Path(tmp) / "savedmodel"),
                                            precision_mode=trt.TrtPrecisionMode.FP32)
        converter.convert()
        converter.save(str(out))
    unverified = "not verified: TF-TRT builds an engine per new input shape at run time"
    return {"files": [out.name], "dynamic": _dynamic(axes, lambda n, i: False, unverified),
            "converter": f"TF-TRT (TensorFlow {tf.__version__}), FP32",
            "notes": "TrtGraphConverterV2 on the SavedModel"}


_EXPORTERS: dict[str, Callable[..., dict[str, Any]]] = {
    "savedmodel": _savedmodel,
    "litert": _litert,
    "litert-int8": lambda impl, out, example, axes: _litert(impl, out, example, axes, int8=True),
    "tf-onnx": _onnx,
    "tf-tensorrt": _tensorrt,
}
