"""Every deployment format bakeoff exports, as one record each: who exports it, which runtime serves it, and what
it is for. Framework-free; the adapters and runtimes named here are imported only in their own processes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from bakeoff.core import frameworks
from bakeoff.core.spec import SpecError

Run = Callable[[dict[str, Any]], Any]


def ran_on(run: Run, device: str, **facts: Any) -> Run:
    """``run`` labelled with the device its runtime computes on and the settings read from it
    (:mod:`bakeoff.deploy`)."""
    run.device = device  # type: ignore[attr-defined]
    run.facts = facts  # type: ignore[attr-defined]
    return run


class Unsupported(RuntimeError):
    """This format cannot be made or run here (recorded as ``unsupported`` with the reason)."""


@dataclasses.dataclass(frozen=True)
class Format:
    """One deployment format of one source framework.

    ``name`` is unique across frameworks (``torch-onnx`` and ``tf-onnx`` are two formats: two converters).
    ``runtime`` names the module ``bakeoff.deploy.<runtime>_runtime`` that loads and runs it in the inference
    process, and ``loads`` the frameworks that process may import (none for ONNX Runtime and LiteRT).
    ``tolerance`` is the largest absolute output difference from the framework model accepted for a float format;
    ``None`` for a quantised one, whose metric change is reported instead. ``targets`` are where such a file is
    deployed (server, mobile, browser, edge: LiteRT's interpreter is what a phone or an edge box runs); a target
    counts for a framework only when its format exported and ran.
    """

    name: str
    display: str
    framework: str
    runtime: str
    file: str  # file or directory name inside the format's export directory
    tolerance: float | None
    targets: tuple[str, ...]
    loads: tuple[str, ...]
    packages: tuple[str, ...]  # Python packages the export and the runtime need, for the "not installed" message
    extra: str  # pip extra that installs them
    quantised: str = ""  # "" for float formats; else what is quantised ("int8 weights, dynamic range")
    needs: str = ""  # "" or "cuda": the format needs a CUDA GPU (TensorRT)
    notes: str = ""

    @property
    def adapter(self) -> str:
        return adapter_module(self.framework)

    @property
    def runtime_module(self) -> str:
        folder = {"torch": "torch", "tf": "tensorflow", "jax": "jax"}.get(self.runtime)
        return f"bakeoff.frameworks.{folder}.runtime" if folder else f"bakeoff.deploy.{self.runtime}_runtime"

    @property
    def install_hint(self) -> str:
        return f"pip install 'bakeoff[{self.extra}]'"


FLOAT_TOLERANCE = 1e-4  # fp32 graphs re-lowered by another compiler: fused and reordered sums, not new rounding

_TORCH = ("torch",)
_TF = ("tensorflow",)
FORMATS: dict[str, Format] = {f.name: f for f in (
    # TorchScript's mobile path (the lite interpreter, .ptl) is not what is exported here: server only.
    Format("torchscript", "TorchScript", "torch", "torch", "model.ts", FLOAT_TOLERANCE, ("server",),
           _TORCH, ("torch",), "torch", notes="torch.jit.trace; served by libtorch / torch.jit.load"),
    Format("torch-export", "torch.export", "torch", "torch", "model.pt2", FLOAT_TOLERANCE, ("server",),
           _TORCH, ("torch",), "torch", notes="torch.export.export with Dim axes, saved .pt2 (ExportedProgram)"),
    Format("aoti", "AOTInductor", "torch", "torch", "model.aoti.pt2", FLOAT_TOLERANCE, ("server",),
           _TORCH, ("torch",), "torch", notes="torch._inductor.aoti_compile_and_package: a compiled .so in a "
           "package; needs a C++ compiler"),
    Format("torch-onnx", "ONNX (torch.onnx)", "torch", "onnx", "model.onnx", FLOAT_TOLERANCE,
           ("server", "browser", "mobile"), (), ("torch", "onnx", "onnxscript", "onnxruntime"), "deploy",
           notes="torch.onnx.export(dynamo=True), run by ONNX Runtime"),
    Format("torch-tensorrt", "TensorRT (Torch-TensorRT)", "torch", "torch", "model.trt.ts", FLOAT_TOLERANCE,
           ("server",), _TORCH, ("torch", "torch_tensorrt"), "deploy", needs="cuda"),
    Format("savedmodel", "SavedModel", "tensorflow", "tf", "savedmodel", FLOAT_TOLERANCE, ("server",),
           _TF, ("tensorflow",), "tf", notes="tf.saved_model.save with a serving_default signature; "
           "served by TF Serving / tf.saved_model.load"),
    Format("litert", "LiteRT (float)", "tensorflow", "litert", "model.tflite", FLOAT_TOLERANCE,
           ("mobile", "edge"), (), ("tensorflow", "ai_edge_litert"), "deploy",
           notes="tf.lite.TFLiteConverter from the SavedModel (builtin ops only), run by the LiteRT interpreter "
           "(ai-edge-litert) without TensorFlow"),
    Format("litert-int8", "LiteRT (int8 dynamic range)", "tensorflow", "litert", "model.int8.tflite", None,
           ("mobile", "edge"), (), ("tensorflow", "ai_edge_litert"), "deploy",
           quantised="int8 weights, dynamic range (activations quantised on the fly)",
           notes="TFLiteConverter with Optimize.DEFAULT, no calibration set"),
    Format("tf-onnx", "ONNX (tf2onnx)", "tensorflow", "onnx", "model.onnx", FLOAT_TOLERANCE,
           ("server", "browser", "mobile"), (), ("tensorflow", "tf2onnx", "onnxruntime"), "deploy",
           notes="tf2onnx.convert.from_function, run by ONNX Runtime"),
    Format("tf-tensorrt", "TensorRT (TF-TRT)", "tensorflow", "tf", "savedmodel.trt", FLOAT_TOLERANCE, ("server",),
           _TF, ("tensorflow",), "tf", needs="cuda"),
    Format("jax-export", "jax.export (StableHLO)", "jax", "jax", "model.jaxexport", FLOAT_TOLERANCE, ("server",),
           ("jax",), ("jax",), "jax", notes="jax.export.export with symbolic shapes, serialised; run by "
           "jax.export.deserialize"),
    Format("jax2tf", "SavedModel (jax2tf)", "jax", "tf", "savedmodel", FLOAT_TOLERANCE, ("server",),
           _TF, ("jax", "tensorflow"), "deploy", notes="jax2tf.convert(native_serialization) into a SavedModel, "
           "served by tf.saved_model.load"),
)}


def for_framework(framework: str) -> list[Format]:
    """The formats ``framework`` exports, in the order a report lists them (none for a Keras row)."""
    return [f for f in FORMATS.values() if f.framework == framework]


def get(name: str) -> Format:
    """The format called ``name``; :class:`SpecError` naming the accepted ones otherwise."""
    if name not in FORMATS:
        raise SpecError(f"unknown deployment format {name!r}; accepted: {', '.join(FORMATS)}")
    return FORMATS[name]


def exporting_frameworks() -> list[str]:
    """The frameworks whose models bakeoff keeps and exports: those whose record names a deployment adapter."""
    return [name for name, info in frameworks.FRAMEWORKS.items() if info.deploy]


def adapter_module(framework: str) -> str:
    """The module that keeps and exports ``framework``'s models (its record's ``deploy``)."""
    module = frameworks.get(framework).deploy
    if not module:
        raise KeyError(f"bakeoff keeps and exports no {framework} models; it does {', '.join(exporting_frameworks())}")
    return module
