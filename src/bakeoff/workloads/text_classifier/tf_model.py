"""Transformer text classifier in TensorFlow, built from Keras 3 layers on the TensorFlow backend.

Why Keras 3 layers rather than raw ``tf.Module``: they are what a TensorFlow team writes today (``tf.keras`` *is*
Keras 3 since TF 2.16), and the story's model was a Keras model. Training does not use ``model.fit``: the
engine runs a custom ``GradientTape`` loop, which is also what works under MultiWorkerMirroredStrategy and
ParameterServerStrategy.
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
from bakeoff.workloads.common.tf_encoder import TransformerBlock  # noqa: E402


class TextClassifierNet(keras.Model):
    def __init__(self, cfg: Mapping[str, Any], out_units: int) -> None:
        super().__init__()
        d = cfg["d_model"]
        self.tokens = keras.layers.Embedding(cfg["vocab_size"], d)
        self.positions = self.add_weight(shape=(cfg["seq_len"], d), initializer="zeros", name="positions")
        self.blocks = [TransformerBlock(d, cfg["num_heads"], cfg["d_ff"], cfg["dropout"], cfg["layer_norm_eps"])
                       for _ in range(cfg["num_layers"])]
        self.drop = keras.layers.Dropout(cfg["dropout"])
        self.head = keras.layers.Dense(out_units)

    def call(self, tokens: tf.Tensor, training: bool = False) -> tf.Tensor:
        valid = tf.not_equal(tokens, 0)  # (B, T) True for real tokens
        x = self.tokens(tokens) + self.positions[: tf.shape(tokens)[1]]  # (B, T, d)
        mask = tf.expand_dims(valid, 1)  # (B, 1, T): every query may attend to every valid key
        for block in self.blocks:
            x = block(x, attention_mask=mask, training=training)
        keep = tf.expand_dims(tf.cast(valid, x.dtype), -1)  # (B, T, 1)
        pooled = tf.reduce_sum(x * keep, 1) / tf.reduce_sum(keep, 1)  # (B, d)
        return self.head(self.drop(pooled, training=training))  # (B, out_units) logits


class TextClassifier:
    """ModelImpl for TensorFlow."""

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = device
        self.out_units = 1 if config["num_classes"] == 2 else int(config["num_classes"])
        self.module: TextClassifierNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = TextClassifierNet(self.config, self.out_units)
        self.module(tf.ones((1, self.config["seq_len"]), tf.int32))  # create the variables
        self.set_weights(weights)

    def loss(self, batch: Mapping[str, tf.Tensor], training: bool = True) -> tuple[tf.Tensor, tf.Tensor]:
        logits = tf.cast(self.module(batch["tokens"], training=training), tf.float32)  # loss in fp32 (mixed too)
        labels = batch["labels"]
        if self.out_units == 1:
            per_example = tf.nn.sigmoid_cross_entropy_with_logits(tf.cast(labels, logits.dtype), logits[:, 0])
        else:
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        summed = tf.reduce_sum(per_example)
        return summed, tf.cast(tf.shape(labels)[0], summed.dtype)

    def outputs(self, batch: Mapping[str, tf.Tensor]) -> tf.Tensor:
        logits = tf.cast(self.module(batch["tokens"], training=False), tf.float32)
        return tf.sigmoid(logits[:, 0]) if self.out_units == 1 else tf.nn.softmax(logits, -1)

    def trainable(self) -> list[tf.Variable]:
        return list(self.module.trainable_variables)

    def num_params(self) -> int:
        return int(sum(np.prod(v.shape) for v in self.module.trainable_variables))

    # --- canonical weights: Keras layers ⇄ canonical names, shared with every Transformer workload ------------

    def _rows(self) -> tf_encoder.Rows:
        m = self.module
        rows: list = [("embed.", m.tokens, ["tokens"])]
        for i, block in enumerate(m.blocks):
            rows += block.rows(f"blocks.{i}.")
        return [*rows, ("head.", m.head, ["kernel", "bias"])]

    def get_weights(self) -> Weights:
        return {"embed.positions": self.module.positions.numpy().copy(), **tf_encoder.get_weights(self._rows())}

    def set_weights(self, weights: Weights) -> None:
        self.module.positions.assign(np.asarray(weights["embed.positions"], np.float32))
        tf_encoder.set_weights(self._rows(), weights)
