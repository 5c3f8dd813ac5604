"""The residual CNN in TensorFlow, built from Keras 3 layers on the TensorFlow backend (NHWC, the canonical layout).

Keras' layers hold the canonical tensors as they are — conv kernels ``(3, 3, in, out)``, each
``BatchNormalization``'s ``gamma``, ``beta``, ``moving_mean``, ``moving_variance`` — so weights move unchanged.
The BatchNorms' momentum (0.99, Keras' default and the canonical convention) and epsilon (1e-3) are the
workload's, passed explicitly so that the PyTorch port's conversion has one source.
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


class ResidualCNNNet(keras.Model):
    def __init__(self, cfg: Mapping[str, Any]) -> None:
        super().__init__()
        c = cfg["filters"]

        def norm() -> keras.layers.BatchNormalization:
            return keras.layers.BatchNormalization(momentum=cfg["bn_momentum"], epsilon=cfg["bn_epsilon"])

        self.stem, self.stem_bn = keras.layers.Conv2D(c, 3, use_bias=False), norm()  # valid padding, stride 1
        self.conv1, self.bn1 = keras.layers.Conv2D(c, 3, padding="same", use_bias=False), norm()
        self.conv2, self.bn2 = keras.layers.Conv2D(c, 3, padding="same", use_bias=False), norm()
        self.pool1, self.pool2 = keras.layers.MaxPooling2D(2), keras.layers.MaxPooling2D(2)
        self.flatten = keras.layers.Flatten()
        self.head = keras.layers.Dense(cfg["num_classes"])

    def call(self, images: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = images[..., tf.newaxis]  # (B, 28, 28, 1)
        x = self.pool1(tf.nn.relu(self.stem_bn(self.stem(x), training=training)))  # (B, 13, 13, c)
        y = tf.nn.relu(self.bn1(self.conv1(x), training=training))
        x = self.pool2(tf.nn.relu(x + self.bn2(self.conv2(y), training=training)))  # the block, pooled: (B, 6, 6, c)
        return self.head(self.flatten(x))  # (B, 10) logits; (H, W, C) order


class ResidualCNN:
    """ModelImpl for TensorFlow."""

    NORM = ["gamma", "beta", "moving_mean", "moving_variance"]  # BatchNormalization.get_weights() order
    LAYERS = {"stem": ("stem", ["kernel"]), "stem.bn": ("stem_bn", NORM),
              "block.conv1": ("conv1", ["kernel"]), "block.bn1": ("bn1", NORM),
              "block.conv2": ("conv2", ["kernel"]), "block.bn2": ("bn2", NORM),
              "head": ("head", ["kernel", "bias"])}
    """canonical prefix -> (the layer's attribute, its weights' canonical names in ``get_weights()`` order)."""

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = device
        self.module: ResidualCNNNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = ResidualCNNNet(self.config)
        self.module(tf.zeros((1, 28, 28)))  # create the variables
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

    def get_weights(self) -> Weights:
        weights: Weights = {}
        for prefix, (attr, parts) in self.LAYERS.items():
            values = getattr(self.module, attr).get_weights()
            weights.update({f"{prefix}.{part}": np.asarray(v, np.float32) for part, v in zip(parts, values,
                                                                                              strict=True)})
        return weights

    def set_weights(self, weights: Weights) -> None:
        for prefix, (attr, parts) in self.LAYERS.items():
            layer = getattr(self.module, attr)
            new = [np.asarray(weights[f"{prefix}.{part}"], np.float32) for part in parts]
            for part, value, current in zip(parts, new, layer.get_weights(), strict=True):
                if value.shape != current.shape:
                    raise ValueError(f"weight {prefix}.{part}: expected shape {current.shape}, got {value.shape}")
            layer.set_weights(new)
