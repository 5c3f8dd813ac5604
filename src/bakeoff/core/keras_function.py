"""A workload's model given as one Keras 3 function, run on every Keras row (keras-jax, keras-torch,
keras-tensorflow) with no ModelImpl and no weight mapping: what the workload declares, framework-free.

A workload sets :attr:`bakeoff.core.workload.Workload.keras_function` to a :class:`KerasFunction`: the function
(``"module:function"``, taking the resolved config and returning a built ``keras.Model`` — functional, or
Sequential starting with ``keras.Input`` — from the batch's input entry to logits or outputs), which batch entries
are the input and the labels, the loss and what the metric reads. Bakeoff's generic Keras model
(:mod:`bakeoff.workloads.common.keras_function_model`) wraps it for the Keras engine, on every backend alike.

Canonical weights are the Keras variables' own paths (``model.trainable_variables[i].path``, such as
``"dense/kernel"``), the same on every backend: nothing is mapped. Initial weights are the workload's, as for every
model (:meth:`~bakeoff.core.workload.Workload.init_weights`, drawn once in numpy so every row starts alike), and
the workload cannot build the Keras model to learn their shapes: the parent process imports no framework, and a
native PyTorch trial of the same workload must not load Keras either. So the workload states them, as a table of
paths and shapes, and :func:`initial_weights` draws them (Keras' default initializers' distributions, seeded by
name). The table is checked where it can be: the Keras model refuses a table whose names or shapes differ from its
variables', and says the table it has, ready to paste — ``python -m bakeoff.workloads.common.keras_function_model
WORKLOAD`` prints it too. Non-trainable state (BatchNormalization's moving statistics) is not canonical: it starts
at Keras' own constants (zeros and ones) on every backend.

Nothing here imports a framework.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import math
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from bakeoff.core import frameworks

LOSSES: Mapping[str, str] = {
    "sparse_categorical_crossentropy": "cross-entropy of integer labels against logits (B, ..., classes)",
    "binary_crossentropy": "binary cross-entropy of 0/1 labels against logits of the labels' shape",
    "mean_squared_error": "squared error averaged over the last axis, against targets of the outputs' shape",
}
"""The losses a Keras function trains with. Each is summed over the per-example losses with their count (bakeoff's
losses are ``(summed, count)``, never a pre-averaged mean), and ``summed / count`` is what Keras' own loss of that
name computes (its ``sum_over_batch_size`` reduction)."""

OUTPUTS: Mapping[str, str] = {
    "softmax": "class probabilities over the last axis",
    "sigmoid": "probabilities of each logit",
    "identity": "the model's outputs as they are",
}
"""What the workload's metric reads, made from the model's outputs (the engine's ``probabilities``)."""

DEFAULT_OUTPUTS = {"sparse_categorical_crossentropy": "softmax", "binary_crossentropy": "sigmoid",
                   "mean_squared_error": "identity"}

ROWS = tuple(name for name, info in frameworks.FRAMEWORKS.items() if info.function_model)
"""The rows that run Keras 3 code (keras-jax, keras-torch, keras-tensorflow): those a Keras function implements,
as their records say (``function_model``)."""


@dataclasses.dataclass(frozen=True)
class KerasFunction:
    """A workload's model as a Keras 3 function: what :attr:`Workload.keras_function` holds.

    Args:
        build: ``"module:function"``; ``function(config)`` returns a built ``keras.Model`` taking the batch's
            ``input`` entry (a module on ``sys.path``, or beside the workload's file, as ``models`` are found).
        input: the batch entry the model takes.
        loss: one of :data:`LOSSES`, computed from the model's outputs as logits.
        labels: the batch entry the loss compares the outputs with.
        outputs: what the metric reads (:data:`OUTPUTS`); '' for the loss's own (softmax for
            sparse_categorical_crossentropy, sigmoid for binary_crossentropy, identity for mean_squared_error).
    """

    build: str
    input: str
    loss: str
    labels: str = "labels"
    outputs: str = ""

    @property
    def output(self) -> str:
        """What the metric reads: :attr:`outputs`, or the loss's own."""
        return self.outputs or DEFAULT_OUTPUTS.get(self.loss, "identity")


def problems(declared: object) -> list[str]:
    """What is wrong with a declaration, in words naming the bad value and the accepted ones ([] when nothing);
    found without importing the function's module (its file is read, not run)."""
    if not isinstance(declared, KerasFunction):
        return [f"is {declared!r}, not a bakeoff.core.keras_function.KerasFunction(build=..., input=..., loss=...)"]
    out = []
    module, colon, name = declared.build.partition(":")
    if not (colon and name.isidentifier() and all(p.isidentifier() for p in module.split("."))):
        out.append(f"build is {declared.build!r}; give it as \"module.path:function\"")
    elif (where := _origin(module)) is None:
        out.append(f"build is {declared.build!r}, but no module {module} is found (on sys.path, or beside the "
                   "workload's file)")
    elif where.suffix == ".py" and name not in _top_level_names(where):
        out.append(f"build is {declared.build!r}, but {where.name} defines no {name} at its top level")
    if declared.loss not in LOSSES:
        out.append(f"loss is {declared.loss!r}; accepted: {', '.join(LOSSES)}")
    if declared.outputs and declared.outputs not in OUTPUTS:
        out.append(f"outputs is {declared.outputs!r}; accepted: {', '.join(OUTPUTS)} (or '' for the loss's own)")
    for field in ("input", "labels"):
        if not (isinstance(getattr(declared, field), str) and getattr(declared, field)):
            out.append(f"{field} is {getattr(declared, field)!r}; give the name of a batch entry")
    return out


def data_problem(declared: KerasFunction, entries: Sequence[str]) -> str:
    """Why a data set whose batches hold ``entries`` cannot train the declared model ('' when it can)."""
    missing = [f"{field} {key!r}" for field, key in (("input", declared.input), ("labels", declared.labels))
               if key not in entries]
    if not missing:
        return ""
    return (f"its keras_function reads {' and '.join(missing)}, but the batches hold {', '.join(entries)}: set "
            f"KerasFunction(input=..., labels=...) to entries of the data")


def _origin(module: str) -> Path | None:
    """The file of ``module`` (its parent packages are imported, it is not); None when it is not found."""
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(found.origin) if found is not None and found.origin else None


def _top_level_names(file: Path) -> set[str]:
    """The names a Python file binds at its top level (functions, assignments, imports): read, not run."""
    try:
        tree = ast.parse(file.read_text())
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).partition(".")[0] for a in node.names}
    return names


def initial_weights(shapes: Mapping[str, Sequence[int] | np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """Canonical initial weights of a Keras function's model, in numpy: each path's array drawn from Keras' default
    initializer's distribution for its variable's name, or taken as given when the table holds an array.

    By the name after the last ``/``: ``bias``, ``beta``, ``moving_mean`` zeros; ``gamma``, ``moving_variance``
    ones; ``embeddings`` uniform in ±0.05; any other (``kernel``, ``recurrent_kernel``, ...) Glorot-uniform, its
    fans as Keras counts them (a convolution's receptive field times its channels). Each array has its own stream,
    seeded by ``seed`` and the path, so adding a layer changes no other layer's start.

    Args:
        shapes: ``{path: shape}``, the model's trainable variables (``variable.path``), or ``{path: array}``.
        seed: the trial's seed.
    """
    out: dict[str, np.ndarray] = {}
    for path, shape in shapes.items():
        if isinstance(shape, np.ndarray):
            out[path] = shape.astype(np.float32)
            continue
        shape = tuple(int(n) for n in shape)
        kind = path.rpartition("/")[2]
        rng = np.random.default_rng([seed, zlib.crc32(path.encode())])
        if kind in ("bias", "beta", "moving_mean"):
            value = np.zeros(shape)
        elif kind in ("gamma", "moving_variance"):
            value = np.ones(shape)
        elif kind == "embeddings":
            value = rng.uniform(-0.05, 0.05, shape)
        else:
            fan_in, fan_out = _fans(shape)
            limit = math.sqrt(6.0 / max(1, fan_in + fan_out))
            value = rng.uniform(-limit, limit, shape)
        out[path] = value.astype(np.float32)
    return out


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """Keras' fans of a kernel: (in, out) for a matrix; a convolution's (..., in, out) times its receptive field."""
    if len(shape) < 1:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive
