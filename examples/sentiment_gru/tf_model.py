"""The GRU sentiment classifier in TensorFlow, built from Keras 3 layers on the TensorFlow backend.

``keras.layers.GRU(reset_after=True)`` (Keras' default, and PyTorch's cell) holds the canonical tensors as they
are — ``kernel (e, 3h)``, ``recurrent_kernel (h, 3h)``, ``bias (2, 3h)``, gates (z, r, n) — so weights move
unchanged. What must be set rather than left at Keras' defaults: LayerNormalization's epsilon (Keras 1e-3, the
canonical 1e-5) and the dropout's ``training`` flag, passed through so evaluation runs without it.
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


class SentimentGRUNet(keras.Model):
    def __init__(self, cfg: Mapping[str, Any], out_units: int) -> None:
        super().__init__()
        self.tokens = keras.layers.Embedding(cfg["vocab_size"], cfg["embed_dim"])
        self.gru = keras.layers.GRU(cfg["units"], return_sequences=True, reset_after=True)
        self.norm = keras.layers.LayerNormalization(epsilon=cfg["layer_norm_eps"])
        self.drop = keras.layers.Dropout(cfg["dropout"])
        self.dense = keras.layers.Dense(cfg["units"], activation="relu")
        self.out = keras.layers.Dense(out_units)

    def call(self, tokens: tf.Tensor, training: bool = False) -> tf.Tensor:
        x = self.norm(self.gru(self.tokens(tokens)))  # (B, T, h): every step's output, normalised
        keep = tf.expand_dims(tf.cast(tf.not_equal(tokens, 0), x.dtype), -1)  # (B, T, 1) the review's tokens
        pooled = tf.reduce_sum(x * keep, 1) / tf.reduce_sum(keep, 1)  # (B, h): the mean over them
        return self.out(self.dense(self.drop(pooled, training=training)))  # (B, out_units) logits


class SentimentGRU:
    """ModelImpl for TensorFlow."""

    LAYERS = {"embed": ("tokens", ["tokens"]), "gru": ("gru", ["kernel", "recurrent_kernel", "bias"]),
              "norm": ("norm", ["gamma", "beta"]), "dense": ("dense", ["kernel", "bias"]),
              "out": ("out", ["kernel", "bias"])}
    """canonical prefix -> (the layer's attribute, its weights' canonical names in ``get_weights()`` order)."""

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = device
        self.out_units = 1 if config["num_classes"] == 2 else int(config["num_classes"])
        self.module: SentimentGRUNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = SentimentGRUNet(self.config, self.out_units)
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
