"""The GRU sentiment classifier in JAX (Flax Linen), exchanging canonical (Keras') weights.

The GRU is written out rather than taken from ``flax.linen.GRUCell``: Flax's cell has no recurrent bias for the
reset and update gates (its ``hr``, ``hz`` Dense layers have none; only ``hn`` has one), so it cannot hold Keras'
and PyTorch's ``bias (2, 3h)`` — folding the recurrent r and z biases into the input ones gives the same outputs,
but an optimizer then trains one bias where the other two frameworks train two, and training drifts apart
(``layouts.gru_from_torch``). Here the cell is Keras' ``reset_after=True`` formula, scanned over time with
``jax.lax.scan``, its parameters named as the canonical ones (``gru.kernel``, ``gru.recurrent_kernel``,
``gru.bias``, gates z, r, n), so weights move unchanged; Flax's Dense kernels are canonical ``(in, out)`` too.
The module holds no state; the engine holds the params (:class:`bakeoff.workloads.common.jax_encoder.FlaxModel`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from bakeoff.workloads.common.jax_encoder import FlaxModel, Params, layer_norm


@jax.jit
def recurrence(inputs: jax.Array, recurrent: jax.Array, bias: jax.Array) -> jax.Array:
    """The GRU's steps over time from a zero state: ``inputs (B, T, 3h)`` (each step's ``x @ kernel + bias[0]``),
    ``recurrent (h, 3h)``, ``bias (3h)`` (the recurrent one) -> every step's state ``(B, T, h)``.

    Jitted on its own because a ``lax.scan`` run op by op (the eager mode) traces a new step function at every call,
    which XLA then compiles anew: an eager parity probe compiled 382 times (57 s, on 2 busy cores) without this, 299
    (18 s) with it, and a scan is one compiled computation either way. Under the graph mode's ``jax.jit`` it is
    inlined."""

    def step(state: jax.Array, given: jax.Array) -> tuple[jax.Array, jax.Array]:
        xz, xr, xn = jnp.split(given, 3, axis=-1)  # (B, h) each
        hz, hr, hn = jnp.split(state @ recurrent + bias, 3, axis=-1)
        z, r = jax.nn.sigmoid(xz + hz), jax.nn.sigmoid(xr + hr)
        n = jnp.tanh(xn + r * hn)  # reset after the recurrent product: PyTorch's cell too
        new = z * state + (1 - z) * n
        return new, new

    start = jnp.zeros((inputs.shape[0], recurrent.shape[0]), inputs.dtype)
    _, states = jax.lax.scan(step, start, jnp.swapaxes(inputs, 0, 1))  # over T: (T, B, h)
    return jnp.swapaxes(states, 0, 1)


class KerasGRU(nn.Module):
    """Keras' GRU with ``reset_after=True``, every step's output: ``(B, T, e) -> (B, T, h)``, from a zero state."""

    units: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.units
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (x.shape[-1], 3 * h), jnp.float32)
        recurrent = self.param("recurrent_kernel", nn.initializers.orthogonal(), (h, 3 * h), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (2, 3 * h), jnp.float32)
        kernel, recurrent, bias = (p.astype(self.dtype) for p in (kernel, recurrent, bias))
        inputs = x.astype(self.dtype) @ kernel + bias[0]  # (B, T, 3h): every step's input part at once
        return recurrence(inputs, recurrent, bias[1])


class SentimentGRUNet(nn.Module):
    vocab: int
    embed_dim: int
    units: int
    rate: float
    eps: float
    out_units: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens: jax.Array, deterministic: bool = True) -> jax.Array:
        table = self.param("embed.tokens", nn.initializers.normal(0.05), (self.vocab, self.embed_dim), jnp.float32)
        x = KerasGRU(self.units, self.dtype, name="gru")(jnp.take(table, tokens, axis=0))  # (B, T, h)
        x = layer_norm(self.eps, self.dtype, "norm")(x)
        keep = (tokens != 0)[..., None].astype(x.dtype)  # (B, T, 1) the review's tokens
        pooled = (x * keep).sum(1) / keep.sum(1)  # (B, h): the mean over them
        pooled = nn.Dropout(self.rate)(pooled, deterministic=deterministic)
        x = nn.relu(nn.Dense(self.units, dtype=self.dtype, name="dense")(pooled))
        return nn.Dense(self.out_units, dtype=self.dtype, name="out")(x)  # (B, out_units) logits


class SentimentGRU(FlaxModel):
    """ModelImpl for JAX."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.out_units = 1 if config["num_classes"] == 2 else int(config["num_classes"])

    def net(self, dtype: Any = jnp.float32) -> SentimentGRUNet:
        c = self.config
        return SentimentGRUNet(c["vocab_size"], c["embed_dim"], c["units"], c["dropout"], c["layer_norm_eps"],
                               self.out_units, dtype)

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
