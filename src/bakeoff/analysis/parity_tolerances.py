"""Cross-framework parity: the checks a port must pass, their tolerances per precision, and what each finds.

Framework-free. The inputs are canonical tensors (``{name: array}``, the same keys and layouts in every framework)
and the arrays a parity probe saves (:mod:`bakeoff.trial.parity_probe`); each check returns one :class:`Finding` per
thing compared, in the workload's canonical order, so that the first failing one is the first tensor (or output,
or step) that disagrees. ``bakeoff parity`` (:mod:`bakeoff.run.parity_session`) and the test suite's parity tests use
these same checks and tolerances.

Tolerances, fp32 (measured worst over the shipped workloads and every mode, eager and compiled, in brackets):
  outputs: max |a − b| ≤ 1e-5 · max(1, max |ref|) [3e-6], and the same between a model built with the preset's
  dropout, in evaluation mode, and one built without, in one framework (:func:`compare_evaluation`); training losses,
  plain and accumulated: relative 1e-4 per step [5e-6]; gradients per tensor: max |a − b| ≤ 1e-4 · max(max |ref|,
  1e-6) [1.5e-5], the floor 1e-6 holding a tensor whose gradient is all tiny to an absolute tolerance instead of noise
  against noise — across frameworks, and between 4 accumulated micro-batches and the batch they make up [1.3e-5]; an
  accumulating run's losses against the plain run's on the same examples, in one framework: relative 1e-5 [6e-7];
  weights after training, per tensor: ‖Δa − Δb‖ ≤ 5e-3 · ‖Δref‖ for the movement Δ = after − initial [1.1e-3, a token
  embedding whose rare tokens' tiny gradients sit in Adam's ε regime; every other tensor ≤ 4e-4].
bf16, u = 2⁻⁸ its unit roundoff (8 significant bits): the frameworks round activations to bf16 in different places
(autocast: matmul and convolution outputs; Keras' mixed_bfloat16: every layer's output), so one forward pass
differs by a few u: outputs within 8u of the largest output [2.6u]; the first training loss (same weights, forward
only) within 1u [0.14u]; every later step within 8u, as each Adam step can add about u of drift [3.9u]. bf16
gradients and weights are not compared per tensor: Keras' mixed_bfloat16 reduces bias gradients in bf16 (27%
apart between 4 micro-batches and their batch), which losses absorb and tensors don't.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from bakeoff.core.workload import differing

BF16_U = 2.0**-8
"""bf16's unit roundoff."""

GRADIENT_FLOOR = 1e-6
"""Gradients are compared relative to each tensor's largest entry, or to this when that is smaller."""

ACCUM_LOSSES = 1e-5
"""An accumulating run's losses against the plain run's, in one framework: relative, per step."""

NEAR = 0.5
"""A check within 2× of failing (its error over half its tolerance) is flagged as near, though it holds."""


@dataclasses.dataclass(frozen=True)
class Tolerances:
    """What two frameworks may differ by, at one precision (the module docstring says why each)."""

    precision: str
    outputs: float  # max |a − b| relative to the largest reference output (at least 1 in fp32)
    first_loss: float  # relative, the first training step
    losses: float  # relative, every step
    gradients: float | None  # relative to each tensor's largest entry; None: not compared per tensor
    weights: float | None  # ‖Δa − Δb‖ / ‖Δref‖ per tensor; None: not compared per tensor


TOLERANCES = {
    "fp32": Tolerances("fp32", outputs=1e-5, first_loss=1e-4, losses=1e-4, gradients=1e-4, weights=5e-3),
    "bf16": Tolerances("bf16", outputs=8 * BF16_U, first_loss=BF16_U, losses=8 * BF16_U, gradients=None,
                       weights=None),
}


@dataclasses.dataclass(frozen=True)
class Finding:
    """One comparison: a tensor, an output or a step, its largest differences, and the tolerance it is held to.

    ``error`` is what is held to ``tolerance`` (``measure`` says how it is computed); ``max_abs`` and ``max_rel``
    are the largest absolute and relative differences, for the person reading.
    """

    check: str
    item: str
    max_abs: float
    max_rel: float
    error: float
    tolerance: float
    measure: str
    ok: bool
    note: str = ""

    def describe(self) -> str:
        """One line: the item, its differences, and the tolerance (or the note, for a structural mismatch)."""
        if self.note:
            return f"{self.check}: {self.item}: {self.note}"
        verdict = "≤" if self.ok else ">"
        return (f"{self.check}: {self.item}: max abs diff {self.max_abs:.3g}, max rel diff {self.max_rel:.3g}; "
                f"{self.measure} {self.error:.3g} {verdict} tolerance {self.tolerance:.3g}")


def first_failure(findings: Sequence[Finding]) -> Finding | None:
    """The first finding that did not hold, or None."""
    return next((f for f in findings if not f.ok), None)


def flatten(prefix: str, weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``{prefix/name: tensor}``: canonical tensors as entries of one ``.npz``."""
    return {f"{prefix}/{name}": np.asarray(value) for name, value in weights.items()}


def unflatten(arrays: Mapping[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """The canonical tensors :func:`flatten` stored under ``prefix``, in their stored order."""
    start = f"{prefix}/"
    return {k[len(start):]: v for k, v in arrays.items() if k.startswith(start)}


def per_tensor_errors(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], floor: float) -> dict[str, float]:
    """Each tensor's max |a − b| relative to its own largest entry in ``b``, or to ``floor`` when that is smaller.

    The floor is absolute (in the tensors' units): a tensor whose entries are all below it — a gradient that is
    zero in theory, such as an attention key bias's, and holds only rounding noise — is held to an absolute
    tolerance instead of a relative error of noise against noise.
    """
    if sorted(a) != sorted(b):
        raise ValueError(f"different tensors: {differing(a, b, 'the first has', 'the second has')}")
    return {k: float(np.abs(a[k] - b[k]).max() / max(float(np.abs(b[k]).max()), floor)) for k in sorted(a)}


RUNNING_STATISTICS = ("moving_mean", "moving_variance")
"""Leaf names (Keras', the canonical ones) of a BatchNorm's running statistics. Canonical weights carry them, since a
model moved between frameworks evaluates with them, but no optimizer trains them: the forward pass does, in
training mode, by a momentum rule each framework words differently. So they are not counted as parameters, have no
gradient to compare, and are compared after training with the weights (their movement), where an unconverted
momentum or an unbiased running variance shows."""


def running_statistic(name: str) -> bool:
    """Whether the canonical tensor ``name`` is a normalisation layer's running statistic
    (:data:`RUNNING_STATISTICS`), its last part after a dot (``bn.moving_mean``) or a slash (a Keras variable's
    path, ``batch_normalization/moving_mean``)."""
    return name.replace("/", ".").rpartition(".")[2] in RUNNING_STATISTICS


def _trained(tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The tensors an optimizer trains: all but the running statistics."""
    return {k: v for k, v in tensors.items() if not running_statistic(k)}


def _noise(g: np.ndarray, scale: float) -> bool:
    return float(np.abs(g).max(initial=0.0)) <= GRADIENT_FLOOR * scale


def zero_gradients(a: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray],
                   declared: Sequence[str] = ()) -> dict[str, str]:
    """The tensors whose gradient is zero, each with how that is known: declared by the workload (a canonical name
    or its ending, e.g. ``attn.k.bias``: softmax over keys is unchanged when the same q·b_k is added to every logit
    of a query), or measured — rounding noise on both sides, at most :data:`GRADIENT_FLOOR` of the largest gradient
    (a Keras attention's key bias, whatever its name). Their computed gradients are noise, which Adam (dividing by
    √v) turns into full-size steps, different in each framework: their trained weights are not compared. Never a
    name bakeoff knows: a tensor with a real gradient is compared whatever it is called."""
    a, ref = _trained(a), _trained(ref)
    scale = max((float(np.abs(g).max(initial=0.0)) for g in ref.values()), default=0.0)
    out = {}
    for name, g in ref.items():
        if any(name == d or name.endswith(f".{d}") or name.endswith(f"/{d}") for d in declared):
            out[name] = "declared by the workload"
        elif scale > 0 and name in a and np.shape(a[name]) == np.shape(g) and _noise(g, scale) \
                and _noise(a[name], scale):
            out[name] = "measured: rounding noise on both sides"
    return out


def _rel(diff: float, scale: float) -> float:
    return diff / scale if scale > 0 else (0.0 if diff == 0 else float("inf"))


def _structure(check: str, a: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray]) -> list[Finding]:
    """Names missing, extra, or of another shape than the reference's, each a failed finding."""
    out = []
    for name, value in ref.items():
        if name not in a:
            out.append(Finding(check, name, np.inf, np.inf, np.inf, 0.0, "", False,
                               f"missing (the reference has shape {tuple(np.shape(value))})"))
        elif np.shape(a[name]) != np.shape(value):
            out.append(Finding(check, name, np.inf, np.inf, np.inf, 0.0, "", False,
                               f"shape {tuple(np.shape(a[name]))}, the reference's {tuple(np.shape(value))}"))
    out += [Finding(check, name, np.inf, np.inf, np.inf, 0.0, "", False,
                    f"not a canonical tensor (shape {tuple(np.shape(a[name]))}): the reference has no {name}")
            for name in a if name not in ref]
    return out


def compare_parameters(num_params: int, roundtrip: Mapping[str, np.ndarray],
                       canonical: Mapping[str, np.ndarray]) -> list[Finding]:
    """The model's parameter count equals the canonical weights' but their running statistics (``num_params``),
    and reading back the canonical weights it was given (``canonical``) returns every name, shape and value exactly
    (``roundtrip``), running statistics included."""
    expected = sum(int(np.size(v)) for v in _trained(canonical).values())
    count = Finding("parameters", "count", float(abs(num_params - expected)), _rel(abs(num_params - expected),
                    expected), float(abs(num_params - expected)), 0.0, "|count − canonical count|",
                    num_params == expected,
                    "" if num_params == expected else f"{num_params:,} parameters, the canonical weights {expected:,}")
    structural = _structure("parameters", roundtrip, canonical)
    bad = {f.item for f in structural}
    values = []
    for name, value in canonical.items():
        if name in bad:
            continue
        diff = float(np.abs(roundtrip[name] - value).max(initial=0.0))
        values.append(Finding("parameters", name, diff, _rel(diff, float(np.abs(value).max(initial=0.0))), diff,
                              0.0, "round trip max |set − get|", diff == 0.0))
    return [count, *structural, *values]


def compare_outputs(a: np.ndarray, ref: np.ndarray, precision: str, item: str = "outputs") -> list[Finding]:
    """Model outputs on the same examples from the same weights."""
    tol = TOLERANCES[precision]
    if a.shape != ref.shape:
        return [Finding("outputs", item, np.inf, np.inf, np.inf, tol.outputs, "", False,
                        f"shape {a.shape}, the reference's {ref.shape}")]
    diff, top = float(np.abs(a - ref).max(initial=0.0)), float(np.abs(ref).max(initial=0.0))
    scale = max(top, 1.0) if precision == "fp32" else top
    rel = float((np.abs(a - ref) / np.maximum(np.abs(ref), np.finfo(np.float32).tiny)).max(initial=0.0))
    error = _rel(diff, scale)
    measure = "max |Δ| / max(1, max |ref|)" if precision == "fp32" else "max |Δ| / max |ref|"
    return [Finding("outputs", item, diff, rel, error, tol.outputs, measure, error <= tol.outputs)]


def compare_losses(a: np.ndarray, ref: np.ndarray, precision: str, check: str = "losses") -> list[Finding]:
    """Per-step training losses of two runs on the same batches from the same weights: the first step (forward
    only) within ``first_loss``, every later one within ``losses``, relative."""
    tol = TOLERANCES[precision]
    if a.shape != ref.shape:
        return [Finding(check, "losses", np.inf, np.inf, np.inf, tol.losses, "", False,
                        f"{a.shape} steps, the reference's {ref.shape}")]
    out = []
    for step, (x, y) in enumerate(zip(a.tolist(), ref.tolist(), strict=True), start=1):
        limit = tol.first_loss if step == 1 else tol.losses
        rel = _rel(abs(x - y), abs(y))
        out.append(Finding(check, f"step {step} loss", abs(x - y), rel, rel, limit, "|Δ| / |ref|", rel <= limit,
                           "" if np.isfinite(x) else f"loss {x}"))
    return out


def compare_gradients(a: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], tolerance: float = 1e-4,
                      check: str = "gradients", declared: Sequence[str] = ()) -> list[Finding]:
    """Per canonical tensor: max |a − ref| relative to the tensor's largest reference entry (floor
    :data:`GRADIENT_FLOOR`); a tensor whose gradient is zero (:func:`zero_gradients`: declared, which must then
    be noise on both sides, or measured so) is held to being noise. Running statistics
    (:data:`RUNNING_STATISTICS`) have no gradient: an engine reading gradients through the model's weight mapping
    finds their current values there, which are not compared."""
    zero = zero_gradients(a, ref, declared)
    a, ref = _trained(a), _trained(ref)
    out = _structure(check, a, ref)
    scale = max((float(np.abs(g).max(initial=0.0)) for g in ref.values()), default=0.0)
    bad = {f.item for f in out}
    for name, g in ref.items():
        if name in bad:
            continue
        diff = float(np.abs(a[name] - g).max(initial=0.0))
        top = float(np.abs(g).max(initial=0.0))
        if name in zero:
            noise = max(float(np.abs(a[name]).max(initial=0.0)), top)
            out.append(Finding(check, name, diff, _rel(diff, top), _rel(noise, scale), GRADIENT_FLOOR,
                               f"zero ({zero[name]}): max |g| / largest gradient", noise <= GRADIENT_FLOOR * scale,
                               "" if noise <= GRADIENT_FLOOR * scale else
                               f"gradient {noise:.3g} is not rounding noise (declared zero by the workload)"))
            continue
        error = diff / max(top, GRADIENT_FLOOR)
        out.append(Finding(check, name, diff, _rel(diff, top), error, tolerance,
                           f"max |Δ| / max(max |ref|, {GRADIENT_FLOOR:g})", error <= tolerance))
    return out


def compare_weights(init: Mapping[str, np.ndarray], a: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray],
                    tolerance: float = 5e-3, zero: Mapping[str, str] | None = None) -> list[Finding]:
    """The canonical weights after training, per tensor: the two runs moved each tensor alike, ‖Δa − Δref‖
    against ‖Δref‖ for Δ = after − initial (weights compared to themselves would hide the move in the initial
    values); the tensors whose gradient is zero (``zero``, :func:`zero_gradients`) are not compared, each a
    finding that says why."""
    zero = zero or {}
    out = _structure("weights", a, ref)
    bad = {f.item for f in out}
    for name, w in ref.items():
        if name in zero and name not in bad:
            out.append(Finding("weights", name, 0.0, 0.0, 0.0, 0.0, "", True,
                               f"not compared: its gradient is zero ({zero[name]}), so Adam moves it by noise"))
            continue
        if name in bad:
            continue
        diff = float(np.abs(a[name] - w).max(initial=0.0))
        error = _rel(float(np.linalg.norm(a[name] - w)), float(np.linalg.norm(w - init[name])))
        rel = _rel(diff, float(np.abs(w - init[name]).max(initial=0.0)))
        out.append(Finding("weights", name, diff, rel, error, tolerance, "‖Δa − Δref‖ / ‖Δref‖",
                           error <= tolerance))
    return out


def compare_evaluation(probe: Mapping[str, np.ndarray], precision: str) -> list[Finding]:
    """Within one probe: the outputs in evaluation mode of the model built with the preset's dropout
    (``outputs_dropout``, and ``outputs_dropout_again`` asked a second time) equal those of the model built without
    (``outputs``), within the outputs' tolerance — dropout is off in evaluation, so it changes nothing there and
    draws nothing. Parity trains with dropout off, so this is where dropout left on in evaluation shows."""
    rate = float(probe["eval_dropout"])
    items = (("outputs_dropout", f"outputs with dropout {rate:g} (evaluation mode)"),
             ("outputs_dropout_again", f"outputs with dropout {rate:g} (evaluation mode), asked again"))
    return [dataclasses.replace(f, check="evaluation")
            for key, item in items for f in compare_outputs(probe[key], probe["outputs"], precision, item)]


def compare_accumulation(probe: Mapping[str, np.ndarray], tolerance: float = 1e-4) -> list[Finding]:
    """Within one probe: 4 accumulated micro-batches give the gradient of the batch they make up, tensor by
    tensor, and the accumulating run's losses equal the plain run's (the same examples, 4 micro-batches a step)."""
    out = compare_gradients(unflatten(probe, "grad_accum"), unflatten(probe, "grad"), tolerance, "accumulation")
    if "losses_accum" in probe:
        accum, plain = probe["losses_accum"], probe["losses"][: len(probe["losses_accum"])]
        for step, (x, y) in enumerate(zip(accum.tolist(), plain.tolist(), strict=True), start=1):
            rel = _rel(abs(x - y), abs(y))
            out.append(Finding("accumulation", f"step {step} loss (accumulated)", abs(x - y), rel, rel,
                               ACCUM_LOSSES, "|Δ| / |one batch's|", rel <= ACCUM_LOSSES))
    return out
