"""The dynamic-axes claim of an exported model, tested rather than assumed: the export is run by its own runtime at
other shapes than it was traced at and compared with the framework model there. Framework-free: a framework's
deployment adapter hands in its model's prediction (``predict``), the format's runtime is found through the format's
record (:mod:`bakeoff.core.formats`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from bakeoff.core import formats

Axes = Mapping[str, tuple[str | None, ...]]
"""Each input's named axes (``("batch", "seq")``; ``None`` for a fixed one)."""


def resize(x: np.ndarray, dims: tuple[str | None, ...], batch: int, halve: bool) -> np.ndarray:
    """``x`` with ``batch`` rows (cycling its own) and, if ``halve``, every other named axis cut to half."""
    for i, axis in enumerate(dims):
        if axis == "batch":
            x = np.take(x, np.arange(batch) % x.shape[i], axis=i)
        elif axis and halve:
            x = np.take(x, np.arange(max(1, x.shape[i] // 2)), axis=i)
    return np.ascontiguousarray(x)


def max_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Largest absolute difference; ``inf`` if the shapes differ or NaNs fall in different places."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.shape != b.shape or not np.array_equal(np.isnan(a), np.isnan(b)):
        return float("inf")
    return float(np.nanmax(np.abs(a - b), initial=0.0))


def _trial_inputs(example: Mapping[str, np.ndarray], axes: Axes, batch: int, halve: bool) -> dict[str, np.ndarray]:
    """The example at another shape; when halved, a ``(batch,)`` lengths input is clipped to the shortest halved
    axis, as the inference harness's probe does, so that no length exceeds its sequence."""
    inputs = {n: resize(example[n], dims, batch, halve) for n, dims in axes.items()}
    if halve:
        shortest = min(x.shape[i] for n, x in inputs.items() for i, a in enumerate(axes[n]) if a not in
                       (None, "batch"))
        inputs = {n: np.minimum(x, shortest).astype(x.dtype) if axes[n] == ("batch",) else x
                  for n, x in inputs.items()}
    return inputs


def check(fmt: str, path: Path, example: Mapping[str, np.ndarray], axes: Axes,
          predict: Callable[[dict[str, np.ndarray]], np.ndarray]) -> dict[str, str]:
    """Run the export at ``path`` with its own runtime at other shapes and compare with ``predict`` there:
    ``{axis: "yes" | "no: <why>"}``. Batch is tried at 1 and at one more example than given; every other axis at
    half its length."""
    record = formats.get(fmt)
    run = importlib.import_module(record.runtime_module).load_runtime(fmt, path, 0)
    names = list(dict.fromkeys(a for dims in axes.values() for a in dims if a))
    rows = next((len(example[n]) for n, dims in axes.items() if "batch" in dims), 1)
    trials = [({"batch"}, 1, False), ({"batch"}, rows + 1, False)] if "batch" in names else []
    if set(names) - {"batch"}:
        trials.append((set(names) - {"batch"}, rows, True))
    failed: dict[str, str] = {}
    for tested, batch, halve in trials:
        inputs = _trial_inputs(example, axes, batch, halve)
        shape = ", ".join(f"{n} {x.shape}" for n, x in inputs.items())
        try:
            difference = max_difference(run(inputs), predict(inputs))
            why = "" if difference <= record.tolerance else f"at {shape} the output differs by {difference:.3g}"
        except Exception as error:  # the runtime refused the shape
            text = str(error).strip().splitlines()
            why = f"at {shape}: {type(error).__name__}: {text[0][:300] if text else ''}"
        for axis in tested:
            if why and axis not in failed:
                failed[axis] = why
    return {axis: f"no: {failed[axis]}" if axis in failed else "yes" for axis in names}
