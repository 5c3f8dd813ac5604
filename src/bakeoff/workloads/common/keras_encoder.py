"""The encoder block as Keras 3 layers, and canonical weights ⇄ Keras layers (names in :mod:`.encoder`), on any
Keras backend: ``keras.layers`` and numpy only. TensorFlow's models use it through :mod:`.tf_encoder`; the Keras
rows (``keras-jax``, ``keras-torch``, ``keras-tensorflow``) use it directly.

Keras' MultiHeadAttention keeps per-head kernels: q/k/v ``(d, heads, head_dim)`` with biases ``(heads, head_dim)``,
output ``(heads, head_dim, d)``; canonical kernels are the same numbers reshaped to ``(d, d)``. The order of
``Layer.get_weights()`` is documented per layer (kernel then bias; gamma then beta; q, k, v, o for attention).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np

from bakeoff.core.workload import Weights

Rows = Sequence[tuple[str, keras.layers.Layer, Sequence[str]]]
"""(canonical prefix, Keras layer, canonical names of ``layer.get_weights()`` in order)."""


class TransformerBlock(keras.layers.Layer):
    """Post-norm encoder block, the same computation as ``torch.nn.TransformerEncoderLayer``."""

    def __init__(self, d: int, heads: int, ff: int, rate: float, eps: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.attn = keras.layers.MultiHeadAttention(heads, key_dim=d // heads, dropout=rate)
        self.ffn_in = keras.layers.Dense(ff, activation="relu")
        self.ffn_out = keras.layers.Dense(d)
        self.norm1 = keras.layers.LayerNormalization(epsilon=eps)
        self.norm2 = keras.layers.LayerNormalization(epsilon=eps)
        self.drop_attn, self.drop_ffn, self.drop_out = (keras.layers.Dropout(rate) for _ in range(3))

    def call(self, x: Any, attention_mask: Any = None, training: bool = False) -> Any:
        a = self.attn(x, x, attention_mask=attention_mask, training=training)  # (B, T, d)
        x = self.norm1(x + self.drop_attn(a, training=training))
        f = self.ffn_out(self.drop_ffn(self.ffn_in(x), training=training))
        return self.norm2(x + self.drop_out(f, training=training))

    def rows(self, prefix: str) -> Rows:
        return [
            (prefix + "attn.", self.attn, [f"{n}.{k}" for n in "qkvo" for k in ("kernel", "bias")]),
            (prefix + "norm1.", self.norm1, ["gamma", "beta"]),
            (prefix + "ffn.in.", self.ffn_in, ["kernel", "bias"]),
            (prefix + "ffn.out.", self.ffn_out, ["kernel", "bias"]),
            (prefix + "norm2.", self.norm2, ["gamma", "beta"]),
        ]


def get_weights(rows: Rows) -> Weights:
    """Canonical weights of the layers in ``rows``: attention kernels flattened to (d, d), biases to (n,)."""
    w: Weights = {}
    for prefix, layer, names in rows:
        for name, value in zip(names, layer.get_weights(), strict=True):
            attention = prefix.endswith("attn.")  # only attention kernels are per-head (conv kernels are 3-D too)
            if attention and name == "o.kernel":  # (heads, head_dim, d) -> (d, d)
                value = value.reshape(-1, value.shape[-1])
            elif attention and name.endswith("kernel"):  # q/k/v (d, heads, head_dim) -> (d, d)
                value = value.reshape(value.shape[0], -1)
            elif name.endswith("bias"):  # (heads, head_dim) or (out,) -> (out,)
                value = value.reshape(-1)
            w[prefix + name] = np.asarray(value, np.float32).copy()
    return w


def set_weights(rows: Rows, weights: Mapping[str, np.ndarray]) -> None:
    """Load canonical weights into the layers in ``rows``, reshaping to each Keras variable's own shape."""
    for prefix, layer, names in rows:
        new = []
        for name, current in zip(names, layer.get_weights(), strict=True):
            value = np.asarray(weights[prefix + name], np.float32)
            if value.size != current.size:
                raise ValueError(f"weight {prefix + name}: expected {current.size} values, got shape {value.shape}")
            new.append(value.reshape(current.shape))
        layer.set_weights(new)
