"""Fairness, proven, for JAX: the Flax models compute the same function as the PyTorch and TensorFlow ones and train
alike, eagerly and under ``jax.jit``, with the same checks and tolerances as tests/parity_checks.py.

Every JAX probe is compared with PyTorch's and with TensorFlow's eager probe of the same precision, per workload
(text classifier, autoencoder, MNIST): parameter counts, the canonical weights' round trip, forward outputs with
copied weights, every training loss (plain and accumulated), gradients and trained weights per tensor; and each
JAX probe with itself (accumulation exact, every tensor moved, the jitted step built once). Measured worst, fp32,
JAX against either framework: outputs 2.4e-6, losses relative 5.4e-6, gradients per tensor 1.2e-5, trained
weights 1.1e-3 (the token embedding against PyTorch, as PyTorch against TensorFlow; every other tensor ≤ 1.9e-4);
accumulation within JAX: gradients 7e-7, losses 2e-7. bf16, u = 2⁻⁸: JAX's jitted step against PyTorch's
autocast on the text classifier, outputs 1.1u of the largest output, first loss 0.07u, later losses 1.7u (the
checks allow parity_checks.py's 8u, 1u and 8u). Each probe is one framework in one mode, in its own process
(``python -m bakeoff.trial.parity_probe``), through the real engine, dropout off.
"""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.core import registry
from parity_checks import (
    EAGER,
    STEPS,
    Mode,
    Probes,
    check_accumulation,
    check_gradients,
    check_losses,
    check_moved,
    check_outputs,
    check_weights,
)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not all(registry.installed(f) for f in ("jax", "torch", "tensorflow")),
                                 reason="JAX parity needs jax, torch and tensorflow installed")]

PARAMS = {"text_classifier": 331_201, "autoencoder": 71_104, "mnist": 5_258}  # as tests/test_parity.py counts
JIT = Mode("jax", "graph")
BF16 = (Mode("jax", "graph", "bf16"), Mode("torch", precision="bf16"))
# JAX eagerly only for MNIST: op by op the Transformers' probes cost 20-27 s of CPU each, and eager runs the very
# functions jit compiles (test_eager_and_jitted_jax_agree shows what XLA's fusion changes).
MODES = {"text_classifier": (*EAGER, JIT, *BF16), "autoencoder": (*EAGER, JIT), "mnist": (*EAGER, JIT, Mode("jax"))}
# Every JAX probe against every other framework's probe of the same precision.
PAIRS = [(w, j, o) for w, modes in MODES.items() for j in modes if j.framework == "jax"
         for o in modes if o.framework != "jax" and o.precision == j.precision]
JAX_PROBES = [(w, m) for w, modes in MODES.items() for m in modes if m.framework == "jax"]


@pytest.fixture(scope="module")
def probes(parity_probes: Probes) -> Probes:
    # The PyTorch and TensorFlow probes are test_parity.py's (the same command): run once per session.
    parity_probes.prefetch([(w, m) for w, modes in MODES.items() for m in modes])
    return parity_probes


def _ids(value: object) -> str:
    return str(value)


@pytest.mark.parametrize("workload", list(MODES))
def test_parameter_counts_equal_and_exact(probes, workload):
    counts = {str(m): int(probes.get(workload, m)["num_params"]) for m in MODES[workload]}
    assert set(counts.values()) == {PARAMS[workload]}, counts


@pytest.mark.parametrize(("workload", "mode"), JAX_PROBES, ids=_ids)
def test_canonical_weights_round_trip_exactly(probes, workload, mode):
    probe = probes.get(workload, mode)
    assert bool(probe["roundtrip_same_keys"]) and float(probe["roundtrip_max_err"]) == 0.0


@pytest.mark.parametrize(("workload", "jax_mode", "other"), PAIRS, ids=_ids)
def test_forward_outputs_equal_with_copied_weights(probes, workload, jax_mode, other):
    a, b = probes.get(workload, jax_mode), probes.get(workload, other)
    for which in ("outputs", "outputs_perturbed"):  # perturbed: non-zero biases, non-unit LayerNorm
        check_outputs(a, b, jax_mode.precision, which)


@pytest.mark.parametrize(("workload", "jax_mode", "other"), PAIRS, ids=_ids)
def test_training_losses_equal_every_step(probes, workload, jax_mode, other):
    a, b = probes.get(workload, jax_mode), probes.get(workload, other)
    assert a["losses"].shape == (STEPS,)
    check_losses(a["losses"], b["losses"], jax_mode.precision)
    check_losses(a["losses_accum"], b["losses_accum"], jax_mode.precision)  # grad_accum = 4, across frameworks


@pytest.mark.parametrize(("workload", "jax_mode", "other"), [p for p in PAIRS if p[1].precision == "fp32"],
                         ids=_ids)
def test_gradients_and_trained_weights_equal_per_tensor(probes, workload, jax_mode, other):
    a, b = probes.get(workload, jax_mode), probes.get(workload, other)
    check_gradients(a, b)
    check_gradients(a, b, "grad_accum")
    check_weights(a, b)


@pytest.mark.parametrize(("workload", "mode"), [p for p in JAX_PROBES if p[1].precision == "fp32"], ids=_ids)
def test_gradient_accumulation_is_exact(probes, workload, mode):
    check_accumulation(probes.get(workload, mode))


@pytest.mark.parametrize(("workload", "mode"), JAX_PROBES, ids=_ids)
def test_training_moved_every_tensor(probes, workload, mode):
    check_moved(probes.get(workload, mode), registry.workload(workload).config("tiny")["learning_rate"])


def test_bf16_is_in_force_and_close_to_fp32(probes):
    bf16, fp32 = probes.get("text_classifier", BF16[0]), probes.get("text_classifier", JIT)
    assert np.abs(bf16["outputs"] - fp32["outputs"]).max() > 1e-4  # bf16 rounding shows: it really ran in bf16
    check_outputs(bf16, fp32, "bf16", "outputs")
    check_losses(bf16["losses"], fp32["losses"], "bf16")


@pytest.mark.parametrize(("workload", "mode"), [p for p in JAX_PROBES if p[1].execution == "graph"], ids=_ids)
def test_jitted_step_builds_its_graph_once(probes, workload, mode):
    # jax.jit traces and compiles the whole step on the first training step (the gradient checks before it ran a
    # separately jitted gradient function); later steps, of the same shapes, build nothing.
    builds = probes.get(workload, mode)["graph_builds"]
    assert builds[0] == 0 and np.all(builds[1:] == 1), builds


def test_eager_and_jitted_jax_agree(probes):
    # The same step with and without jax.jit: XLA fuses and reorders, so not bit-for-bit, but within fp32 parity.
    eager, graph = probes.get("mnist", Mode("jax")), probes.get("mnist", JIT)
    check_outputs(graph, eager, "fp32", "outputs_perturbed")
    check_losses(graph["losses"], eager["losses"], "fp32")
    check_gradients(graph, eager)
