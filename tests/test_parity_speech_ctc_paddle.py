"""Fairness, proven, for PaddlePaddle on speech: the Paddle CTC acoustic model computes the same function as the
PyTorch one and trains alike, in dygraph and under ``paddle.jit.to_static``, with tests/parity_checks.py's checks and
tolerances.

The checks are test_parity_speech_ctc.py's: parameter counts; the canonical weights' round trip; per-frame
log-probabilities with copied weights; padding never changing a real frame; gradient accumulation exact across
micro-batches padded to different lengths; every training loss, gradient and trained tensor; every tensor moved;
CTC alone on fixed logits. Each Paddle probe (eager, graph) is compared with PyTorch's eager probe (the issue's
reference; TensorFlow's and JAX's are held to PyTorch's by their own files). The probes are test_parity_speech_ctc.py's
(that file run as a script, one framework and mode in its own process, its batches padded to a multiple of 64
frames), the session's ``speech_probes``: PyTorch's eager one is shared with the other speech parity files.
bf16 is to_static's only (Paddle's dygraph ``auto_cast`` is a no-op on a CPU, where the probes run: the engine
refuses eager bf16 there), against PyTorch's autocast, losses and log-probabilities at the bf16 tolerances.

Measured worst (2026-12-07, CPU), fp32 against PyTorch, eager and to_static alike (bitwise equal to each other on a
CPU): log-probabilities 3.5e-7 of the tolerance's scale, losses 9.8e-7 relative, gradients 9.2e-6 (blocks.1.norm2
.gamma), accumulated 9.0e-6, trained weights 1.4e-4 (blocks.0.attn.q.kernel), CTC alone 6.7e-8; bf16: outputs
5.6e-3 (0.18 of its tolerance), losses 0.35u. About 35 to 105 s on two busy cores (five probes, two at a time).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bakeoff.core import registry
from parity_checks import Mode, Probes, check_gradients, check_losses, check_outputs
from test_parity_speech_ctc import DATA, STEPS, SpeechPortParity

PADDLE = (Mode("paddle"), Mode("paddle", "graph"))
TORCH = Mode("torch")
BF16 = (Mode("paddle", "graph", "bf16"), Mode("torch", precision="bf16"))  # Paddle's AMP casts on a CPU in graph only
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not all(registry.installed(f) for f in ("paddle", "torch")),
                                 reason="Paddle speech parity needs paddle and torch installed")]


class TestPaddleSpeechParity(SpeechPortParity):
    """Every Paddle fp32 probe against PyTorch's eager one (test_parity_speech_ctc.py); bf16 is this file's own test
    below."""

    PORT = "paddle"
    MODES = (*PADDLE, *BF16, TORCH)  # the slow probes first


def _probe_shapes() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The (batch, frames) shapes the graph probe's step meets, in order (bakeoff.trial.parity_probe.probe: batch 16,
    seed 0, epoch 0), framework-free: its gradient checks' ACCUM micro-batches and their merged batch, then the
    training batches."""
    from bakeoff.core.spec import RunSpec
    from bakeoff.trial.parity_probe import ACCUM

    wl = registry.workload("speech_ctc")
    data = wl.load_data(RunSpec(workload="speech_ctc", framework="paddle", preset="tiny", max_steps=STEPS, data=DATA))
    micro = list(itertools.islice(wl.batches(data.train, 16 // ACCUM, 0, 0), ACCUM))
    train = itertools.islice(wl.batches(data.train, 16, 0, 0), STEPS)
    return [b["features"].shape[:2] for b in (*micro, wl.merge(micro))], [b["features"].shape[:2] for b in train]


@pytest.fixture(scope="module")
def probes(speech_probes: Probes) -> dict[Mode, dict[str, np.ndarray]]:
    speech_probes.prefetch([("speech_ctc", m) for m in TestPaddleSpeechParity.MODES])
    return {m: speech_probes.get("speech_ctc", m) for m in TestPaddleSpeechParity.MODES}


def test_to_static_step_builds_once_per_batch_shape(probes):
    # Speech batches are padded to their own longest utterance: to_static translates the step's forward and loss
    # into a new program for each new (batch, frames) shape, as jax.jit and tf.function retrace, and reuses it for a
    # shape it has seen. Unlike JAX's engine, the gradient checks run before training go through the same program
    # cache as the training step, so their shapes are built before step 1.
    graph = probes[Mode("paddle", "graph")]
    before, train = _probe_shapes()
    seen = set(before)
    new = []
    for shape in train:
        new.append(shape not in seen)
        seen.add(shape)
    builds = graph["graph_builds"]
    assert builds[0] == len(set(before)) and np.array_equal(np.diff(builds), new), (builds, before, train)
    assert np.all(probes[Mode("paddle")]["graph_builds"] == 0)  # eager: no step program


def test_bf16_to_static_equal_pytorch_autocast_and_in_force(probes):
    a, b = probes[BF16[0]], probes[BF16[1]]
    assert np.abs(a["outputs"] - probes[Mode("paddle", "graph")]["outputs"]).max() > 1e-4  # bf16 really ran
    for which in ("outputs", "outputs_perturbed"):
        check_outputs(a, b, "bf16", which)
    check_losses(a["losses"], b["losses"], "bf16")
    check_losses(a["losses_accum"], b["losses_accum"], "bf16")


def test_eager_and_to_static_paddle_agree(probes):
    eager, graph = probes[Mode("paddle")], probes[Mode("paddle", "graph")]
    check_outputs(graph, eager, "fp32", "outputs_perturbed")
    check_losses(graph["losses"], eager["losses"], "fp32")
    check_gradients(graph, eager)
