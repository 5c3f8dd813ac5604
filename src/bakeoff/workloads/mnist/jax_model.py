"""MNIST CNN in JAX (Flax Linen, NHWC), exchanging canonical weights.

Flax's layouts are the canonical ones — Conv kernels ``(kh, kw, in, out)``, a Dense kernel ``(H·W·C, classes)``
over channels-last features — so weights move unchanged. The module is stateless; the engine holds the params
(why Linen: :mod:`bakeoff.workloads.common.jax_encoder`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from bakeoff.workloads.common.jax_encoder import FlaxModel, Params


class MnistCNNNet(nn.Module):
    filters: tuple[int, int]
    kernel_size: int
    rate: float
    classes: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, images: jax.Array, deterministic: bool = True) -> jax.Array:
        k = (self.kernel_size, self.kernel_size)
        x = images[..., None].astype(self.dtype)  # (B, 28, 28, 1)
        for i, filters in enumerate(self.filters, start=1):  # valid padding, stride 1; 2×2 max-pool, floor
            x = nn.relu(nn.Conv(filters, k, padding="VALID", dtype=self.dtype, name=f"conv{i}")(x))
            x = nn.max_pool(x, (2, 2), strides=(2, 2))  # (B, 13, 13, c1), then (B, 5, 5, c2)
        x = nn.Dropout(self.rate)(x.reshape(x.shape[0], -1), deterministic=deterministic)  # (H, W, C) order
        return nn.Dense(self.classes, dtype=self.dtype, name="dense")(x)  # (B, 10) logits


class MnistCNN(FlaxModel):
    """ModelImpl for JAX."""

    def net(self, dtype: Any = jnp.float32) -> MnistCNNNet:
        c = self.config
        return MnistCNNNet(tuple(c["filters"]), c["kernel_size"], c["dropout"], c["num_classes"], dtype)

    def example(self) -> tuple[jax.Array, ...]:
        size = self.config["image_size"]
        return (jnp.zeros((1, size, size), jnp.float32),)

    def loss(self, params: Params, batch: Mapping[str, jax.Array], training: bool, rng: jax.Array | None,
             dtype: Any = jnp.float32) -> tuple[jax.Array, jax.Array]:
        logits = self.apply(params, batch["images"], training, rng, dtype).astype(jnp.float32)  # loss in fp32
        labels = batch["labels"]
        summed = optax.softmax_cross_entropy_with_integer_labels(logits, labels).sum()
        return summed, jnp.asarray(labels.shape[0], jnp.float32)

    def outputs(self, params: Params, batch: Mapping[str, jax.Array], dtype: Any = jnp.float32) -> jax.Array:
        return jax.nn.softmax(self.apply(params, batch["images"], False, None, dtype).astype(jnp.float32), -1)
