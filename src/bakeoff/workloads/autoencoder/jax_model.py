"""Transformer autoencoder in JAX (Flax Linen), exchanging canonical weights.

The module is stateless; the engine holds the params (why Linen: :mod:`bakeoff.workloads.common.jax_encoder`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bakeoff.workloads.common.jax_encoder import FlaxModel, Params, TransformerBlock


class TransformerAutoencoderNet(nn.Module):
    d: int
    heads: int
    ff: int
    layers: int
    rate: float
    eps: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool = True) -> jax.Array:
        x = x.astype(self.dtype)
        for i in range(self.layers):  # (B, T, d) throughout; no mask: every position is real
            x = TransformerBlock(self.d, self.heads, self.ff, self.rate, self.eps, self.dtype,
                                 name=f"blocks.{i}")(x, None, deterministic)
        return nn.Dense(self.d, dtype=self.dtype, name="head")(x)  # (B, T, d) reconstruction


class TransformerAutoencoder(FlaxModel):
    """ModelImpl for JAX."""

    def net(self, dtype: Any = jnp.float32) -> TransformerAutoencoderNet:
        c = self.config
        return TransformerAutoencoderNet(c["d_model"], c["num_heads"], c["d_ff"], c["num_layers"], c["dropout"],
                                         c["layer_norm_eps"], dtype)

    def example(self) -> tuple[jax.Array, ...]:
        return (jnp.zeros((1, self.config["seq_len"], self.config["d_model"]), jnp.float32),)

    def loss(self, params: Params, batch: Mapping[str, jax.Array], training: bool, rng: jax.Array | None,
             dtype: Any = jnp.float32) -> tuple[jax.Array, jax.Array]:
        x = batch["inputs"]
        recon = self.apply(params, x, training, rng, dtype).astype(jnp.float32)  # loss in fp32
        summed = jnp.square(recon - x).sum()  # squared error over every element, not a mean
        return summed, jnp.asarray(x.size, jnp.float32)

    def outputs(self, params: Params, batch: Mapping[str, jax.Array], dtype: Any = jnp.float32) -> jax.Array:
        return self.apply(params, batch["inputs"], False, None, dtype).astype(jnp.float32)
