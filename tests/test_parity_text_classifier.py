"""Fairness, proven: the PyTorch and TensorFlow text classifiers compute the same function and train alike.

Each framework runs in its own process (`python -m bakeoff.parity`), through the real engine and model code.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bakeoff import registry
from bakeoff.workloads.text_classifier.workload import TextClassifierWorkload

FRAMEWORKS = ("torch", "tensorflow")
pytestmark = pytest.mark.skipif(not all(registry.installed(f) for f in FRAMEWORKS),
                                reason="parity needs both torch and tensorflow installed")


def _probe(tmp: Path, framework: str, execution: str = "eager") -> dict[str, np.ndarray]:
    out = tmp / f"{framework}-{execution}.npz"
    subprocess.run([sys.executable, "-m", "bakeoff.parity", "text_classifier", framework, str(out),
                    "--steps", "6", "--execution", execution], check=True, capture_output=True, timeout=600)
    return dict(np.load(out))


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, np.ndarray]]:
    tmp = tmp_path_factory.mktemp("parity")
    return {fw: _probe(tmp, fw) for fw in FRAMEWORKS}


def test_parameter_counts_equal_and_exact(probes):
    wl = TextClassifierWorkload()
    cfg = wl.config("tiny")
    canonical = sum(v.size for v in wl.init_weights(cfg, 0).values())
    # tiny: 4000·64 tokens + 128·64 positions + 2 blocks × (4·(64·64+64) + 2·2·64 + 64·128+128 + 128·64+64)
    #       + head 64+1
    assert canonical == 331201
    assert int(probes["torch"]["num_params"]) == int(probes["tensorflow"]["num_params"]) == canonical


def test_canonical_weights_round_trip_exactly(probes):
    for fw in FRAMEWORKS:
        assert bool(probes[fw]["roundtrip_same_keys"])
        assert float(probes[fw]["roundtrip_max_err"]) == 0.0


@pytest.mark.parametrize("which", ["outputs", "outputs_perturbed"])
def test_forward_outputs_equal_with_copied_weights(probes, which):
    a, b = probes["torch"][which], probes["tensorflow"][which]
    assert a.shape == b.shape == (64,)
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
    # 4 micro-batches of 4 (padded text) against the one batch of 16 they make up, in each framework
    assert float(probes[framework]["grad_accum_max_rel_err"]) <= 1e-5


def test_tf_graph_mode_trains_like_eager(probes, tmp_path):
    graph = _probe(tmp_path, "tensorflow", "graph")
    rel = np.abs(graph["losses"] - probes["tensorflow"]["losses"]) / probes["tensorflow"]["losses"]
    assert rel.max() <= 1e-4
