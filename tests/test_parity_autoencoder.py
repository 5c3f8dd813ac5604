"""Fairness, proven: the PyTorch and TensorFlow Transformer autoencoders compute the same function and train alike.

Each framework runs in its own process (`python -m bakeoff.parity`), through the real engine and model code. The
data tests at the end need no framework.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bakeoff import registry
from bakeoff.data import DataError
from bakeoff.spec import RunSpec
from bakeoff.workloads.autoencoder.workload import AutoencoderWorkload, make_sequences

FRAMEWORKS = ("torch", "tensorflow")


def _probe(tmp: Path, framework: str, execution: str = "eager") -> dict[str, np.ndarray]:
    out = tmp / f"{framework}-{execution}.npz"
    subprocess.run([sys.executable, "-m", "bakeoff.parity", "autoencoder", framework, str(out),
                    "--steps", "6", "--execution", execution], check=True, capture_output=True, timeout=600)
    return dict(np.load(out))


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, np.ndarray]]:
    if not all(registry.installed(f) for f in FRAMEWORKS):
        pytest.skip("parity needs both torch and tensorflow installed")
    tmp = tmp_path_factory.mktemp("parity")
    return {fw: _probe(tmp, fw) for fw in FRAMEWORKS}


def test_parameter_counts_equal_and_exact(probes):
    wl = AutoencoderWorkload()
    canonical = sum(v.size for v in wl.init_weights(wl.config("tiny"), 0).values())
    # tiny (d 64, FFN 128): 2 blocks × (4·(64·64+64) attention + 2·2·64 LayerNorms + 64·128+128 + 128·64+64 FFN)
    #                       + head 64·64+64 = 2 × 33472 + 4160
    assert canonical == 71104
    assert int(probes["torch"]["num_params"]) == int(probes["tensorflow"]["num_params"]) == canonical
    # paper (the snippet: d 128, FFN 2048): 2 × (4·(128·128+128) + 4·128 + 128·2048+2048 + 2048·128+128)
    #                                       + 128·128+128
    assert sum(v.size for v in wl.init_weights(wl.config("paper"), 0).values()) == 1202560


def test_canonical_weights_round_trip_exactly(probes):
    for fw in FRAMEWORKS:
        assert bool(probes[fw]["roundtrip_same_keys"])
        assert float(probes[fw]["roundtrip_max_err"]) == 0.0


@pytest.mark.parametrize("which", ["outputs", "outputs_perturbed"])
def test_forward_outputs_equal_with_copied_weights(probes, which):
    a, b = probes["torch"][which], probes["tensorflow"][which]
    assert a.shape == b.shape == (64, 32, 64)  # (examples, T, d_model) reconstructions
    assert np.abs(a - b).max() <= 1e-5
    assert np.ptp(a) > 1e-3  # the outputs really vary: the check is not vacuous


def test_training_losses_equal_every_step(probes):
    a, b = probes["torch"]["losses"], probes["tensorflow"]["losses"]
    assert a.shape == b.shape == (6,)
    rel = np.abs(a - b) / np.abs(a)
    assert rel.max() <= 1e-4, f"per-step relative differences {rel}"
    assert np.abs(np.diff(a)).max() > 1e-3  # the weights really moved between steps


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_gradient_accumulation_is_exact(probes, framework):
    # 4 micro-batches of 4 sequences against the one batch of 16 they make up, in each framework
    assert float(probes[framework]["grad_accum_max_rel_err"]) <= 1e-5


def test_tf_graph_mode_trains_like_eager(probes, tmp_path):
    graph = _probe(tmp_path, "tensorflow", "graph")
    rel = np.abs(graph["losses"] - probes["tensorflow"]["losses"]) / probes["tensorflow"]["losses"]
    assert rel.max() <= 1e-4


# --- data (no framework) ------------------------------------------------------------------------------------


def test_sequences_are_deterministic_per_seed_and_structured():
    a, b = make_sequences(64, 32, 128, 16, seed=3), make_sequences(64, 32, 128, 16, seed=3)
    assert a.shape == (64, 32, 128) and a.dtype == np.float32
    assert np.array_equal(a, b)
    assert not np.allclose(a, make_sequences(64, 32, 128, 16, seed=4))
    assert a.std() == pytest.approx(1.0, abs=1e-5) and abs(float(a.mean())) < 0.1
    # Smooth in time: neighbouring steps are strongly correlated (white noise would give ≈ 0) ...
    lag1 = np.corrcoef(a[:, 1:].ravel(), a[:, :-1].ravel())[0, 1]
    assert lag1 > 0.8
    # ... and low-rank across features: 16 latent signals span (almost) all of the 128 channels' variance.
    singular = np.linalg.svd(a.reshape(-1, 128), compute_uv=False)
    assert (singular[:16] ** 2).sum() / (singular ** 2).sum() > 0.999


def test_load_data_shapes_per_preset_and_seed_option():
    wl = AutoencoderWorkload()
    data = wl.load_data(RunSpec(workload="autoencoder", framework="torch", max_steps=1))
    assert data.train["inputs"].shape == (2048, 32, 64) and data.test["inputs"].shape == (256, 32, 64)
    assert 0.9 < data.info["baseline_mse"] < 1.1  # predicting zeros
    again = wl.load_data(RunSpec(workload="autoencoder", framework="tensorflow", max_steps=1))
    assert np.array_equal(data.test["inputs"], again.test["inputs"])  # the same for every framework
    other = wl.load_data(RunSpec(workload="autoencoder", framework="torch", max_steps=1, data={"seed": "1"}))
    assert not np.allclose(data.test["inputs"], other.test["inputs"])
    with pytest.raises(DataError, match="unknown data option.*train.*accepted: seed"):
        wl.load_data(RunSpec(workload="autoencoder", framework="torch", max_steps=1, data={"train": "x.csv"}))
