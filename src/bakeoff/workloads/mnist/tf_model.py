"""MNIST CNN in TensorFlow, built from Keras 3 layers on the TensorFlow backend (NHWC, Keras' native layout).

Keras layers, custom ``GradientTape`` loop in the engine (no ``model.fit``), as for the other workloads. The
canonical weights are Keras' own layouts, so get/set weights move arrays unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bakeoff.core.workload import Weights  # noqa: E402


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

    def call(self, images: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = images[..., tf.newaxis]  # (B, 28, 28, 1)
        x = self.pool1(self.conv1(x))  # (B, 13, 13, c1)
        x = self.pool2(self.conv2(x))  # (B, 5, 5, c2)
        return self.dense(self.drop(self.flatten(x), training=training))  # (B, 10) logits; (H, W, C) order


class MnistCNN:
    """ModelImpl for TensorFlow."""

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = device
        self.module: MnistCNNNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = MnistCNNNet(self.config)
        size = self.config["image_size"]
        self.module(tf.zeros((1, size, size)))  # create the variables
        self.set_weights(weights)

    def loss(self, batch: Mapping[str, tf.Tensor], training: bool = True) -> tuple[tf.Tensor, tf.Tensor]:
        logits = tf.cast(self.module(batch["images"], training=training), tf.float32)  # loss in fp32 (mixed too)
        labels = batch["labels"]
        summed = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        return summed, tf.cast(tf.shape(labels)[0], summed.dtype)

    def outputs(self, batch: Mapping[str, tf.Tensor]) -> tf.Tensor:
        return tf.nn.softmax(tf.cast(self.module(batch["images"], training=False), tf.float32), -1)

    def trainable(self) -> list[tf.Variable]:
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
