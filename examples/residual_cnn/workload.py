"""A small residual CNN with BatchNorm on MNIST: a workload kept outside bakeoff's package, in PyTorch and TensorFlow.

BatchNorm is where a port goes wrong with every test of its forward pass passing: its running statistics are
trained by the forward pass, not the optimizer, under a momentum each framework words the other way round
(PyTorch's ``momentum`` weighs the new batch, Keras' the old running value: Keras' 0.99 is PyTorch's 0.01), and
PyTorch keeps an unbiased running variance where Keras keeps the biased one. The model::

    images (B, 28, 28) ─► Conv 3×3 (c, valid, no bias) ─► BN ─► ReLU ─► MaxPool 2 ─► (B, 13, 13, c)
      ─► residual block: x + BN(Conv 3×3 (same)(ReLU(BN(Conv 3×3 (same)(x))))) ─► ReLU ─► MaxPool 2 ─► (B, 6, 6, c)
      ─► flatten (H, W, C order) ─► Dense(10) ─► softmax

Canonical weights are Keras' and channels-last: conv kernels ``(3, 3, in, out)``, the dense kernel's rows in the
order a channels-last ``(6, 6, c)`` map flattens to (PyTorch flattens ``(c, 6, 6)``: ``layouts.flattened``), and
each BatchNorm's ``gamma``,
``beta``, ``moving_mean`` and ``moving_variance`` — the running statistics are canonical weights too, because a
model moved between frameworks evaluates with them. They are not trainable: :meth:`num_params` leaves them out, and
``bakeoff parity`` compares them after training (with the trained weights), where an unconverted momentum shows.

Why no JAX port: bakeoff's JAX engine holds params only (a training step is a pure function of the params and
Adam's state), with no place for Flax's ``batch_stats`` collection, which a BatchNorm updates in the forward pass.
A port that kept the statistics elsewhere would not be the model the other two train; so this workload is
implemented in the two frameworks that can run it, and ``bakeoff parity`` compares those.

Data: the shipped MNIST subset (``bakeoff.data.images.load_mnist``), or the user's MNIST-format folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from bakeoff.core.spec import RunSpec
from bakeoff.core.workload import Batch, Dataset, Weights, Workload
from bakeoff.workloads.common.targets import halfway_from_majority

PRESETS: dict[str, dict[str, Any]] = {
    # A CPU demo: 8 channels, 4,162 trainable parameters; a 20-step run takes seconds.
    "tiny": dict(filters=8, bn_momentum=0.99, bn_epsilon=1e-3, learning_rate=3e-3),
}

# Test accuracy on the shipped subset's 1,000 test images (chance 0.10), measured: tiny, batch 32, seed 0, evaluated
# every 25 steps (125 an epoch; `bakeoff run --workload ... --eval-every 25`, PyTorch eager 2 epochs, TensorFlow
# graph 3). The two agree within 0.005 at every evaluation: 0.80 at step 100, first 0.9 at step 200 (0.926, 0.927),
# 0.92 at 250; TensorFlow, run to 375 steps, 0.947.
TARGETS = {"tiny": 0.9}

NUM_CLASSES = 10
FEATURES = 6  # the last map's height and width: 28 -> 26 (valid conv) -> 13 (pool) -> 13 (block) -> 6 (pool)
STATISTICS = ("moving_mean", "moving_variance")
"""A BatchNorm's running statistics, by their canonical (Keras') names: weights, but no optimizer trains them."""


class ResidualCNN(Workload):
    """Ten-class digit classification with a stem convolution and one residual block, each with BatchNorm."""

    name: ClassVar[str] = "residual_cnn"
    model_class: ClassVar[str] = "ResidualCNN"  # in torch_model.py and tf_model.py beside this file
    serving_inputs: ClassVar[dict[str, tuple[str | None, ...]]] = {"images": ("batch", None, None)}
    metric_name: ClassVar[str] = "accuracy"
    presets: ClassVar[tuple[str, ...]] = tuple(PRESETS)
    preset_configs: ClassVar[Mapping[str, Mapping[str, Any]]] = PRESETS
    targets: ClassVar[Mapping[str, float]] = TARGETS
    measured_targets: ClassVar[tuple[str, ...]] = ("tiny",)

    def config(self, preset: str, spec: RunSpec | None = None, data: Dataset | None = None) -> dict[str, Any]:
        cfg = self.preset_config(preset, spec)
        cfg["num_classes"] = NUM_CLASSES
        return cfg

    def load_data(self, spec: RunSpec) -> Dataset:
        from bakeoff.data.images import load_mnist

        self.config(spec.preset, spec)
        raw = load_mnist(spec.data_options)

        def split(images: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
            return {"images": images.astype(np.float32) / 255.0, "labels": labels}

        counts = np.bincount(raw.test_labels, minlength=NUM_CLASSES)
        majority = float(counts.max() / counts.sum())
        info: dict[str, Any] = {"source": raw.source, "majority_rate": majority}
        if spec.data_options.get("dir"):  # the user's files: the shipped subset's measured target says nothing
            info["target"] = halfway_from_majority(majority)
        return Dataset(train=split(raw.train_images, raw.train_labels), test=split(raw.test_images, raw.test_labels),
                       info=info, serving={"input": "(B, 28, 28) float32 pixels / 255",
                                           "output": "probability per class 0-9"})

    def init_weights(self, config: Mapping[str, Any], seed: int) -> Weights:
        # He-normal conv kernels (fan in 3·3·in: ReLU follows each), a Glorot-uniform dense kernel, zero bias;
        # BatchNorm gamma 1, beta 0, and its running statistics as Keras and PyTorch start them, mean 0, variance 1.
        rng = np.random.default_rng([seed, 20262])
        c = config["filters"]

        def conv(cin: int, cout: int) -> np.ndarray:
            return rng.normal(0, np.sqrt(2.0 / (9 * cin)), (3, 3, cin, cout)).astype(np.float32)

        def norm(prefix: str) -> Weights:
            return {f"{prefix}.gamma": np.ones(c, np.float32), f"{prefix}.beta": np.zeros(c, np.float32),
                    f"{prefix}.moving_mean": np.zeros(c, np.float32),
                    f"{prefix}.moving_variance": np.ones(c, np.float32)}

        flat = FEATURES * FEATURES * c
        limit = np.sqrt(6.0 / (flat + NUM_CLASSES))
        return {"stem.kernel": conv(1, c), **norm("stem.bn"),
                "block.conv1.kernel": conv(c, c), **norm("block.bn1"),
                "block.conv2.kernel": conv(c, c), **norm("block.bn2"),
                "head.kernel": rng.uniform(-limit, limit, (flat, NUM_CLASSES)).astype(np.float32),
                "head.bias": np.zeros(NUM_CLASSES, np.float32)}

    def num_params(self, config: Mapping[str, Any]) -> int:
        """Trainable scalars: the canonical weights but the BatchNorms' running statistics."""
        weights = self.init_weights(config, 0)
        return sum(int(w.size) for name, w in weights.items() if name.rpartition(".")[2] not in STATISTICS)

    def metric(self, outputs: np.ndarray, split: Mapping[str, np.ndarray]) -> float:
        return float((outputs.argmax(axis=1) == split["labels"]).mean())

    def units_per_example(self, batch: Batch) -> dict[str, float]:
        return {}
