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
from parity_checks import EAGER, Mode, PortParity, Probes, check_gradients, check_losses, check_outputs

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not all(registry.installed(f) for f in ("jax", "torch", "tensorflow")),
                                 reason="JAX parity needs jax, torch and tensorflow installed")]

JIT = Mode("jax", "graph")
BF16 = (Mode("jax", "graph", "bf16"), Mode("torch", precision="bf16"))


class TestJaxParity(PortParity):
    """Every JAX probe against every other framework's probe of the same precision (tests/parity_checks.py)."""

    PORT, REFERENCES = "jax", ("torch", "tensorflow")
    PARAMS = {"text_classifier": 331_201, "autoencoder": 71_104, "mnist": 5_258}  # as tests/test_parity.py counts
    # JAX eagerly only for MNIST: op by op the Transformers' probes cost 20-27 s of CPU each, and eager runs the very
    # functions jit compiles (test_eager_and_jitted_jax_agree shows what XLA's fusion changes).
    MODES = {"text_classifier": (*EAGER, JIT, *BF16), "autoencoder": (*EAGER, JIT),
             "mnist": (*EAGER, JIT, Mode("jax"))}


@pytest.fixture(scope="module")
def probes(parity_probes: Probes) -> Probes:
    # The PyTorch and TensorFlow probes are test_parity.py's (the same command): run once per session.
    parity_probes.prefetch(TestJaxParity.all_probes())
    return parity_probes


def _ids(value: object) -> str:
    return str(value)


@pytest.mark.parametrize(("workload", "mode"), [p for p in TestJaxParity.own_probes() if p[1].execution == "graph"],
                         ids=_ids)
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
