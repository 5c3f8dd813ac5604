"""Fairness, proven, for PaddlePaddle: the ``paddle.nn`` models compute the same function as the PyTorch ones and
train alike, in dygraph and under ``paddle.jit.to_static``, with the same checks and tolerances as
tests/parity_checks.py.

Every Paddle probe is compared with PyTorch's eager probe of the same precision, per workload: parameter counts,
the canonical weights' round trip, forward outputs with copied weights (and perturbed ones), every training loss
(plain and accumulated), gradients and trained weights per tensor; and each Paddle probe with itself (accumulation
exact, every tensor moved, the to_static program built once per input shape). bf16 is graph only on a CPU: Paddle's
dygraph AMP does nothing there (the engine refuses eager bf16, checked below). Measured worst, MNIST tiny against
PyTorch, eager and graph alike: outputs 1.8e-7, losses relative 3.1e-7, gradients per tensor relative 6.9e-7,
trained weights 5.8e-6; bf16 (to_static) against PyTorch's autocast: outputs 1.6e-3 (0.4u of the largest
output, u = 2⁻⁸), losses relative 9.3e-4 (0.24u). The Transformers (text classifier, autoencoder; tiny), eager and
to_static alike (equal to the last bit): outputs 4.7e-7, losses relative 1.8e-6, gradients per tensor 1.3e-5,
trained weights 1.0e-3 (the token embedding, as PyTorch against TensorFlow; every other tensor ≤ 6.4e-6 on the
autoencoder); bf16 against autocast: outputs 1.9u of the largest output, first loss 0.08u, later losses 1.1u.
Each probe is one framework in one mode, in its own process (``python -m bakeoff.trial.parity_probe``), through the
real engine, dropout off; the PyTorch probes are shared with test_parity.py. Runtime: 38 s on 2 shared CPUs for
MNIST, its two PyTorch probes included (fewer when test_parity.py ran them); the Transformers add 10 probes, 6 Paddle
(9-14 s each) and 4 PyTorch (19-50 s each, shared with test_parity.py): 329 s for the file at a load of 7-10 on 2 CPUs.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from bakeoff.core import registry
from bakeoff.trial.parity_probe import UNSUPPORTED_EXIT
from parity_checks import Mode, PortParity, Probes, check_gradients, check_losses, check_outputs, parity_command

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not all(registry.installed(f) for f in ("paddle", "torch")),
                                 reason="Paddle parity needs paddle and torch (pip install 'bakeoff[paddle]')")]

EAGER, GRAPH = Mode("paddle"), Mode("paddle", "graph")
BF16 = (Mode("paddle", "graph", "bf16"), Mode("torch", precision="bf16"))
TORCH = Mode("torch")
ACCUM_SHAPES = 2
"""Input shapes the probe's gradient checks feed the step before training (bakeoff.trial.parity_probe): the
micro-batch of batch_size / 4 and the batch of batch_size; training then feeds the latter only."""


class TestPaddleParity(PortParity):
    """Every Paddle probe against PyTorch's of the same precision (tests/parity_checks.py)."""

    PORT, REFERENCES = "paddle", ("torch",)
    PARAMS = {"mnist": 5_258, "text_classifier": 331_201, "autoencoder": 71_104}  # as tests/test_parity.py counts
    # One line per workload: the Paddle probes and the PyTorch ones they are compared with.
    MODES = {"mnist": (TORCH, EAGER, GRAPH, *BF16), "text_classifier": (TORCH, EAGER, GRAPH, *BF16),
             "autoencoder": (TORCH, EAGER, GRAPH, *BF16)}


@pytest.fixture(scope="module")
def probes(parity_probes: Probes) -> Probes:
    # The PyTorch probes are test_parity.py's (the same command): run once per session.
    parity_probes.prefetch(TestPaddleParity.all_probes())
    return parity_probes


def _ids(value: object) -> str:
    return str(value)


@pytest.mark.parametrize(("workload", "mode"),
                         [p for p in TestPaddleParity.own_probes() if p[1].execution == "graph"], ids=_ids)
def test_to_static_builds_one_program_per_shape(probes, workload, mode):
    # The gradient checks built a program for each of their two shapes before training; the training steps, all
    # of the batch shape, build none (graph_builds: before the steps and after each).
    builds = probes.get(workload, mode)["graph_builds"]
    assert np.all(builds == ACCUM_SHAPES), builds


def test_eager_and_to_static_paddle_agree(probes):
    # The same model op by op and as a static program: within fp32 parity (measured: equal to the last bit here).
    eager, graph = probes.get("mnist", EAGER), probes.get("mnist", GRAPH)
    check_outputs(graph, eager, "fp32", "outputs_perturbed")
    check_losses(graph["losses"], eager["losses"], "fp32")
    check_gradients(graph, eager)


def test_eager_bf16_on_cpu_is_refused(tmp_path):
    # Paddle's dygraph auto_cast is a no-op on a CPU (a warning, fp32 kernels): an eager bf16 trial would be fp32
    # under a bf16 label, so the engine refuses it rather than measure it (its record's cpu_missing, which bakeoff
    # parity reads to refuse the mode before any probe starts); the probe says why in its last line, no traceback.
    run = subprocess.run(parity_command("mnist", Mode("paddle", "eager", "bf16"), tmp_path / "p.npz"),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == UNSUPPORTED_EXIT and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert run.stderr.strip().splitlines()[-1].startswith("unsupported: Paddle's dygraph AMP"), run.stderr[-2000:]
    assert not (tmp_path / "p.npz").exists()
