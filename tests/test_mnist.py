"""The MNIST workload's data and sizes; its cross-framework parity runs in tests/test_parity.py."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from bakeoff.core.spec import RunSpec
from bakeoff.data import DataError
from bakeoff.data.images import load_mnist
from bakeoff.workloads.mnist.workload import MnistWorkload


def test_paper_preset_parameter_count():
    wl = MnistWorkload()
    # paper, the Keras example's 34,826: conv1 3·3·1·32+32 = 320, conv2 3·3·32·64+64 = 18496, dense 1600·10+10
    assert sum(v.size for v in wl.init_weights(wl.config("paper"), 0).values()) == 34826


# --- data (no framework) ------------------------------------------------------------------------------------


def test_shipped_subset_shapes_counts_and_order():
    wl = MnistWorkload()
    data = wl.load_data(RunSpec(workload="mnist", framework="torch", max_steps=1))
    assert data.train["images"].shape == (4000, 28, 28) and data.test["images"].shape == (1000, 28, 28)
    assert data.train["images"].dtype == np.float32 and data.train["labels"].dtype == np.int64
    assert data.train["images"].min() == 0.0 and data.train["images"].max() == 1.0
    assert np.bincount(data.train["labels"]).tolist() == [400] * 10
    assert np.bincount(data.test["labels"]).tolist() == [100] * 10
    assert data.test["labels"][:10].tolist() == [7, 1, 9, 7, 8, 0, 1, 9, 0, 2]  # the shipped order, pinned
    assert data.info["majority_rate"] == pytest.approx(0.1)
    again = wl.load_data(RunSpec(workload="mnist", framework="tensorflow", max_steps=1))
    assert all(np.array_equal(data.train[k], again.train[k]) for k in data.train)


def _write_idx(folder: Path, stem: str, array: np.ndarray) -> None:
    header = bytes([0, 0, 8, array.ndim]) + np.asarray(array.shape, ">i4").tobytes()
    (folder / f"{stem}.gz").write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes(), mtime=0))


def test_user_folder_of_idx_files(tmp_path):
    rng = np.random.default_rng(0)
    for split, n in (("train", 20), ("t10k", 10)):
        _write_idx(tmp_path, f"{split}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
        _write_idx(tmp_path, f"{split}-labels-idx1-ubyte", np.arange(n) % 10)
    data = load_mnist({"dir": str(tmp_path)})
    assert data.train_images.shape == (20, 28, 28) and data.test_labels.tolist() == list(range(10))
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match="missing t10k-labels-idx1-ubyte.gz"):
        load_mnist({"dir": str(tmp_path)})
    with pytest.raises(DataError, match="unknown data option.*train.*accepted: dir"):
        load_mnist({"train": "x.csv"})
