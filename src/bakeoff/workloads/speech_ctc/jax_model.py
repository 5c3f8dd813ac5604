"""Convolution + Transformer CTC acoustic model in JAX (Flax Linen, CTC from Optax), exchanging canonical weights.

The same computation as :mod:`.torch_model`: two stride-2 convolutions (kernel 3, one frame of zero padding each
side, as PyTorch's ``padding=1``) with the frames at or past each utterance's length zeroed after each, fixed
sinusoidal positions, post-norm Transformer blocks with padded frames masked out of attention as keys, a dense head.

The Transformer block and the canonical-weights mapping are :mod:`bakeoff.workloads.common.jax_encoder`'s: a
parameter's path is its canonical name (Flax's ``Conv`` kernel is (width, in, out), the canonical layout, as
``Dense``'s (in, out) is), so weights move unchanged.

CTC is ``optax.ctc_loss``, matched to ``F.ctc_loss(blank=0, reduction="sum", zero_infinity=False)``:
  * optax takes logits (it applies log_softmax itself) batch-major, with paddings (1.0 = padded) instead of
    lengths: the encoder's frame lengths and the label lengths become right-padding masks;
  * it returns each utterance's negative log-likelihood, not divided by the transcript's length: summing them is
    torch's ``reduction="sum"``, and the count is the number of utterances, as in torch_model;
  * optax stands in for log(0) with ``log_epsilon = -1e5``, so an utterance with too few frames for its labels
    (fewer than one per label plus a blank between repeats) gets a large finite loss where PyTorch's
    ``zero_infinity=False`` gives +inf: the loss sets those utterances to +inf explicitly, from the lengths (their
    gradient is then 0 rather than PyTorch's NaN; the shipped data never has one — speech.py checks feasibility);
  * optax finds repeated labels by comparing neighbours across the padding too: padded labels are set to the blank,
    which a real label never equals, so the last real label is never taken for a repeat.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from bakeoff.workloads.common.jax_encoder import FlaxModel, Params, TransformerBlock
from bakeoff.workloads.speech_ctc.workload import sinusoids

BLANK = 0


def _valid(lengths: jax.Array, frames: int) -> jax.Array:
    """(B, frames) True for the frames before each utterance's length."""
    return jnp.arange(frames)[None, :] < lengths[:, None]


def _mask_past(x: jax.Array, lengths: jax.Array) -> jax.Array:
    """Zero the frames of ``x`` (B, T, C) at or past each utterance's length."""
    return x * _valid(lengths, x.shape[1])[..., None].astype(x.dtype)


class Frontend(nn.Module):
    """Two stride-2 convolutions, (B, T, n_mels) → (B, ceil(ceil(T/2)/2), d), and the lengths after each."""

    channels: int
    d: int
    dtype: Any

    @nn.compact
    def __call__(self, x: jax.Array, lengths: jax.Array) -> tuple[jax.Array, jax.Array]:
        for name, features in (("conv1", self.channels), ("conv2", self.d)):
            conv = nn.Conv(features, (3,), strides=(2,), padding=[(1, 1)], dtype=self.dtype, name=name)
            lengths = (lengths + 1) // 2
            x = _mask_past(nn.relu(conv(x)), lengths)  # padding never reaches a real frame of the next layer
        return x, lengths


class SpeechCTCNet(nn.Module):
    channels: int
    d: int
    heads: int
    ff: int
    layers: int
    rate: float
    eps: float
    vocab: int
    max_positions: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, features: jax.Array, lengths: jax.Array, deterministic: bool = True,
                 ) -> tuple[jax.Array, jax.Array]:
        x, lengths = Frontend(self.channels, self.d, self.dtype, name="frontend")(features.astype(self.dtype),
                                                                                   lengths)  # (B, T', d)
        # The fixed table's first T' rows, a constant: sliced from the whole table, as the other frameworks do, so
        # that T' may be a symbolic size (jax.export with dynamic frames).
        positions = jnp.asarray(sinusoids(self.max_positions, self.d))[: x.shape[1]]
        x = nn.Dropout(self.rate)(x + positions.astype(self.dtype), deterministic=deterministic)
        mask = _valid(lengths, x.shape[1])[:, None, None, :]  # (B, 1, 1, T'): attend to real frames only
        for i in range(self.layers):
            x = TransformerBlock(self.d, self.heads, self.ff, self.rate, self.eps, self.dtype,
                                 name=f"blocks.{i}")(x, mask, deterministic)
        return nn.Dense(self.vocab, dtype=self.dtype, name="head")(x), lengths  # (B, T', vocab) logits, (B,)


# One compiled op, as PyTorch's and TensorFlow's CTC are one fused kernel each. Un-jitted, eager JAX traces and
# compiles optax's scan again on every call, even for shapes it has seen (measured: 1.2 s of a 1.4 s eager
# gradient step); under the engine's jit of the whole step this jit is inlined and changes nothing.
@jax.jit
def ctc_losses(logits: jax.Array, logit_lengths: jax.Array, labels: jax.Array,
               label_lengths: jax.Array) -> jax.Array:
    """Per-utterance CTC negative log-likelihood (B,), blank 0, as ``F.ctc_loss(reduction="none")`` (see the
    module docstring for how Optax's conventions are matched). ``logits`` (B, T, vocab) are cast to fp32."""
    frames, width = logits.shape[1], labels.shape[1]
    logit_pad = 1.0 - _valid(logit_lengths, frames).astype(jnp.float32)  # (B, T) 1.0 = padding
    label_real = _valid(label_lengths, width)  # (B, S)
    labels = jnp.where(label_real, labels, BLANK)
    per = optax.ctc_loss(logits.astype(jnp.float32), logit_pad, labels, 1.0 - label_real.astype(jnp.float32),
                         blank_id=BLANK)
    repeats = jnp.sum((labels[:, 1:] == labels[:, :-1]) & label_real[:, 1:], axis=1)  # a blank must separate them
    return jnp.where(logit_lengths < label_lengths + repeats, jnp.inf, per)


class SpeechCTC(FlaxModel):
    """ModelImpl for JAX."""

    def net(self, dtype: Any = jnp.float32) -> SpeechCTCNet:
        c = self.config
        return SpeechCTCNet(c["conv_channels"], c["d_model"], c["num_heads"], c["d_ff"], c["num_layers"],
                            c["dropout"], c["layer_norm_eps"], c["vocab_size"], c["max_positions"], dtype)

    def example(self) -> tuple[jax.Array, ...]:
        return jnp.zeros((1, 8, self.config["n_mels"])), jnp.array([8], jnp.int32)

    def logits(self, params: Params, batch: Mapping[str, jax.Array], training: bool, rng: jax.Array | None,
               dtype: Any = jnp.float32) -> tuple[jax.Array, jax.Array]:
        """(B, T', vocab) logits in ``dtype`` and the (B,) encoder lengths; dropout only when training with ``rng``."""
        dropout = training and rng is not None
        return self.net(dtype).apply({"params": params}, batch["features"],
                                     jnp.asarray(batch["feature_lengths"], jnp.int32), not dropout,
                                     rngs={"dropout": rng} if dropout else {})

    def loss(self, params: Params, batch: Mapping[str, jax.Array], training: bool, rng: jax.Array | None,
             dtype: Any = jnp.float32) -> tuple[jax.Array, jax.Array]:
        """(summed CTC negative log-likelihood over the utterances, fp32; count = number of utterances)."""
        logits, lengths = self.logits(params, batch, training, rng, dtype)
        per = ctc_losses(logits, lengths, jnp.asarray(batch["labels"], jnp.int32),
                         jnp.asarray(batch["label_lengths"], jnp.int32))
        return jnp.sum(per), jnp.asarray(logits.shape[0], jnp.float32)

    def outputs(self, params: Params, batch: Mapping[str, jax.Array], dtype: Any = jnp.float32) -> jax.Array:
        """(B, T', vocab) fp32 log-probabilities, zero at and past each utterance's encoder length."""
        logits, lengths = self.logits(params, batch, training=False, rng=None, dtype=dtype)
        return jax.nn.log_softmax(logits.astype(jnp.float32), -1) * _valid(lengths, logits.shape[1])[..., None]
