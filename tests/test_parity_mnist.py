"""Fairness, proven: the PyTorch (NCHW) and TensorFlow (NHWC) MNIST CNNs compute the same function and train alike.

Each framework runs in its own process (`python -m bakeoff.parity`), through the real engine and model code. The
data tests at the end need no framework.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bakeoff import registry
from bakeoff.data import DataError
from bakeoff.data.images import load_mnist
from bakeoff.spec import RunSpec
from bakeoff.workloads.mnist.workload import MnistWorkload

FRAMEWORKS = ("torch", "tensorflow")


def _probe(tmp: Path, framework: str, execution: str = "eager") -> dict[str, np.ndarray]:
    out = tmp / f"{framework}-{execution}.npz"
    subprocess.run([sys.executable, "-m", "bakeoff.parity", "mnist", framework, str(out),
                    "--steps", "6", "--execution", execution], check=True, capture_output=True, timeout=600)
    return dict(np.load(out))


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, np.ndarray]]:
    if not all(registry.installed(f) for f in FRAMEWORKS):
        pytest.skip("parity needs both torch and tensorflow installed")
    tmp = tmp_path_factory.mktemp("parity")
    return {fw: _probe(tmp, fw) for fw in FRAMEWORKS}


def test_parameter_counts_equal_and_exact(probes):
    wl = MnistWorkload()
    canonical = sum(v.size for v in wl.init_weights(wl.config("tiny"), 0).values())
    # tiny: conv1 3·3·1·8+8 = 80, conv2 3·3·8·16+16 = 1168, dense (5·5·16)·10+10 = 4010
    assert canonical == 5258
    assert int(probes["torch"]["num_params"]) == int(probes["tensorflow"]["num_params"]) == canonical
    # paper, the Keras example's 34,826: conv1 3·3·1·32+32 = 320, conv2 3·3·32·64+64 = 18496, dense 1600·10+10
    assert sum(v.size for v in wl.init_weights(wl.config("paper"), 0).values()) == 34826


def test_canonical_weights_round_trip_exactly(probes):
    for fw in FRAMEWORKS:
        assert bool(probes[fw]["roundtrip_same_keys"])
        assert float(probes[fw]["roundtrip_max_err"]) == 0.0


@pytest.mark.parametrize("which", ["outputs", "outputs_perturbed"])
def test_forward_outputs_equal_with_copied_weights(probes, which):
    # Equal outputs also prove the layouts: conv kernels transposed and the dense rows reordered from torch's
    # (C, H, W) flatten order to the canonical (H, W, C) one.
    a, b = probes["torch"][which], probes["tensorflow"][which]
    assert a.shape == b.shape == (64, 10)  # class probabilities
    assert np.allclose(a.sum(1), 1.0, atol=1e-5)
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
    # 4 micro-batches of 4 images against the one batch of 16 they make up, in each framework
    assert float(probes[framework]["grad_accum_max_rel_err"]) <= 1e-5


def test_tf_graph_mode_trains_like_eager(probes, tmp_path):
    graph = _probe(tmp_path, "tensorflow", "graph")
    rel = np.abs(graph["losses"] - probes["tensorflow"]["losses"]) / probes["tensorflow"]["losses"]
    assert rel.max() <= 1e-4


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
