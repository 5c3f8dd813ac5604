"""Fairness, proven, for every workload: the PyTorch and TensorFlow models compute the same function and train
alike, in the modes trials are timed in.

One declarative harness: each workload row names its exact parameter count, output shape and the probes it runs
beyond eager fp32 (compiled modes, bf16); the tests, checks and tolerances are tests/parity_checks.py's
(``PortParity``, shared with the JAX and Paddle files), the same for every workload. Each probe is one framework
in one mode, in its own process (`python -m bakeoff.trial.parity_probe`), through the real engine and model code,
dropout off. speech_ctc has its own file
(tests/test_parity_speech_ctc.py: its micro-batches are padded to different lengths and CTC is checked on its own).

Which compiled checks run where, to keep CI time modest (each torch.compile costs ~30 s on 2 cores): tf.function
for every workload; torch.compile and XLA for the text classifier and MNIST; bf16 eagerly for the text classifier
and the autoencoder, compiled on both sides for MNIST.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from bakeoff.core import registry
from parity_checks import EAGER, Mode, PortParity, Probes

pytestmark = pytest.mark.skipif(not all(registry.installed(m.framework) for m in EAGER),
                                reason="parity needs both torch and tensorflow installed")


@dataclasses.dataclass(frozen=True)
class Case:
    params: int  # tiny preset, counted by hand below
    output_shape: tuple[int, ...]  # of the outputs on the first 64 test examples
    modes: tuple[Mode, ...]  # the probes compared, eager fp32 in both frameworks always among them


CASES = {
    # 4000·64 tokens + 128·64 positions + 2 blocks × (4·(64·64+64) + 2·2·64 + 64·128+128 + 128·64+64) + head 64+1
    "text_classifier": Case(331_201, (64,), (*EAGER, Mode("tensorflow", "graph"), Mode("tensorflow", "xla"),
                                             Mode("torch", "graph"), Mode("torch", precision="bf16"),
                                             Mode("tensorflow", precision="bf16"))),
    # 2 blocks × (4·(64·64+64) attention + 2·2·64 LayerNorms + 64·128+128 + 128·64+64 FFN) + head 64·64+64
    "autoencoder": Case(71_104, (64, 32, 64), (*EAGER, Mode("tensorflow", "graph"), Mode("torch", precision="bf16"),
                                               Mode("tensorflow", precision="bf16"))),
    # conv1 3·3·1·8+8 = 80, conv2 3·3·8·16+16 = 1168, dense (5·5·16)·10+10 = 4010; outputs: class probabilities
    "mnist": Case(5_258, (64, 10), (*EAGER, Mode("tensorflow", "graph"), Mode("tensorflow", "xla"),
                                    Mode("torch", "graph"), Mode("torch", "graph", "bf16"),
                                    Mode("tensorflow", "graph", "bf16"))),
}


class TestParity(PortParity):
    """Every PyTorch probe against every TensorFlow probe of the same precision; both frameworks' probes checked
    on their own (they are the other files' references)."""

    PORT, REFERENCES = "torch", ()
    MODES = {w: case.modes for w, case in CASES.items()}
    PARAMS = {w: case.params for w, case in CASES.items()}
    OUTPUT_SHAPES = {w: case.output_shape for w, case in CASES.items()}
    # Across frameworks the batch's gradients; each probe's accumulated ones are held to its batch's
    # (test_gradient_accumulation_is_exact).
    GRADIENTS = ("grad",)

    @classmethod
    def fp32_of(cls, mode: Mode) -> Mode:
        """Eager fp32, the probe every workload runs in both frameworks."""
        return Mode(mode.framework)

    @classmethod
    def cases(cls) -> dict[str, tuple[str, list[Any]]]:
        # The round trip once per workload, of both eager probes (the other files: once per probe of their port).
        round_trips = [(w, EAGER) for w in cls.MODES]
        return {**super().cases(), "test_canonical_weights_round_trip_exactly": ("workload,modes", round_trips)}


@pytest.fixture(scope="module")
def probes(parity_probes: Probes) -> Probes:
    parity_probes.prefetch(TestParity.all_probes())
    return parity_probes


def _ids(value: object) -> str:
    return str(value)


@pytest.mark.parametrize(("workload", "mode"), [p for p in TestParity.all_probes() if p[1].execution != "eager"],
                         ids=_ids)
def test_compiled_step_builds_its_graphs_once(probes, workload, mode):
    # The whole training step is compiled in both frameworks. tf.function / XLA: the first step traces it once.
    # torch.compile: the forward pass (and its backward) for this batch shape was compiled by the gradient checks
    # before training, so the first step compiles the update: the gradients' division and Adam's step, 2 graphs
    # (Optimizer.step breaks the graph around itself). Later steps, of the same shapes, build nothing.
    builds = probes.get(workload, mode)["graph_builds"]
    assert builds[1] - builds[0] == {"torch": 2, "tensorflow": 1}[mode.framework], builds
    assert np.all(builds[1:] == builds[1]), builds
