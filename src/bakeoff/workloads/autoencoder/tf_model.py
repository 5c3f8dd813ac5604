"""Transformer autoencoder in TensorFlow, built from Keras 3 layers on the TensorFlow backend.

Keras layers, custom ``GradientTape`` loop in the engine (no ``model.fit``), as for the text classifier.
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
from bakeoff.workloads.common import tf_encoder  # noqa: E402


class TransformerAutoencoderNet(keras.Model):
    def __init__(self, cfg: Mapping[str, Any]) -> None:
        super().__init__()
        d = cfg["d_model"]
        self.blocks = [tf_encoder.TransformerBlock(d, cfg["num_heads"], cfg["d_ff"], cfg["dropout"],
                                                   cfg["layer_norm_eps"])
                       for _ in range(cfg["num_layers"])]
        self.head = keras.layers.Dense(d)

    def call(self, x: tf.Tensor, training: bool = False) -> tf.Tensor:
        for block in self.blocks:  # (B, T, d) throughout; no mask: every position is real
            x = block(x, training=training)
        return self.head(x)  # (B, T, d) reconstruction


class TransformerAutoencoder:
    """ModelImpl for TensorFlow."""

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = device
        self.module: TransformerAutoencoderNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = TransformerAutoencoderNet(self.config)
        self.module(tf.zeros((1, self.config["seq_len"], self.config["d_model"])))  # create the variables
        self.set_weights(weights)

    def loss(self, batch: Mapping[str, tf.Tensor], training: bool = True) -> tuple[tf.Tensor, tf.Tensor]:
        x = batch["inputs"]
        recon = tf.cast(self.module(x, training=training), tf.float32)  # loss in fp32 (mixed precision too)
        summed = tf.reduce_sum(tf.square(recon - x))  # squared error over every element, not a mean
        return summed, tf.cast(tf.size(x), summed.dtype)

    def outputs(self, batch: Mapping[str, tf.Tensor]) -> tf.Tensor:
        return tf.cast(self.module(batch["inputs"], training=False), tf.float32)

    def trainable(self) -> list[tf.Variable]:
        return list(self.module.trainable_variables)

    def num_params(self) -> int:
        return int(sum(np.prod(v.shape) for v in self.module.trainable_variables))

    def _rows(self) -> tf_encoder.Rows:
        rows = [row for i, block in enumerate(self.module.blocks) for row in block.rows(f"blocks.{i}.")]
        return [*rows, ("head.", self.module.head, ["kernel", "bias"])]

    def get_weights(self) -> Weights:
        return tf_encoder.get_weights(self._rows())

    def set_weights(self, weights: Weights) -> None:
        tf_encoder.set_weights(self._rows(), weights)
