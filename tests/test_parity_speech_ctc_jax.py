"""Fairness, proven, for JAX on speech: the Flax CTC acoustic model computes the same function as the PyTorch and
TensorFlow ones and trains alike, eagerly and under ``jax.jit``, with tests/parity_checks.py's checks and tolerances.

The checks are test_parity_speech_ctc.py's: parameter counts; the canonical weights' round trip; per-frame
log-probabilities with copied weights; padding never changing a real frame; gradient accumulation exact across
micro-batches padded to different lengths; every training loss, gradient and trained tensor; every tensor moved;
CTC alone on fixed logits. Each JAX probe (eager, jit) is compared with PyTorch's and TensorFlow's eager probe.
The probes are test_parity_speech_ctc.py's (that file run as a script, one framework and mode in its own process,
its batches padded to a multiple of 64 frames), the session's ``speech_probes``: the PyTorch and TensorFlow eager
ones are run once for both files.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bakeoff.core import registry
from parity_checks import EAGER, Mode, Probes, check_gradients, check_losses, check_outputs
from test_parity_speech_ctc import DATA, STEPS, SpeechPortParity

JAX = (Mode("jax"), Mode("jax", "graph"))
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not all(registry.installed(f) for f in ("jax", "torch", "tensorflow")),
                                 reason="JAX speech parity needs jax, torch and tensorflow installed")]


class TestJaxSpeechParity(SpeechPortParity):
    """Every JAX probe against each other framework's eager probe (test_parity_speech_ctc.py)."""

    PORT = "jax"
    MODES = (*JAX, *EAGER)  # the slow probes first
    CTC_LABELS = ("ctc", "ctc_sparse")  # TensorFlow's dense labels, and sparse as on CPU


def _train_batches() -> list[dict[str, np.ndarray]]:
    """The probe's training batches (bakeoff.trial.parity_probe.probe: batch 16, seed 0, epoch 0), framework-free."""
    from bakeoff.core.spec import RunSpec

    wl = registry.workload("speech_ctc")
    data = wl.load_data(RunSpec(workload="speech_ctc", framework="jax", preset="tiny", max_steps=STEPS, data=DATA))
    return list(itertools.islice(wl.batches(data.train, 16, 0, 0), STEPS))


@pytest.fixture(scope="module")
def probes(speech_probes: Probes) -> dict[Mode, dict[str, np.ndarray]]:
    speech_probes.prefetch([("speech_ctc", m) for m in TestJaxSpeechParity.MODES])
    return {m: speech_probes.get("speech_ctc", m) for m in TestJaxSpeechParity.MODES}


def test_jitted_step_builds_once_per_batch_shape(probes):
    # Speech batches are padded to their own longest utterance: jax.jit traces and compiles the step again for
    # each new length, as tf.function retraces, and reuses it for a length it has seen (the gradient checks
    # before training ran a separately jitted function).
    graph = probes[Mode("jax", "graph")]
    frames, builds = [b["features"].shape[1] for b in _train_batches()], graph["graph_builds"]
    new = [frames[i] not in frames[:i] for i in range(STEPS)]
    assert builds[0] == 0 and np.array_equal(np.diff(builds), new), (builds, frames)
    assert np.all(probes[Mode("jax")]["graph_builds"] == 0)  # eager: no step graph


def test_eager_and_jitted_jax_agree(probes):
    eager, graph = probes[Mode("jax")], probes[Mode("jax", "graph")]
    check_outputs(graph, eager, "fp32", "outputs_perturbed")
    check_losses(graph["losses"], eager["losses"], "fp32")
    check_gradients(graph, eager)

