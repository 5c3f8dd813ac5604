"""Transformer text classifier in Keras 3, backend-agnostic: the same code runs on JAX, PyTorch and TensorFlow.

Only ``keras.layers`` and ``keras.ops``: no framework is imported here, the backend is ``KERAS_BACKEND``'s. The
layers and canonical names are those of :mod:`.tf_model` (which is Keras 3 too, but written with ``tf.*`` ops for
TensorFlow's own engine); the loss is the model's ``compute_loss``, so Keras' own ``train_on_batch`` trains exactly
the ``(summed, count)`` loss the parity probes compare.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np
from keras import ops

from bakeoff.core.workload import Weights
from bakeoff.workloads.common import keras_encoder
from bakeoff.workloads.common.keras_encoder import Rows, TransformerBlock


class TextClassifierNet(keras.Model):
    def __init__(self, cfg: Mapping[str, Any], out_units: int) -> None:
        super().__init__()
        d = cfg["d_model"]
        self.out_units = out_units
        self.tokens = keras.layers.Embedding(cfg["vocab_size"], d)
        self.positions = self.add_weight(shape=(cfg["seq_len"], d), initializer="zeros", name="positions")
        self.blocks = [TransformerBlock(d, cfg["num_heads"], cfg["d_ff"], cfg["dropout"], cfg["layer_norm_eps"])
                       for _ in range(cfg["num_layers"])]
        self.drop = keras.layers.Dropout(cfg["dropout"])
        self.head = keras.layers.Dense(out_units)

    def call(self, tokens: Any, training: bool = False) -> Any:
        valid = ops.not_equal(tokens, 0)  # (B, T) True for real tokens
        x = self.tokens(tokens) + self.positions[: ops.shape(tokens)[1]]  # (B, T, d)
        mask = ops.expand_dims(valid, 1)  # (B, 1, T): every query may attend to every valid key
        for block in self.blocks:
            x = block(x, attention_mask=mask, training=training)
        keep = ops.expand_dims(ops.cast(valid, x.dtype), -1)  # (B, T, 1)
        pooled = ops.sum(x * keep, 1) / ops.sum(keep, 1)  # (B, d): mean over valid tokens only
        return self.head(self.drop(pooled, training=training))  # (B, out_units) logits

    def summed_loss(self, labels: Any, logits: Any) -> tuple[Any, Any]:
        """(summed cross-entropy, example count), in fp32 whatever the compute dtype."""
        logits = ops.cast(logits, "float32")
        if self.out_units == 1:
            per_example = ops.binary_crossentropy(ops.cast(labels, "float32"), logits[:, 0], from_logits=True)
        else:
            per_example = ops.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        return ops.sum(per_example), ops.cast(ops.shape(labels)[0], "float32")

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None, sample_weight: Any = None,
                     training: bool = True) -> Any:
        """What Keras' train step minimises: the mean of :meth:`summed_loss` over the batch."""
        summed, count = self.summed_loss(y, y_pred)
        return summed / count


class TextClassifier:
    """ModelImpl for Keras 3 on any backend."""

    input_key = "tokens"  # the batch entry the engine passes Keras as x (labels are y)

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = device
        self.out_units = 1 if config["num_classes"] == 2 else int(config["num_classes"])
        self.module: TextClassifierNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = TextClassifierNet(self.config, self.out_units)
        self.module(keras.KerasTensor((1, self.config["seq_len"]), "int32"))  # create the variables, symbolically
        self.set_weights(weights)

    def loss(self, batch: Mapping[str, Any], training: bool = True) -> tuple[Any, Any]:
        return self.module.summed_loss(batch["labels"], self.module(batch["tokens"], training=training))

    def outputs(self, batch: Mapping[str, Any]) -> Any:
        return self.probabilities(self.module(batch["tokens"], training=False))

    def probabilities(self, logits: Any) -> Any:
        """Logits (B, out_units) -> what :meth:`outputs` returns: P(class 1) (B,), or class probabilities."""
        logits = ops.cast(logits, "float32")
        return ops.sigmoid(logits[:, 0]) if self.out_units == 1 else ops.softmax(logits, -1)

    def trainable(self) -> list[keras.Variable]:
        return list(self.module.trainable_variables)

    def num_params(self) -> int:
        return int(sum(np.prod(v.shape) for v in self.module.trainable_variables))

    # --- canonical weights: the shared Keras mapping (common.keras_encoder) ------------------------------------

    def _rows(self) -> Rows:
        m = self.module
        rows: list = [("embed.", m.tokens, ["tokens"])]
        for i, block in enumerate(m.blocks):
            rows += block.rows(f"blocks.{i}.")
        return [*rows, ("head.", m.head, ["kernel", "bias"])]

    def get_weights(self) -> Weights:
        w: Weights = {"embed.positions": np.asarray(self.module.positions.numpy(), np.float32).copy()}
        return {**w, **keras_encoder.get_weights(self._rows())}

    def set_weights(self, weights: Weights) -> None:
        positions = np.asarray(weights["embed.positions"], np.float32)
        if positions.shape != tuple(self.module.positions.shape):
            raise ValueError(f"weight embed.positions: expected shape {tuple(self.module.positions.shape)}, "
                             f"got {positions.shape}")
        self.module.positions.assign(positions)
        keras_encoder.set_weights(self._rows(), weights)
