"""MNIST CNN in Keras 3, backend-agnostic (``keras.layers``, ``keras.ops``; the backend is ``KERAS_BACKEND``'s).

The layers of :mod:`.tf_model`, channels-last (Keras' default ``data_format``; on the torch backend Keras
transposes to NCHW inside each convolution and pooling, which is Keras' cost and is measured as such). The
canonical weights are Keras' own layouts, so get/set weights move arrays unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
from keras import ops

from bakeoff.core.workload import Weights


class MnistCNNNet(keras.Model):
    def __init__(self, cfg: Mapping[str, Any]) -> None:
        super().__init__()
        c1, c2 = cfg["filters"]
        k = cfg["kernel_size"]
        self.conv1 = keras.layers.Conv2D(c1, k, activation="relu")  # valid padding, stride 1, channels-last
        self.conv2 = keras.layers.Conv2D(c2, k, activation="relu")
        self.pool1, self.pool2 = keras.layers.MaxPooling2D(2), keras.layers.MaxPooling2D(2)
        self.flatten = keras.layers.Flatten()
        self.drop = keras.layers.Dropout(cfg["dropout"])
        self.dense = keras.layers.Dense(cfg["num_classes"])

    def call(self, images: Any, training: bool = False) -> Any:
        x = ops.expand_dims(images, -1)  # (B, 28, 28, 1)
        x = self.pool1(self.conv1(x))  # (B, 13, 13, c1)
        x = self.pool2(self.conv2(x))  # (B, 5, 5, c2)
        return self.dense(self.drop(self.flatten(x), training=training))  # (B, 10) logits; (H, W, C) order

    def summed_loss(self, labels: Any, logits: Any) -> tuple[Any, Any]:
        """(summed cross-entropy, example count), in fp32 whatever the compute dtype."""
        per_example = ops.sparse_categorical_crossentropy(labels, ops.cast(logits, "float32"), from_logits=True)
        return ops.sum(per_example), ops.cast(ops.shape(labels)[0], "float32")

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None, sample_weight: Any = None,
                     training: bool = True) -> Any:
        """What Keras' train step minimises: the mean of :meth:`summed_loss` over the batch."""
        summed, count = self.summed_loss(y, y_pred)
        return summed / count


class MnistCNN:
    """ModelImpl for Keras 3 on any backend."""

    input_key = "images"  # the batch entry the engine passes Keras as x (labels are y)

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = device
        self.module: MnistCNNNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = MnistCNNNet(self.config)
        size = self.config["image_size"]
        self.module(keras.KerasTensor((1, size, size), "float32"))  # create the variables, symbolically
        self.set_weights(weights)

    def loss(self, batch: Mapping[str, Any], training: bool = True) -> tuple[Any, Any]:
        return self.module.summed_loss(batch["labels"], self.module(batch["images"], training=training))

    def outputs(self, batch: Mapping[str, Any]) -> Any:
        return self.probabilities(self.module(batch["images"], training=False))

    def probabilities(self, logits: Any) -> Any:
        """Logits (B, 10) -> class probabilities, what :meth:`outputs` returns."""
        return ops.softmax(ops.cast(logits, "float32"), -1)

    def trainable(self) -> list[keras.Variable]:
        return list(self.module.trainable_variables)

    def num_params(self) -> int:
        return int(sum(np.prod(v.shape) for v in self.module.trainable_variables))

    def _layers(self) -> dict[str, keras.layers.Layer]:
        return {"conv1": self.module.conv1, "conv2": self.module.conv2, "dense": self.module.dense}

    def get_weights(self) -> Weights:
        w: Weights = {}
        for name, layer in self._layers().items():
            kernel, bias = layer.get_weights()
            w[f"{name}.kernel"], w[f"{name}.bias"] = np.asarray(kernel, np.float32), np.asarray(bias, np.float32)
        return w

    def set_weights(self, weights: Weights) -> None:
        for name, layer in self._layers().items():
            new = [np.asarray(weights[f"{name}.{part}"], np.float32) for part in ("kernel", "bias")]
            for part, value, current in zip(("kernel", "bias"), new, layer.get_weights(), strict=True):
                if value.shape != current.shape:
                    raise ValueError(f"weight {name}.{part}: expected shape {current.shape}, got {value.shape}")
            layer.set_weights(new)
