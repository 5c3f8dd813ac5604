"""The capacity plan's calibration on the machine stored trials ran on (:mod:`bakeoff.predict.capacity`): each
framework's memory increment fitted as a fixed working memory plus a scale of the counted bytes, and its steady step
as FLOPs at one rate plus elementwise work at another (or its GEMMs at the device's rates by shape plus the
elementwise work), each fit with its worst leave-one-out error."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bakeoff.predict.transformer_costs import (
    BYTES,
    RateTable,
    Shape,
    activation_elements,
    attention_elements,
    gemm_seconds,
    gemms,
    layer_activations,
    training_flops,
)

if TYPE_CHECKING:
    from bakeoff.core.result import TrialResult


@dataclasses.dataclass(frozen=True)
class Calibration:
    """One framework's fit to its stored trials on one machine, at one precision and execution mode: the training
    memory increment ≈ ``fixed + scale × count`` (the count: gradients and activations, :func:`layer_activations`
    unfused) and the steady step ≈ ``per_flop × FLOPs + per_element × elements`` (:func:`training_flops`,
    :func:`attention_elements`). ``memory_error`` and ``step_error``: the worst |predicted / measured - 1| when each
    size is predicted from the other sizes only; ``largest_flops``: the FLOPs of the largest step it measured.

    Given the device's GEMM rates by shape (:func:`calibrate`'s ``rates``: ``rated``), the step is also fitted as
    its GEMMs each at its shape's measured rate (:func:`gemm_seconds`) ``+ gemm_per_element × elements +
    gemm_per_activation × activation elements`` (the elementwise part: attention's softmax-sized work and the
    work over the layers' activations, :func:`activation_elements`),
    with its own leave-one-out error (``gemm_step_error``); a plan then times its own GEMMs the same way, and so
    follows the FLOP rate up as the matrices grow."""

    framework: str
    precision: str
    execution: str
    device: str
    sizes: int
    trials: int
    fixed: float
    scale: float
    per_flop: float
    per_element: float
    memory_error: float
    step_error: float
    largest_flops: float = 0.0
    rated: bool = False  # False: no rate table was given, the step is FLOPs at one rate
    gemm_per_element: float = 0.0
    gemm_per_activation: float = 0.0
    gemm_step_error: float | None = None

    def memory(self, count: float) -> float:
        return self.fixed + self.scale * count

    def step(self, flops: float, elements: float) -> float:
        return self.per_flop * flops + self.per_element * elements

    def rated_step(self, gemm_s: float, elements: float, activations: float) -> float:
        """The step from its GEMMs' time at the device's own rates by shape (:func:`gemm_seconds`), plus the
        elementwise part: attention's ``elements`` and the layers' ``activations`` (:func:`activation_elements`)."""
        return gemm_s + self.gemm_per_element * elements + self.gemm_per_activation * activations

    @property
    def source(self) -> str:
        step = (f"≤ {self.step_error:.0%} step" if self.gemm_step_error is None else
                f"≤ {self.gemm_step_error:.0%} step (its GEMMs at this device's rates by shape, plus attention's "
                f"elementwise work at {self.gemm_per_element * 1e9:.2g} ns an element and the activations' at "
                f"{self.gemm_per_activation * 1e9:.2g} ns an element)")
        return (f"calibrated on {self.device} ({self.framework} {self.execution}, {self.precision}): {self.trials} "
                f"trials at {self.sizes} sizes; leave-one-out error ≤ {self.memory_error:.0%} memory, {step}")

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "source": self.source}


@dataclasses.dataclass(frozen=True)
class Point:
    """One measured size: what the calibration predicts from (the count, FLOPs and elements of a step at the
    trial's batch) and what was measured (the median over its trials)."""

    count: float
    flops: float
    elements: float
    memory: float
    step: float
    gemm_s: float | None = None  # its GEMMs at the device's rates by shape (:func:`gemm_seconds`), when known
    activations: float = 0.0  # elements of the layers' (tokens, width) activations (:func:`activation_elements`)


EXTRAPOLATED = 4.0
"""A calibrated step of more than this many times the FLOPs of the largest step its calibration measured is said to
be extrapolated. Measured on a 2-core CPU, fp32 (bench/plan_accuracy.py): the `sizes` suite's largest size
predicted from the others (3.5× their largest step's FLOPs) came within 8% in every framework; the text
classifier's `paper` preset (12 × 768, sequences of 512, batch 8: 13× the suite's largest step) ran at 1.3–1.5× the
FLOP rate of `small`, and its calibrated step was 22–38% too long (``--beyond paper:8``)."""

MIN_SIZES = 3
"""Sizes a calibration needs: two coefficients, and each size must be predictable from the others."""


def point(shape: Shape, batch: float, precision: str, memory: float, step: float,
          rates: RateTable | None = None) -> Point:
    """The calibration's features of one measured configuration (a step on one device); ``rates``: the device's
    GEMM rates by shape for the trial's framework and precision."""
    count = (4 * shape.params + shape.layers * layer_activations(shape, batch, BYTES[precision], fused=False)
             + (shape.seq * batch * shape.vocab * (BYTES[precision] + 4) if shape.lm_head else 0))
    gemm_s = gemm_seconds(gemms(shape, batch), rates) if rates is not None else None
    return Point(count, training_flops(shape, batch), attention_elements(shape, batch), memory, step, gemm_s,
                 activation_elements(shape, batch))


def _fit_two(xs: Sequence[tuple[float, float]], ys: Sequence[float]) -> tuple[float, float]:
    """Non-negative least squares with two coefficients: the unconstrained fit when both are ≥ 0, else the better
    of the two one-coefficient fits (a negative working memory or rate is not a machine)."""
    import numpy as np

    a, y = np.array(xs, dtype=float), np.array(ys, dtype=float)
    both = np.linalg.lstsq(a, y, rcond=None)[0]
    if (both >= 0).all():
        return float(both[0]), float(both[1])
    best: tuple[float, tuple[float, float]] | None = None
    for j in (0, 1):
        column = a[:, j]
        k = max(0.0, float(column @ y / (column @ column))) if column @ column else 0.0
        residual = float(((y - k * column) ** 2).sum())
        coefficients = (k, 0.0) if j == 0 else (0.0, k)
        if best is None or residual < best[0]:
            best = (residual, coefficients)
    assert best is not None
    return best[1]


def fit(points: Sequence[Point]) -> tuple[float, float, float, float]:
    """(fixed, scale, per_flop, per_element) from measured sizes."""
    fixed, scale = _fit_two([(1.0, q.count) for q in points], [q.memory for q in points])
    per_flop, per_element = _fit_two([(q.flops, q.elements) for q in points], [q.step for q in points])
    return fixed, scale, per_flop, per_element


def leave_one_out(points: Sequence[Point]) -> list[tuple[float, float]]:
    """Each size's (memory error, step error) predicted from the other sizes' fit: predicted / measured - 1."""
    out = []
    for i, held in enumerate(points):
        fixed, scale, per_flop, per_element = fit([q for j, q in enumerate(points) if j != i])
        out.append(((fixed + scale * held.count) / held.memory - 1,
                    (per_flop * held.flops + per_element * held.elements) / held.step - 1))
    return out


def fit_rated(points: Sequence[Point]) -> tuple[float, float, float]:
    """(gemm_per_element, gemm_per_activation, worst leave-one-out step error): the step less its GEMMs' time at the
    device's rates by shape, fitted as attention's elementwise work and the work over the layers' activations;
    every point needs its ``gemm_s``."""
    def two(some: Sequence[Point]) -> tuple[float, float]:
        return _fit_two([(q.elements, q.activations) for q in some], [q.step - (q.gemm_s or 0.0) for q in some])

    errors = []
    for i, held in enumerate(points):
        e, a = two([q for j, q in enumerate(points) if j != i])
        errors.append(abs(((held.gemm_s or 0.0) + e * held.elements + a * held.activations) / held.step - 1))
    return (*two(points), max(errors))


CALIBRATED_WORKLOAD = "text_classifier"
"""The workload whose trials calibrate the plan: the Transformer the plan's :class:`Shape` describes."""


def trial_shape(result: TrialResult) -> Shape | None:
    """The :class:`Shape` a stored text-classifier trial trained (its resolved configuration), or None."""
    config = result.setup.config or {}
    try:
        return Shape(int(config["num_layers"]), int(config["d_model"]), int(config["num_heads"]),
                     int(config["seq_len"]), int(config["vocab_size"]), int(config["d_ff"]), lm_head=False)
    except (KeyError, TypeError, ValueError):
        return None


def calibrate(results: Iterable[TrialResult],
              rates: Mapping[tuple[str, str], RateTable] | None = None) -> list[Calibration]:
    """A :class:`Calibration` per framework and precision, from stored successful single-process text-classifier
    trials without accumulation, with a memory increment and a steady step, grouped by framework, precision,
    execution mode and machine (the device's name, or the CPU model with the trial's threads); a group needs
    :data:`MIN_SIZES` distinct sizes (shape and batch). Where a framework has several groups at one precision, the
    one with the most sizes wins (then the most trials). ``rates``: (framework, precision) -> the GEMM rates by
    shape of the device the trials ran on (:mod:`bakeoff.measure.gemm_rates`); where they cover every size's
    GEMMs, the step is also fitted on them (:attr:`Calibration.rated`)."""
    groups: dict[tuple[str, str, str, str, str], dict[tuple[Shape, int], list[tuple[float, float]]]] = {}
    for r in results:
        spec = r.spec
        if (r.status.value != "ok" or spec.get("workload") != CALIBRATED_WORKLOAD
                or spec.get("parallelism", "none") != "none" or int(spec.get("grad_accum", 1)) != 1
                or r.memory_increment_bytes is None
                or not r.steady_step_s or (shape := trial_shape(r)) is None):
            continue
        env = r.environment or {}
        resolved = str(env.get("device") or spec.get("device", "cpu")).lower()  # the engine's: cpu, cuda:0, /GPU:0
        where = "gpu" if "cuda" in resolved or "gpu" in resolved else "cpu"
        device = (env.get("device_name") or env.get("device_kind") or "a GPU" if where == "gpu"
                  else f"{env.get('cpu') or 'a CPU'}, {spec.get('threads') or 'all'} threads")
        key = (str(spec["framework"]), str(spec.get("precision", "fp32")), str(spec.get("execution", "")), where,
               device)
        size = (shape, int(spec["batch_size"]))
        groups.setdefault(key, {}).setdefault(size, []).append((float(r.memory_increment_bytes),
                                                               float(r.steady_step_s)))
    best: dict[tuple[str, str], Calibration] = {}
    for (framework, precision, execution, _, device), sizes in groups.items():
        if len(sizes) < MIN_SIZES:
            continue
        table = (rates or {}).get((framework, precision))
        points = [point(shape, batch, precision, _median([m for m, _ in runs]), _median([s for _, s in runs]), table)
                  for (shape, batch), runs in sizes.items()]
        errors = leave_one_out(points)
        rated = (dict(zip(("gemm_per_element", "gemm_per_activation", "gemm_step_error"), fit_rated(points),
                          strict=True),
                      rated=True) if all(q.gemm_s for q in points) else {})
        cal = Calibration(framework, precision, execution, device, len(points), sum(map(len, sizes.values())),
                          *fit(points), memory_error=max(abs(m) for m, _ in errors),
                          step_error=max(abs(s) for _, s in errors), largest_flops=max(q.flops for q in points),
                          **rated)
        held = best.get((framework, precision))
        if held is None or (cal.sizes, cal.trials) > (held.sizes, held.trials):
            best[framework, precision] = cal
    return list(best.values())


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
