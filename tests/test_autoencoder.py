"""The autoencoder workload's data and sizes; its cross-framework parity runs in tests/test_parity.py."""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.core.spec import RunSpec
from bakeoff.data import DataError
from bakeoff.workloads.autoencoder.workload import AutoencoderWorkload, make_sequences


def test_paper_preset_parameter_count():
    wl = AutoencoderWorkload()
    # paper (the snippet: d 128, FFN 2048): 2 × (4·(128·128+128) + 4·128 + 128·2048+2048 + 2048·128+128)
    #                                       + 128·128+128
    assert sum(v.size for v in wl.init_weights(wl.config("paper"), 0).values()) == 1202560


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
