"""The cross-framework parity checks and their tolerances, shared by test_parity.py and test_parity_speech_ctc.py.

A probe (``bakeoff.trial.parity``) is one framework in one execution mode and precision, in its own process. The tests
compare every PyTorch probe with every TensorFlow probe of the same precision — so compiled modes
(``torch.compile``, ``tf.function``, XLA) are checked against the other framework's eager and compiled modes —
and each probe with itself (gradient accumulation) and with the initial weights (training moved them).

Tolerances, fp32 (measured worst over the four workloads and every mode, eager and compiled, in brackets):
  outputs: max |a − b| ≤ 1e-5 [3e-6]; training losses, plain and accumulated: relative 1e-4 per step [5e-6];
  gradients per tensor: max |a − b| ≤ 1e-4 · max(max |b|, 1e-6) [1.5e-5], the floor 1e-6 being below the
  smallest real gradient tensor here (attention query/key kernels, ~4e-6) — across frameworks, and between 4
  accumulated micro-batches and the batch they make up [1.3e-5]; an accumulating run's losses against the plain
  run's on the same examples, in one framework: relative 1e-5 [6e-7];
  weights after training, per tensor: ‖Δa − Δb‖ ≤ 5e-3 · ‖Δb‖ for the movement Δ = after − initial [1.1e-3, the
  token embedding, whose rare tokens' tiny gradients sit in Adam's ε regime; every other tensor ≤ 4e-4].
bf16, u = 2⁻⁸ its unit roundoff (8 significant bits): the frameworks round activations to bf16 in different
places (autocast: matmul and convolution outputs; Keras' mixed_bfloat16: every layer's output), so one forward
pass differs by a few u: outputs within 8u of the largest output (a bf16 output alone is rounded to a spacing of
up to 2u of the largest) [2.6u]; the first training loss (same weights, forward only) within 1u [0.14u]; every
later step within 8u, as each Adam step can add about u of drift (early Adam steps are sign-like: a gradient
entry whose sign rounding flips moves its weight the other way) [3.9u].
bf16 gradients and weights are not compared per tensor: Keras' mixed_bfloat16 reduces bias gradients in bf16
(measured: 27% apart between 4 micro-batches and the batch they make up), which losses absorb and tensors don't.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bakeoff.measure.environment import usable_cores
from bakeoff.trial.parity import per_tensor_errors, unflatten

BF16_U = 2.0**-8

# Attention key biases have an exactly zero gradient in theory: softmax over keys is unchanged when the same
# q·b_k is added to every logit of a query. Their computed gradients are rounding noise, which Adam (dividing by
# √v) turns into full-size steps, different in each framework: they are checked to be noise, not compared.
ZERO_GRADIENT = ("attn.k.bias",)


@dataclasses.dataclass(frozen=True)
class Mode:
    framework: str
    execution: str = "eager"
    precision: str = "fp32"

    def __str__(self) -> str:
        return f"{self.framework}-{self.execution}-{self.precision}"


EAGER = (Mode("torch"), Mode("tensorflow"))


def pairs(modes: tuple[Mode, ...]) -> list[tuple[Mode, Mode]]:
    """Every (PyTorch, TensorFlow) pair of probes with the same precision."""
    return [(a, b) for a in modes if a.framework == "torch"
            for b in modes if b.framework == "tensorflow" and a.precision == b.precision]


STEPS = 6
"""Training steps of a ``bakeoff.trial.parity`` probe (each also accumulates over as many micro-batches)."""


def parity_command(workload: str, mode: Mode, out: Path) -> list[str]:
    """The ``python -m bakeoff.trial.parity`` probe of ``workload`` in ``mode``, writing its arrays to ``out``."""
    return [sys.executable, "-m", "bakeoff.trial.parity", workload, mode.framework, str(out), "--steps", str(STEPS),
            "--execution", mode.execution, "--precision", mode.precision, "--accum-steps", str(STEPS)]


class Probes:
    """Runs each probe once (one process each) and keeps its arrays; ``prefetch`` runs several two at a time."""

    def __init__(self, tmp: Path, command: Callable[[str, Mode, Path], list[str]]) -> None:
        self.tmp, self.command = tmp, command
        self.done: dict[tuple[str, Mode], dict[str, np.ndarray]] = {}

    def get(self, workload: str, mode: Mode) -> dict[str, np.ndarray]:
        if (workload, mode) not in self.done:
            out = self.tmp / f"{workload}-{mode}.npz"
            run = subprocess.run(self.command(workload, mode, out), capture_output=True, text=True, timeout=900)
            assert run.returncode == 0, f"probe {workload} {mode} failed:\n{run.stderr[-3000:]}"
            self.done[(workload, mode)] = dict(np.load(out))
        return self.done[(workload, mode)]

    def prefetch(self, wanted: Iterable[tuple[str, Mode]]) -> None:
        """Run the probes not yet done, one per core this process may use: a probe is mostly one busy thread
        (imports, eager dispatch, compiling). Each (workload, mode) is run once."""
        todo = list(dict.fromkeys(w for w in wanted if w not in self.done))
        with ThreadPoolExecutor(usable_cores()) as pool:
            list(pool.map(lambda wm: self.get(*wm), todo))


def _real(weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v for k, v in weights.items() if not k.endswith(ZERO_GRADIENT)}


def check_outputs(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], precision: str, which: str) -> None:
    x, y = a[which], b[which]
    assert x.shape == y.shape
    tol = 8 * BF16_U * float(np.abs(y).max()) if precision == "bf16" else 1e-5
    assert np.abs(x - y).max() <= tol, f"{which}: max difference {np.abs(x - y).max():.3g} > {tol:.3g}"
    assert np.ptp(y) > 1e-3  # the outputs really vary across examples: the check is not vacuous


def check_losses(a: np.ndarray, b: np.ndarray, precision: str) -> None:
    """Per-step losses of two runs on the same batches from the same weights."""
    assert a.shape == b.shape and a.ndim == 1 and len(a) >= 2
    rel = np.abs(a - b) / np.abs(b)
    if precision == "bf16":
        assert rel[0] <= BF16_U, f"first-step relative difference {rel[0]:.3g} > u = {BF16_U:.3g}"
        assert rel.max() <= 8 * BF16_U, f"per-step relative differences in units of u: {rel / BF16_U}"
    else:
        assert rel.max() <= 1e-4, f"per-step relative differences {rel}"


def check_gradients(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], group: str = "grad") -> None:
    """Per canonical tensor: relative error against ``b`` with an absolute floor; zero-in-theory ones are noise."""
    ga, gb = unflatten(a, group), unflatten(b, group)
    assert len(ga) == len(gb) > 0
    scale = max(float(np.abs(g).max()) for g in gb.values())
    for name in sorted(set(ga) - set(_real(ga))):
        for g in (ga[name], gb[name]):
            assert np.abs(g).max() <= 1e-6 * scale, f"{name}: gradient {np.abs(g).max():.3g} is not rounding noise"
    errors = per_tensor_errors(_real(ga), _real(gb), floor=1e-6)
    bad = {k: f"{e:.2g}" for k, e in errors.items() if e > 1e-4}
    assert not bad, f"{group}: tensors whose gradients differ (max relative error, floor 1e-6): {bad}"
    assert min(float(np.abs(g).max()) for g in _real(gb).values()) > 1e-6  # every real tensor held relatively


def check_accumulation(probe: Mapping[str, np.ndarray]) -> None:
    """4 accumulated micro-batches give the gradient of the batch they make up, tensor by tensor, and the
    accumulating run's losses equal the plain run's (the same examples, as 4 micro-batches per step)."""
    whole = {f"grad/{k}": v for k, v in unflatten(probe, "grad").items()}
    accumulated = {f"grad/{k}": v for k, v in unflatten(probe, "grad_accum").items()}
    check_gradients(accumulated, whole)
    accum, plain = probe["losses_accum"], probe["losses"][: len(probe["losses_accum"])]
    rel = np.abs(accum - plain) / np.abs(plain)
    assert rel.max() <= 1e-5, f"accumulated against plain steps, per-step relative differences {rel}"


def check_moved(probe: Mapping[str, np.ndarray], learning_rate: float) -> None:
    """Training moved every real tensor: Adam's early steps move each entry with a non-negligible gradient by
    about the learning rate, so every tensor's largest move is at least half of it."""
    init, after = unflatten(probe, "init"), unflatten(probe, "weights")
    assert sorted(init) == sorted(after)
    moved = {k: float(np.abs(after[k] - init[k]).max()) for k in _real(init)}
    still = {k: f"{m:.2g}" for k, m in moved.items() if m < learning_rate / 2}
    assert not still, f"tensors that did not move by lr/2 = {learning_rate / 2:g}: {still}"


def check_weights(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], tolerance: float = 5e-3) -> None:
    """The canonical weights after training, per tensor: the two runs moved each tensor alike (‖Δa − Δb‖ against
    ‖Δb‖ at most ``tolerance``, Δ = after − initial: weights compared relative to themselves would hide the move in
    the initial values)."""
    init = unflatten(b, "init")
    assert all(np.array_equal(init[k], v) for k, v in unflatten(a, "init").items())  # the same starting point
    wa, wb = _real(unflatten(a, "weights")), _real(unflatten(b, "weights"))
    errors = {k: float(np.linalg.norm(wa[k] - wb[k]) / np.linalg.norm(wb[k] - init[k])) for k in wb}
    bad = {k: f"{e:.2g}" for k, e in errors.items() if e > tolerance}
    assert not bad, f"tensors moved differently (‖Δa − Δb‖ / ‖Δb‖): {bad}"
