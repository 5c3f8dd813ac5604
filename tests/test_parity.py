"""Fairness, proven, for every workload: the PyTorch and TensorFlow models compute the same function and train alike.

One declarative harness: each workload row names its exact parameter count and output shape; the same checks
run for all of them. Each framework runs in its own process (`python -m bakeoff.parity`), through the real engine
and model code, with dropout off and fp32. speech_ctc has its own probe (its micro-batches are padded to
different lengths) in tests/test_parity_speech_ctc.py.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bakeoff import registry

FRAMEWORKS = ("torch", "tensorflow")


@dataclasses.dataclass(frozen=True)
class Case:
    params: int  # tiny preset, counted by hand below
    output_shape: tuple[int, ...]  # of the outputs on the first 64 test examples


CASES = {
    # 4000·64 tokens + 128·64 positions + 2 blocks × (4·(64·64+64) + 2·2·64 + 64·128+128 + 128·64+64) + head 64+1
    "text_classifier": Case(331_201, (64,)),
    # 2 blocks × (4·(64·64+64) attention + 2·2·64 LayerNorms + 64·128+128 + 128·64+64 FFN) + head 64·64+64
    "autoencoder": Case(71_104, (64, 32, 64)),
    # conv1 3·3·1·8+8 = 80, conv2 3·3·8·16+16 = 1168, dense (5·5·16)·10+10 = 4010; outputs: class probabilities
    "mnist": Case(5_258, (64, 10)),
}


def _probe(tmp: Path, workload: str, framework: str, execution: str = "eager") -> dict[str, np.ndarray]:
    out = tmp / f"{workload}-{framework}-{execution}.npz"
    subprocess.run([sys.executable, "-m", "bakeoff.parity", workload, framework, str(out), "--steps", "6",
                    "--execution", execution], check=True, capture_output=True, timeout=600)
    return dict(np.load(out))


@pytest.fixture(scope="module", params=list(CASES))
def probes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not all(registry.installed(f) for f in FRAMEWORKS):
        pytest.skip("parity needs both torch and tensorflow installed")
    tmp = tmp_path_factory.mktemp(request.param)
    return {"workload": request.param, "tmp": tmp, **{fw: _probe(tmp, request.param, fw) for fw in FRAMEWORKS}}


def test_parameter_counts_equal_and_exact(probes):
    workload = registry.workload(probes["workload"])
    canonical = sum(v.size for v in workload.init_weights(workload.config("tiny"), 0).values())
    assert canonical == CASES[probes["workload"]].params
    assert int(probes["torch"]["num_params"]) == int(probes["tensorflow"]["num_params"]) == canonical


def test_canonical_weights_round_trip_exactly(probes):
    for fw in FRAMEWORKS:
        assert bool(probes[fw]["roundtrip_same_keys"])
        assert float(probes[fw]["roundtrip_max_err"]) == 0.0


@pytest.mark.parametrize("which", ["outputs", "outputs_perturbed"])
def test_forward_outputs_equal_with_copied_weights(probes, which):
    # Perturbed weights (non-zero biases, non-unit LayerNorm) exercise every canonical-name mapping and layout.
    a, b = probes["torch"][which], probes["tensorflow"][which]
    assert a.shape == b.shape == CASES[probes["workload"]].output_shape
    assert np.abs(a - b).max() <= 1e-5
    assert np.ptp(a) > 1e-3  # the outputs really vary across examples: the check is not vacuous


def test_training_losses_equal_every_step(probes):
    a, b = probes["torch"]["losses"], probes["tensorflow"]["losses"]
    assert a.shape == b.shape == (6,)
    rel = np.abs(a - b) / np.abs(a)
    assert rel.max() <= 1e-4, f"per-step relative differences {rel}"
    assert np.abs(np.diff(a)).max() > 1e-3  # the weights really moved between steps


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_gradient_accumulation_is_exact(probes, framework):
    # 4 micro-batches of 4 against the one batch of 16 they make up, in each framework
    assert float(probes[framework]["grad_accum_max_rel_err"]) <= 1e-5


def test_tf_graph_mode_trains_like_eager(probes):
    graph = _probe(probes["tmp"], probes["workload"], "tensorflow", "graph")
    eager = probes["tensorflow"]["losses"]
    assert (np.abs(graph["losses"] - eager) / eager).max() <= 1e-4
