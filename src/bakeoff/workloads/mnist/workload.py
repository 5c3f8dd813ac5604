"""MNIST digit classifier (small CNN): the framework-free half.

The classic Keras "simple MNIST convnet" shape::

    images (B, 28, 28) ─► Conv 3×3 (c1) ─► ReLU ─► MaxPool 2 ─► Conv 3×3 (c2) ─► ReLU ─► MaxPool 2
      ─► flatten (H, W, C order) ─► Dropout ─► Dense(10) ─► softmax

Convolutions are "valid" (no padding) and pooling floors, identically in both frameworks: 28 → 26 → 13 → 11 → 5.

Canonical layout is channels-last, Keras' own: conv kernels ``(kh, kw, in, out)``, and the dense kernel's rows in
the order a channels-last ``(H, W, C)`` feature map flattens to. The PyTorch model stays idiomatic (NCHW,
``Conv2d`` weights ``(out, in, kh, kw)``, ``flatten`` in ``(C, H, W)`` order) and converts in its get/set weights
— so neither framework pays a runtime transpose. Images are ``float32`` ``(N, 28, 28)`` in [0, 1]: one channel,
so each framework adds its channel axis where it wants it (a view, no copy).

Data: the shipped MNIST subset (see ``bakeoff/data/mnist/SOURCE.md``), or the user's MNIST-format folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from bakeoff.core.spec import RunSpec, SpecError
from bakeoff.core.workload import Batch, Dataset, Weights, Workload
from bakeoff.workloads.common.targets import halfway_from_majority

PRESETS: dict[str, dict[str, Any]] = {
    # CPU demo size: 8 and 16 filters, 5,258 parameters.
    "tiny": dict(filters=(8, 16), kernel_size=3, dropout=0.1, learning_rate=3e-3),
    # The Keras example "Simple MNIST convnet" (32 and 64 filters, Dropout 0.5, Adam 1e-3): 34,826 parameters.
    "paper": dict(filters=(32, 64), kernel_size=3, dropout=0.5, learning_rate=1e-3),
}

# Test accuracy on the shipped subset's 1000 test images (chance 0.10), set from measured runs (batch 32, seed 0,
# `bakeoff run --workload mnist --max-epochs 3 --eval-every 20`, 125 steps an epoch):
#   tiny, every framework and mode: 0.57 at step 20, 0.90 at 100-120, 0.93 at 140-180, then 0.95-0.96 by 375
#   (torch 0.958, TF 0.959); torch and TF curves agree to ±0.01 at every evaluation.
#   paper: 0.90 at step 125, 0.94-0.96 at 300-375 (torch and TF eager), 0.968 at 500, 0.97-0.973 from 750 to 1250
#   (TF graph, 10 epochs).
TARGETS = {"tiny": 0.93, "paper": 0.96}

IMAGE_SIZE = 28
NUM_CLASSES = 10


def feature_size(config: Mapping[str, Any]) -> int:
    """Height (= width) of the last feature map: each valid conv loses ``k - 1``, each pool halves (floor)."""
    size = config["image_size"]
    for _ in config["filters"]:
        size = (size - config["kernel_size"] + 1) // 2
    return size


class MnistWorkload(Workload):
    """Ten-class handwritten-digit classification with a two-convolution CNN."""

    name: ClassVar[str] = "mnist"
    model_class: ClassVar[str] = "MnistCNN"  # in each framework's model file beside this one
    serving_inputs: ClassVar[dict[str, tuple[str | None, ...]]] = {"images": ("batch", None, None)}
    metric_name: ClassVar[str] = "accuracy"
    presets: ClassVar[tuple[str, ...]] = tuple(PRESETS)
    preset_configs: ClassVar[Mapping[str, Mapping[str, Any]]] = PRESETS
    targets: ClassVar[Mapping[str, float]] = TARGETS
    measured_targets: ClassVar[tuple[str, ...]] = ("tiny", "paper")

    def config(self, preset: str, spec: RunSpec | None = None, data: Dataset | None = None) -> dict[str, Any]:
        cfg = self.preset_config(preset, spec)  # filters as a list: JSON-friendly (the trial records the config)
        if len(cfg["filters"]) != 2:
            raise SpecError(f"config filters={cfg['filters']} for {self.name}: give two convolutions' channels, "
                            "e.g. filters=16,32")
        cfg["image_size"] = IMAGE_SIZE if data is None else int(data.train["images"].shape[1])
        cfg["num_classes"] = NUM_CLASSES
        if feature_size(cfg) < 1:
            raise SpecError(f"config kernel_size={cfg['kernel_size']} for {self.name}: leaves no feature map of a "
                            f"{cfg['image_size']}-pixel image after two convolutions and poolings")
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
                       info=info,
                       serving={"input": "(B, 28, 28) float32 pixels / 255", "output": "probability per class 0-9"})

    def init_weights(self, config: Mapping[str, Any], seed: int) -> Weights:
        # Glorot-uniform kernels (Keras' default; a conv's fans are kh·kw·in and kh·kw·out); biases 0.
        rng = np.random.default_rng([seed, 20242])
        k = config["kernel_size"]

        def glorot(shape: tuple[int, ...], fan_in: int, fan_out: int) -> np.ndarray:
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            return rng.uniform(-limit, limit, size=shape).astype(np.float32)

        w: Weights = {}
        channels = 1
        for i, filters in enumerate(config["filters"], start=1):
            w[f"conv{i}.kernel"] = glorot((k, k, channels, filters), k * k * channels, k * k * filters)
            w[f"conv{i}.bias"] = np.zeros(filters, np.float32)
            channels = filters
        flat = feature_size(config) ** 2 * channels
        w["dense.kernel"] = glorot((flat, config["num_classes"]), flat, config["num_classes"])
        w["dense.bias"] = np.zeros(config["num_classes"], np.float32)
        return w

    def metric(self, outputs: np.ndarray, split: Mapping[str, np.ndarray]) -> float:
        # outputs: (N, 10) class probabilities.
        return float((outputs.argmax(axis=1) == split["labels"]).mean())

    def units_per_example(self, batch: Batch) -> dict[str, float]:
        return {}

    def flops_per_example(self, config: Mapping[str, Any]) -> float | None:
        # Forward: 2·(output pixels)·(k·k·in)·out per conv, 2·in·out for the dense layer. Training: the forward, the
        # weight gradients (as many again) and the input gradients (as many again) but the first conv's, whose
        # input is the data: 3× forward less that conv (torch's FlopCounterMode agrees: tests/test_flops.py).
        k, size, channels, forward, first = config["kernel_size"], config["image_size"], 1, 0, None
        for filters in config["filters"]:
            size -= k - 1
            conv = 2 * size * size * k * k * channels * filters
            forward, first = forward + conv, conv if first is None else first
            size, channels = size // 2, filters
        forward += 2 * size * size * channels * config["num_classes"]
        return float(3 * forward - (first or 0))
