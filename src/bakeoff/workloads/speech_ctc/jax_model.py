"""Convolution + Transformer CTC acoustic model in JAX (Flax Linen, CTC from Optax), exchanging canonical weights.

The same computation as :mod:`.torch_model`: two stride-2 convolutions (kernel 3, one frame of zero padding each
side, as PyTorch's ``padding=1``) with the frames at or past each utterance's length zeroed after each, fixed
sinusoidal positions, post-norm Transformer blocks with padded frames masked out of attention as keys, a dense head.

Parameters are a plain pytree whose leaves already have the canonical layouts: Flax's ``Conv`` kernel is
(width, in, out) and ``Dense``'s (in, out), so canonical weights only change names (``blocks.0.attn.q.kernel`` ⇄
``blocks_0/attn/q/kernel``; LayerNorm ``gamma``/``beta`` ⇄ ``scale``/``bias``), never values or shapes.

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
import numpy as np
import optax

from bakeoff.spec import Weights
from bakeoff.workloads.speech_ctc.workload import sinusoids

Params = Any  # the Flax parameter pytree: nested dicts of fp32 jax arrays

BLANK = 0


def _valid(lengths: jax.Array, frames: int) -> jax.Array:
    """(B, frames) True for the frames before each utterance's length."""
    return jnp.arange(frames)[None, :] < lengths[:, None]


def _mask_past(x: jax.Array, lengths: jax.Array) -> jax.Array:
    """Zero the frames of ``x`` (B, T, C) at or past each utterance's length."""
    return x * _valid(lengths, x.shape[1])[..., None].astype(x.dtype)


class Attention(nn.Module):
    """Multi-head self-attention with q, k, v, o as separate (d, d) dense layers, padded keys masked out."""

    d: int
    heads: int
    dropout: float
    dtype: Any

    @nn.compact
    def __call__(self, x: jax.Array, key_valid: jax.Array, deterministic: bool) -> jax.Array:
        b, t, _ = x.shape
        hd = self.d // self.heads

        def project(name: str) -> jax.Array:
            return nn.Dense(self.d, dtype=self.dtype, name=name)(x).reshape(b, t, self.heads, hd)  # (B, T, H, hd)

        q, k, v = project("q"), project("k"), project("v")
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) * hd**-0.5  # (B, H, T, T)
        # The smallest finite float rather than -inf: identical weights (exp underflows to 0) for any row with a
        # real key, and no NaN from a row without one.
        scores = jnp.where(key_valid[:, None, None, :], scores, jnp.finfo(jnp.float32).min)
        weights = nn.Dropout(self.dropout)(jax.nn.softmax(scores, -1), deterministic).astype(self.dtype)
        out = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, t, self.d)
        return nn.Dense(self.d, dtype=self.dtype, name="o")(out)


class TransformerBlock(nn.Module):
    """Post-norm encoder block, ``torch.nn.TransformerEncoderLayer(norm_first=False, activation="relu")``."""

    d: int
    heads: int
    ff: int
    dropout: float
    eps: float
    dtype: Any

    @nn.compact
    def __call__(self, x: jax.Array, key_valid: jax.Array, deterministic: bool) -> jax.Array:
        def norm(name: str) -> nn.LayerNorm:
            # two-pass variance, as PyTorch and Keras compute it (Flax's default is E[x²] − E[x]²)
            return nn.LayerNorm(epsilon=self.eps, use_fast_variance=False, dtype=self.dtype, name=name)

        def drop(y: jax.Array) -> jax.Array:
            return nn.Dropout(self.dropout)(y, deterministic)

        a = Attention(self.d, self.heads, self.dropout, self.dtype, name="attn")(x, key_valid, deterministic)
        x = norm("norm1")(x + drop(a))
        f = nn.relu(nn.Dense(self.ff, dtype=self.dtype, name="ffn_in")(x))
        f = nn.Dense(self.d, dtype=self.dtype, name="ffn_out")(drop(f))
        return norm("norm2")(x + drop(f))


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
    cfg: Mapping[str, Any]
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, features: jax.Array, lengths: jax.Array, deterministic: bool = True,
                 ) -> tuple[jax.Array, jax.Array]:
        c = self.cfg
        x, lengths = Frontend(c["conv_channels"], c["d_model"], self.dtype, name="frontend")(
            features.astype(self.dtype), lengths)  # (B, T', d)
        positions = jnp.asarray(sinusoids(x.shape[1], c["d_model"]))  # the first T' rows of the fixed table
        x = nn.Dropout(c["dropout"])(x + positions.astype(self.dtype), deterministic)
        key_valid = _valid(lengths, x.shape[1])  # (B, T')
        for i in range(c["num_layers"]):
            x = TransformerBlock(c["d_model"], c["num_heads"], c["d_ff"], c["dropout"], c["layer_norm_eps"],
                                 self.dtype, name=f"blocks_{i}")(x, key_valid, deterministic)
        return nn.Dense(c["vocab_size"], dtype=self.dtype, name="head")(x), lengths  # (B, T', vocab) logits


def _path(name: str) -> tuple[str, ...]:
    """Canonical name → path in the Flax parameter tree: ``blocks.0.norm1.gamma`` → blocks_0/norm1/scale."""
    parts = name.replace("blocks.", "blocks_").replace("ffn.in", "ffn_in").replace("ffn.out", "ffn_out").split(".")
    return (*parts[:-1], {"gamma": "scale", "beta": "bias"}.get(parts[-1], parts[-1]))


def _name(path: tuple[str, ...]) -> str:
    """Path in the Flax parameter tree → canonical name, the inverse of :func:`_path`."""
    *layers, leaf = path
    if layers[-1].startswith("norm"):
        leaf = {"scale": "gamma", "bias": "beta"}[leaf]
    return ".".join([*layers, leaf]).replace("blocks_", "blocks.").replace("ffn_", "ffn.")


def _flat(tree: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, (*prefix, key)))
        else:
            out[(*prefix, key)] = value
    return out


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


class SpeechCTC:
    """ModelImpl for JAX: a functional Flax module; parameters live outside it, with the engine."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = dict(config)
        self._nets: dict[Any, SpeechCTCNet] = {}

    def net(self, dtype: Any = jnp.float32) -> SpeechCTCNet:
        """The module computing in ``dtype`` (parameters stay fp32: Flax casts them per layer)."""
        key = jnp.dtype(dtype)
        if key not in self._nets:
            self._nets[key] = SpeechCTCNet(self.config, dtype)
        return self._nets[key]

    def _shapes(self) -> dict[tuple[str, ...], tuple[int, ...]]:
        frames, mels = 8, self.config["n_mels"]
        tree = jax.eval_shape(self.net().init, jax.random.key(0), jnp.zeros((1, frames, mels)),
                              jnp.array([frames]))["params"]
        return {path: tuple(leaf.shape) for path, leaf in _flat(tree).items()}

    def init(self, weights: Weights) -> Params:
        """Canonical weights → the Flax parameter tree (fp32 jax arrays); names and shapes must match exactly."""
        shapes = self._shapes()
        by_path = {_path(name): name for name in weights}
        if set(by_path) != set(shapes):
            missing = sorted(".".join(p) for p in set(shapes) - set(by_path))
            extra = sorted(by_path[p] for p in set(by_path) - set(shapes))
            raise ValueError(f"canonical weights for speech_ctc: missing {missing}, unexpected {extra}")
        params: dict[str, Any] = {}
        for path, name in sorted(by_path.items()):
            value = np.asarray(weights[name], np.float32)
            if value.shape != shapes[path]:
                raise ValueError(f"weight {name}: expected shape {shapes[path]}, got {value.shape}")
            node = params
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = jnp.asarray(value)
        return params

    def get_weights(self, params: Params) -> Weights:
        return {_name(path): np.array(leaf, np.float32) for path, leaf in _flat(params).items()}

    def logits(self, params: Params, batch: Mapping[str, jax.Array], training: bool, rng: jax.Array | None,
               dtype: Any = jnp.float32) -> tuple[jax.Array, jax.Array]:
        """(B, T', vocab) logits in ``dtype`` and the (B,) encoder lengths; dropout only when training with ``rng``."""
        deterministic = not training or rng is None
        rngs = None if deterministic else {"dropout": rng}
        return self.net(dtype).apply({"params": params}, batch["features"],
                                     jnp.asarray(batch["feature_lengths"], jnp.int32), deterministic, rngs=rngs)

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

    def num_params(self, params: Params) -> int:
        return int(sum(leaf.size for leaf in jax.tree_util.tree_leaves(params)))
