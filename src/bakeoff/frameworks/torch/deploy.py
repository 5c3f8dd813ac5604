"""PyTorch's deployment adapter: keep a model as its ``state_dict``, export it to TorchScript, torch.export,
AOTInductor, ONNX (torch.onnx) and TensorRT (Torch-TensorRT).

Every format is made from one small module, :class:`Serving`: it takes the workload's serving inputs
positionally and returns exactly what the model's ``outputs(batch)`` returns, by calling that method (sigmoid or
softmax probabilities, reconstructions, masked log-probabilities), so an export cannot drift from what training
evaluated. Each export is then run again by its own runtime at other shapes (batch 1, one more example than
given, every other dynamic axis halved) and compared with the model there: an axis is reported dynamic only when
that comparison passed (:func:`check_dynamic`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from bakeoff.core import dynamic_axes, registry
from bakeoff.core.formats import Unsupported
from bakeoff.core.workload import Weights
from bakeoff.frameworks.torch.runtime import meta_beside

log = logging.getLogger(__name__)

NATIVE_FILE = "model.pt"
META = "bakeoff.json"  # inside each torch artifact: the input names and dtypes, so the runtime casts to them
JIT_DEPRECATED = r"`torch\.jit\.\w+` is deprecated"  # torch 2.13 warns on every TorchScript call
ONNX_SINGLE_FILE_BYTES = 1_800_000_000  # below the protobuf 2 GiB limit: weights inside model.onnx

Axes = dict[str, tuple[str | None, ...]]


class Serving(nn.Module):
    """The serving inputs, positionally and in ``serving_inputs`` order, to ``impl.outputs(batch)``."""

    def __init__(self, impl: Any, names: list[str]) -> None:
        super().__init__()
        self.net = impl.module  # registered, so export and tracing see the parameters
        self.impl, self.names = impl, names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.impl.outputs(dict(zip(self.names, inputs, strict=True)))


def save_model(workload: str, config: dict, weights: Weights, directory: Path) -> list[str]:
    """Build the model from canonical ``weights`` and write its ``state_dict`` to ``directory / NATIVE_FILE``."""
    impl = registry.model_class(workload, "torch")(config)
    impl.build(weights)
    Path(directory).mkdir(parents=True, exist_ok=True)
    torch.save(impl.module.state_dict(), Path(directory) / NATIVE_FILE)
    return [NATIVE_FILE]


def load_model(workload: str, config: dict, directory: Path) -> Any:
    """The model (its ModelImpl, on CPU, eval mode) rebuilt from ``config`` and the saved ``state_dict``."""
    impl = registry.model_class(workload, "torch")(config)
    impl.build(registry.workload(workload).init_weights(config, 0))  # shapes only: every tensor is replaced next
    state = torch.load(Path(directory) / NATIVE_FILE, map_location="cpu", weights_only=True)
    impl.module.load_state_dict(state, strict=True)
    impl.module.eval()
    return impl


def predict(model: Any, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """``model.outputs`` on numpy inputs (inference mode, fp32), as host numpy."""
    device = next(model.module.parameters()).device
    batch = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in inputs.items()}
    with torch.inference_mode():
        return model.outputs(batch).float().cpu().numpy()


def export(model: Any, fmt: str, out: Path, example: dict[str, np.ndarray], axes: Axes) -> dict[str, Any]:
    """Write ``model`` as format ``fmt`` to ``out`` and return its info (files, dynamic axes, converter, notes).

    Raises :class:`Unsupported` for TensorRT without CUDA or Torch-TensorRT; a converter's own exception
    otherwise.
    """
    if fmt not in _EXPORTERS:
        raise ValueError(f"{fmt!r} is not a PyTorch deployment format; accepted: {', '.join(_EXPORTERS)}")
    names = list(axes)
    missing = sorted(set(names) - set(example))
    if missing:
        raise ValueError(f"the example lacks the serving input(s) {', '.join(missing)}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    serving = Serving(model, names).eval()
    args = tuple(torch.from_numpy(np.ascontiguousarray(example[n])) for n in names)
    meta = json.dumps({"inputs": {n: str(example[n].dtype) for n in names}, "output": "outputs"})
    files, converter, notes = _EXPORTERS[fmt](serving, args, axes, out, meta)
    dynamic = check_dynamic(model, fmt, out, example, axes)
    return {"files": files, "dynamic": dynamic, "converter": converter, "notes": notes}


# --- one function per format: (serving, example tensors, axes, out, meta) -> (files, converter, notes) ----------


def _torchscript(serving: Serving, args: tuple, axes: Axes, out: Path, meta: str) -> tuple[list[str], str, str]:
    # Traced, not scripted: outputs() reads a dict and the impl's Python. Tracing records each size read
    # (x.shape[1], arange(T)) as an op on the input, so batch and seq stay dynamic; check_dynamic proves it.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", JIT_DEPRECATED, DeprecationWarning)  # said once, in the notes
        traced = torch.jit.trace(serving, args, check_trace=False)
        torch.jit.save(traced, str(out), _extra_files={META: meta})
    fused = any(n.kind() == "aten::_transformer_encoder_layer_fwd" for n in traced.inlined_graph.nodes())
    notes = "torch.jit.trace of the serving wrapper (jit.trace is deprecated in torch 2.13, still supported)"
    if fused:
        notes += "; each Transformer block traced to the fused inference op aten::_transformer_encoder_layer_fwd"
    return [out.name], f"torch.jit.trace (torch {torch.__version__})", notes


def _exported(serving: Serving, args: tuple, axes: Axes) -> torch.export.ExportedProgram:
    # Dim.DYNAMIC lets export infer each axis' range (seq <= the position table's length) instead of failing on
    # a guessed bound; an axis it had to specialise fails check_dynamic, which is what the claim rests on.
    shapes = tuple({i: torch.export.Dim.DYNAMIC for i, a in enumerate(dims) if a} for dims in axes.values())
    return torch.export.export(serving, args, dynamic_shapes=(shapes,))


def _axis_ranges(ep: torch.export.ExportedProgram, axes: Axes) -> dict[str, tuple[int, int | float]]:
    """Each dynamic axis' range as export inferred it: ``{"seq": (2, 128), "batch": (2, inf)}``."""
    symbols: dict[str, str] = {}
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for name, dims in zip(ep.graph_signature.user_inputs, axes.values(), strict=True):
        for size, axis in zip(placeholders[name].meta["val"].shape, dims, strict=True):
            if axis and isinstance(size, torch.SymInt):
                symbols.setdefault(str(size.node.expr), axis)
    found = {}
    for symbol, bounds in ep.range_constraints.items():
        if str(symbol) in symbols:
            upper = math.inf if str(bounds.upper) in ("int_oo", "oo") else int(bounds.upper)  # int_oo: unbounded
            found[symbols[str(symbol)]] = (int(bounds.lower), upper)
    return found


def _ranges(ep: torch.export.ExportedProgram, axes: Axes) -> str:
    return ", ".join(f"{axis} {low}..{high}" for axis, (low, high) in _axis_ranges(ep, axes).items())


def _torch_export(serving: Serving, args: tuple, axes: Axes, out: Path, meta: str) -> tuple[list[str], str, str]:
    ep = _exported(serving, args, axes)
    torch.export.save(ep, out, extra_files={META: meta})
    return ([out.name], f"torch.export.export (torch {torch.__version__})",
            f"ExportedProgram with dynamic axes (ranges as inferred: {_ranges(ep, axes)})")


def _aoti(serving: Serving, args: tuple, axes: Axes, out: Path, meta: str) -> tuple[list[str], str, str]:
    ep = _exported(serving, args, axes)
    start = time.perf_counter()
    torch._inductor.aoti_compile_and_package(  # a missing or failing C++ compiler raises with its message
        ep, package_path=str(out), inductor_configs={"aot_inductor.metadata": {META: meta}})
    seconds = time.perf_counter() - start
    log.info("AOTInductor compiled %s in %.1f s", out.name, seconds)
    from torch._inductor.cpp_builder import get_cpp_compiler

    return ([out.name], f"torch._inductor.aoti_compile_and_package (torch {torch.__version__})",
            f"compiled in {seconds:.1f} s (C++ compiler {get_cpp_compiler()}) for this machine's CPU ISA; "
            f"ranges as inferred: {_ranges(ep, axes)}")


def _onnx(serving: Serving, args: tuple, axes: Axes, out: Path, meta: str) -> tuple[list[str], str, str]:
    import onnxscript

    names = list(axes)
    big = sum(p.numel() * p.element_size() for p in serving.parameters()) > ONNX_SINGLE_FILE_BYTES
    # Axis names as strings: torch.onnx makes them dynamic and writes them as the graph's dim_params.
    shapes = tuple({i: a for i, a in enumerate(dims) if a} for dims in axes.values())
    try:
        with _quiet("onnxscript", "onnx_ir"), warnings.catch_warnings():  # INFO logs: hundreds of lines a model
            warnings.filterwarnings("ignore", message=r".*axis name: .* will not be used")  # batch named twice
            program = torch.onnx.export(serving, args, str(out), dynamo=True, dynamic_shapes=(shapes,),
                                        input_names=names, output_names=["outputs"], external_data=big,
                                        verbose=False)
        opset = program.model.opset_imports.get("", "?")
        converter = (f"torch.onnx.export dynamo=True (torch {torch.__version__}, onnxscript {onnxscript.__version__},"
                     f" opset {opset})")
        notes = "torch.export graph translated by torch.onnx's dynamo exporter, optimised by onnxscript"
    except Exception as error:  # the fallback: the TorchScript-based exporter, recorded as such
        log.warning("torch.onnx dynamo export failed (%s); trying dynamo=False", error)
        _legacy_onnx(serving, args, axes, out)
        converter = f"torch.onnx.export dynamo=False, TorchScript-based (torch {torch.__version__})"
        notes = f"dynamo=True failed: {_first_line(error)}"
    files = [out.name] + ([out.name + ".data"] if (out.parent / (out.name + ".data")).exists() else [])
    return files, converter, notes


@contextlib.contextmanager
def _quiet(*loggers: str) -> Iterator[None]:
    """Raise these loggers to WARNING for the duration."""
    levels = {name: logging.getLogger(name).level for name in loggers}
    for name in loggers:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _legacy_onnx(serving: Serving, args: tuple, axes: Axes, out: Path) -> None:
    # The fused Transformer op has no ONNX symbolic: trace the unfused blocks. This exporter bakes the shapes
    # MultiheadAttention reshapes to; check_dynamic finds out.
    dynamic_axes = {n: {i: a for i, a in enumerate(dims) if a} for n, dims in axes.items()}
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", torch.jit.TracerWarning)  # the baked shapes: check_dynamic reports them
            torch.onnx.export(serving, args, str(out), dynamo=False, input_names=list(axes),
                              output_names=["outputs"], dynamic_axes=dynamic_axes)
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)


def _tensorrt(serving: Serving, args: tuple, axes: Axes, out: Path, meta: str) -> tuple[list[str], str, str]:
    if not torch.cuda.is_available():
        raise Unsupported("Torch-TensorRT needs a CUDA GPU; torch.cuda.is_available() is False here")
    try:
        import torch_tensorrt
    except ImportError:
        raise Unsupported("Torch-TensorRT is not installed (pip install torch-tensorrt, the build matching "
                          f"torch {torch.__version__})") from None
    # Not run on any machine of ours yet (none has CUDA and torch_tensorrt): kept to the documented calls.
    # Engine bounds per axis: batch 1 to 8x the example's; a length from export's lower bound to the example's.
    serving = serving.cuda()
    args = tuple(a.cuda() for a in args)
    ep = _exported(serving, args, axes)
    ranges = _axis_ranges(ep, axes)
    inputs = []
    for arg, dims in zip(args, axes.values(), strict=True):
        sizes = list(arg.shape)
        low = [1 if a == "batch" else ranges[a][0] if a in ranges else s for s, a in zip(sizes, dims, strict=True)]
        high = [s * 8 if a == "batch" else s for s, a in zip(sizes, dims, strict=True)]
        inputs.append(torch_tensorrt.Input(min_shape=low, opt_shape=sizes, max_shape=high, dtype=arg.dtype))
    compiled = torch_tensorrt.dynamo.compile(ep, arg_inputs=inputs, enabled_precisions={torch.float32},
                                             disable_tf32=True)  # fp32 as the model computes it
    files = save_tensorrt(torch_tensorrt.save, compiled, out, args, meta)
    return (files, f"torch_tensorrt.dynamo.compile (torch-tensorrt {torch_tensorrt.__version__})",
            "TensorRT engines in a TorchScript module; batch bounded to 8x the example's, lengths to its own")


def save_tensorrt(save: Callable[..., Any], compiled: Any, out: Path, args: tuple, meta: str) -> list[str]:
    """``torch_tensorrt.save`` (``save``) of the compiled module as TorchScript, and its ``bakeoff.json`` beside
    it: that save traces the module and ``torch.jit.save``s it with no extra files, so the runtime reads the file
    beside it (:func:`bakeoff.frameworks.torch.runtime.meta_beside`). Returns the files written."""
    save(compiled, str(out), output_format="torchscript", arg_inputs=list(args))
    side = meta_beside(out)
    side.write_text(meta)
    return [out.name, side.name]


_EXPORTERS: dict[str, Callable[..., tuple[list[str], str, str]]] = {
    "torchscript": _torchscript, "torch-export": _torch_export, "aoti": _aoti, "torch-onnx": _onnx,
    "torch-tensorrt": _tensorrt}


# --- the dynamic-axes claim, tested (bakeoff.core.dynamic_axes) ------------------------------------------------


def check_dynamic(model: Any, fmt: str, path: Path, example: dict[str, np.ndarray], axes: Axes) -> dict[str, str]:
    """``{axis: "yes" | "no: <why>"}``: the export at ``path`` against the model at other shapes."""
    return dynamic_axes.check(fmt, path, example, axes, lambda inputs: predict(model, inputs))


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300] if text else ''}"
