"""The runtime for PyTorch's own formats: TorchScript (``torch.jit.load``), torch.export (``torch.export.load``),
AOTInductor (``aoti_load_package``) and Torch-TensorRT (a TorchScript module holding TensorRT engines).

Each artifact carries ``bakeoff.json`` (the input names and dtypes it was exported with), and inputs are cast to
those dtypes: the compiled formats take no other. Torch-TensorRT's ``torch_tensorrt.save(...,
output_format="torchscript")`` traces the module and ``torch.jit.save``s it with no extra files, so its
``bakeoff.json`` is a file beside the artifact (:func:`meta_beside`); an artifact without its metadata is refused
naming what is missing. The float formats run on the CPU they were exported for;
Torch-TensorRT on CUDA.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bakeoff.core.formats import ran_on
from bakeoff.frameworks.torch import probes

META = "bakeoff.json"  # as torch_deploy writes it

Run = Callable[[dict[str, np.ndarray]], np.ndarray]


def runtime_version() -> str:
    return f"torch {torch.__version__}"


def load_runtime(fmt: str, path: Path, threads: int) -> Run:
    """A callable running the artifact at ``path`` on numpy inputs, returning host numpy.

    ``threads`` > 0 sets the intra-op and inter-op thread pools (the inter-op one only before it has started, as
    the training engine does); 0 keeps torch's default, every core.
    """
    if fmt not in _LOADERS:
        raise ValueError(f"{fmt!r} is not served by the torch runtime; accepted: {', '.join(_LOADERS)}")
    if threads > 0:
        torch.set_num_threads(threads)
        if torch.get_num_interop_threads() != threads:
            try:
                torch.set_num_interop_threads(threads)
            except RuntimeError:  # the pool has started in this process: it keeps its size
                pass
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32, as in the trials
    torch.backends.cudnn.allow_tf32 = False
    call, meta, device = _LOADERS[fmt](Path(path))
    dtypes = {name: np.dtype(dtype) for name, dtype in meta["inputs"].items()}

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        args = [torch.from_numpy(np.ascontiguousarray(inputs[n], dtype)).to(device) for n, dtype in dtypes.items()]
        with torch.inference_mode():
            return call(*args).float().cpu().numpy()  # .cpu() waits for the device

    where = f"cuda:{torch.cuda.current_device()}" if device == "cuda" else str(torch.device(device))
    return ran_on(run, where, **probes.tf32())


def meta_beside(path: Path) -> Path:
    """Where an artifact that cannot hold extra files keeps its ``bakeoff.json``: beside it, named after it."""
    return Path(path).with_name(f"{Path(path).name}.{META}")


def read_meta(text: str | bytes | None, where: str) -> dict:
    """The artifact's ``bakeoff.json`` from its text; a ValueError naming ``where`` it was looked for when empty."""
    if not text:
        raise ValueError(f"no {META} in {where}: the artifact does not say its inputs' names and dtypes; export it "
                         "again with bakeoff deploy")
    return json.loads(text)


def _torchscript(path: Path, device: str = "cpu", beside: bool = False) -> tuple[Callable[..., Any], dict, str]:
    """A TorchScript module and its metadata: an extra file inside it, or with ``beside`` the file beside it."""
    extra = {META: ""}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r"`torch\.jit\.\w+` is deprecated", DeprecationWarning)
        module = torch.jit.load(str(path), map_location=device, _extra_files=extra)
    if beside:
        side = meta_beside(path)
        meta = read_meta(side.read_text() if side.is_file() else "", f"{side} (beside the artifact)")
    else:
        meta = read_meta(extra[META], f"{path}'s extra files")
    return module.eval(), meta, device


def _torch_export(path: Path) -> tuple[Callable[..., Any], dict, str]:
    extra = {META: ""}
    program = torch.export.load(path, extra_files=extra)
    return program.module(), read_meta(extra[META], f"{path}'s extra files"), "cpu"


def _aoti(path: Path) -> tuple[Callable[..., Any], dict, str]:
    model = torch._inductor.aoti_load_package(str(path))
    return model, read_meta(model.get_metadata().get(META), f"{path}'s metadata"), "cpu"


def _tensorrt(path: Path) -> tuple[Callable[..., Any], dict, str]:
    import torch_tensorrt  # noqa: F401  (registers the TensorRT engine class TorchScript needs)

    return _torchscript(path, "cuda", beside=True)


_LOADERS: dict[str, Callable[[Path], tuple[Callable[..., Any], dict, str]]] = {
    "torchscript": _torchscript, "torch-export": _torch_export, "aoti": _aoti, "torch-tensorrt": _tensorrt}
