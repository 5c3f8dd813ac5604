"""Convolution + Transformer CTC acoustic model in TensorFlow, built from Keras 3 layers (TensorFlow backend).

The Transformer block is the text classifier's (post-norm, the same computation as
``torch.nn.TransformerEncoderLayer``). TensorFlow's ``padding="same"`` pads a stride-2 convolution of an even
length only at the end, PyTorch's ``padding=1`` pads both ends: the front end pads explicitly and convolves
with ``padding="valid"`` so both frameworks see the same frames.
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
from bakeoff.workloads.speech_ctc.workload import sinusoids  # noqa: E402


def _mask_past(x: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
    """Zero the frames of ``x`` (B, T, C) at or past each utterance's length."""
    return x * tf.expand_dims(tf.sequence_mask(lengths, tf.shape(x)[1], x.dtype), -1)


class SpeechCTCNet(keras.Model):
    def __init__(self, cfg: Mapping[str, Any]) -> None:
        super().__init__()
        d = cfg["d_model"]
        self.conv1 = keras.layers.Conv1D(cfg["conv_channels"], 3, strides=2, padding="valid", activation="relu")
        self.conv2 = keras.layers.Conv1D(d, 3, strides=2, padding="valid", activation="relu")
        self.positions = tf.constant(sinusoids(cfg["max_positions"], d))  # fixed, not a weight
        self.blocks = [TransformerBlock(d, cfg["num_heads"], cfg["d_ff"], cfg["dropout"], cfg["layer_norm_eps"])
                       for _ in range(cfg["num_layers"])]
        self.drop = keras.layers.Dropout(cfg["dropout"])
        self.head = keras.layers.Dense(cfg["vocab_size"])

    def call(self, features: tf.Tensor, lengths: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        one_each_side = [[0, 0], [1, 1], [0, 0]]  # PyTorch's padding=1 (see the module docstring)
        lengths = (lengths + 1) // 2
        x = _mask_past(self.conv1(tf.pad(features, one_each_side)), lengths)  # (B, ceil(T/2), C)
        lengths = (lengths + 1) // 2
        x = _mask_past(self.conv2(tf.pad(x, one_each_side)), lengths)  # (B, T', d)
        x = self.drop(x + tf.cast(self.positions[: tf.shape(x)[1]], x.dtype), training=training)
        mask = tf.expand_dims(tf.sequence_mask(lengths, tf.shape(x)[1]), 1)  # (B, 1, T'): attend to real frames
        for block in self.blocks:
            x = block(x, attention_mask=mask, training=training)
        return self.head(x), lengths  # (B, T', vocab) logits, (B,) encoder lengths


class SpeechCTC:
    """ModelImpl for TensorFlow."""

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = device
        self.module: SpeechCTCNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = SpeechCTCNet(self.config)
        self.module(tf.ones((1, 8, self.config["n_mels"])), tf.constant([8], tf.int32))  # create the variables
        self.set_weights(weights)

    def logits(self, batch: Mapping[str, tf.Tensor], training: bool) -> tuple[tf.Tensor, tf.Tensor]:
        return self.module(batch["features"], tf.cast(batch["feature_lengths"], tf.int32), training=training)

    def loss(self, batch: Mapping[str, tf.Tensor], training: bool = True) -> tuple[tf.Tensor, tf.Tensor]:
        logits, lengths = self.logits(batch, training)
        labels, label_lengths = tf.cast(batch["labels"], tf.int32), tf.cast(batch["label_lengths"], tf.int32)
        if not self.device.startswith("GPU"):
            # TensorFlow's documented CPU fast path: sparse labels run the fused CTCLoss kernel; dense labels
            # run a tf.scan over time, one Python-dispatched op per frame in eager mode (10x slower here).
            labels = tf.RaggedTensor.from_tensor(labels, lengths=label_lengths).to_sparse()
        per_utterance = tf.nn.ctc_loss(labels, tf.cast(logits, tf.float32), label_lengths, lengths,
                                       logits_time_major=False, blank_index=0)  # (B,) negative log-likelihood
        summed = tf.reduce_sum(per_utterance)
        return summed, tf.cast(tf.shape(logits)[0], summed.dtype)

    def outputs(self, batch: Mapping[str, tf.Tensor]) -> tf.Tensor:
        logits, lengths = self.logits(batch, training=False)
        valid = tf.expand_dims(tf.sequence_mask(lengths, tf.shape(logits)[1], tf.float32), -1)  # (B, T', 1)
        return tf.nn.log_softmax(tf.cast(logits, tf.float32), -1) * valid  # (B, T', vocab), zero past the length

    def trainable(self) -> list[tf.Variable]:
        return list(self.module.trainable_variables)

    def num_params(self) -> int:
        return int(sum(np.prod(v.shape) for v in self.module.trainable_variables))

    # --- canonical weights -------------------------------------------------------------------------------
    # Conv1D kernels are (width, in, out): the canonical layout as is. Keras' MultiHeadAttention keeps per-head
    # kernels, q/k/v (d, heads, head_dim) and output (heads, head_dim, d): the same numbers as (d, d).

    def _rows(self) -> tf_encoder.Rows:
        m = self.module
        rows: list = [(f"frontend.{name}.", layer, ["kernel", "bias"]) for name, layer in (("conv1", m.conv1),
                                                                                            ("conv2", m.conv2))]
        for i, block in enumerate(m.blocks):
            rows += block.rows(f"blocks.{i}.")
        return [*rows, ("head.", m.head, ["kernel", "bias"])]

    def get_weights(self) -> Weights:
        return tf_encoder.get_weights(self._rows())

    def set_weights(self, weights: Weights) -> None:
        tf_encoder.set_weights(self._rows(), weights)
