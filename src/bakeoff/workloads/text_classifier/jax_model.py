"""Transformer text classifier in JAX (Flax Linen), exchanging canonical weights.

The module is stateless; the engine holds the params and calls :meth:`TextClassifier.loss` as a pure function of
them (why Linen: :mod:`bakeoff.workloads.common.jax_encoder`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from bakeoff.workloads.common.jax_encoder import FlaxModel, Params, TransformerBlock


class TextClassifierNet(nn.Module):
    vocab: int
    seq_len: int
    d: int
    heads: int
    ff: int
    layers: int
    rate: float
    eps: float
    out_units: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens: jax.Array, deterministic: bool = True) -> jax.Array:
        valid = tokens != 0  # (B, T) True for real tokens, False for padding
        positions = self.param("embed.positions", nn.initializers.zeros, (self.seq_len, self.d))
        x = nn.Embed(self.vocab, self.d, dtype=self.dtype, name="embed.tokens")(tokens)
        x = x + positions[: tokens.shape[1]].astype(self.dtype)  # (B, T, d)
        mask = valid[:, None, None, :]  # (B, 1, 1, T): every query attends to the valid keys only
        for i in range(self.layers):
            x = TransformerBlock(self.d, self.heads, self.ff, self.rate, self.eps, self.dtype,
                                 name=f"blocks.{i}")(x, mask, deterministic)
        keep = valid[..., None].astype(x.dtype)  # (B, T, 1)
        pooled = (x * keep).sum(1) / keep.sum(1)  # (B, d): mean over valid tokens only
        pooled = nn.Dropout(self.rate)(pooled, deterministic=deterministic)
        return nn.Dense(self.out_units, dtype=self.dtype, name="head")(pooled)  # (B, out_units) logits


class TextClassifier(FlaxModel):
    """ModelImpl for JAX."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.out_units = 1 if config["num_classes"] == 2 else int(config["num_classes"])

    def net(self, dtype: Any = jnp.float32) -> TextClassifierNet:
        c = self.config
        return TextClassifierNet(c["vocab_size"], c["seq_len"], c["d_model"], c["num_heads"], c["d_ff"],
                                 c["num_layers"], c["dropout"], c["layer_norm_eps"], self.out_units, dtype)

    def example(self) -> tuple[jax.Array, ...]:
        return (jnp.ones((1, self.config["seq_len"]), jnp.int32),)

    def loss(self, params: Params, batch: Mapping[str, jax.Array], training: bool, rng: jax.Array | None,
             dtype: Any = jnp.float32) -> tuple[jax.Array, jax.Array]:
        logits = self.apply(params, batch["tokens"], training, rng, dtype).astype(jnp.float32)  # loss in fp32
        labels = batch["labels"]
        if self.out_units == 1:
            per_example = optax.sigmoid_binary_cross_entropy(logits[:, 0], labels.astype(jnp.float32))
        else:
            per_example = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        return per_example.sum(), jnp.asarray(labels.shape[0], jnp.float32)

    def outputs(self, params: Params, batch: Mapping[str, jax.Array], dtype: Any = jnp.float32) -> jax.Array:
        logits = self.apply(params, batch["tokens"], False, None, dtype).astype(jnp.float32)
        return jax.nn.sigmoid(logits[:, 0]) if self.out_units == 1 else jax.nn.softmax(logits, -1)
