"""The encoder block in Flax Linen, and canonical weights ⇄ Flax parameter trees (names in :mod:`.encoder`).

Why Linen rather than NNX: a Linen module holds no state, so the training step is a pure function of a params
pytree — what ``jax.jit``, ``jax.grad``, sharding and canonical weights all want, with nothing to split or merge
around them. NNX's mutable objects would be turned back into exactly such a pytree (``nnx.split``) at every jit
boundary.

Flax modules are named so that a parameter's path *is* its canonical name, joined with dots (``blocks.0`` /
``attn`` / ``q`` / ``kernel`` → ``blocks.0.attn.q.kernel``): Flax's Dense kernels are ``(in, out)`` and its Conv
kernels ``(kh, kw, in, out)``, the canonical layouts, so weights move unchanged. The only renames are Flax's own
leaf names: LayerNorm's ``scale``/``bias`` (canonical ``gamma``/``beta``) and Embed's ``embedding`` (the
module's name alone). Attention is written out rather than taken from ``nn.MultiHeadDotProductAttention``, whose
per-head ``(d, heads, head_dim)`` kernels would need reshaping, as Keras' do.

Mixed precision is Flax's: every module gets the compute ``dtype`` (bf16) while its parameters stay fp32
(``param_dtype``); softmax and LayerNorm statistics run in fp32, as under ``torch.autocast``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.traverse_util import flatten_dict, unflatten_dict

from bakeoff.core.workload import Weights, differing

Params = Any  # a Flax params pytree: nested dicts of fp32 arrays
Path = tuple[str, ...]


def layer_norm(eps: float, dtype: Any, name: str) -> nn.LayerNorm:
    """PyTorch's LayerNorm: two-pass variance (Flax's default ``E[x²] − E[x]²`` rounds differently)."""
    return nn.LayerNorm(epsilon=eps, dtype=dtype, use_fast_variance=False, name=name)


class HeadsDense(nn.Module):
    """A ``(d, d)`` Dense whose output is split into heads, ``(B, T, d) -> (B, T, heads, head_dim)``, computed as
    Flax's ``DenseGeneral`` computes its per-head projection (one einsum into the heads) while the parameters keep
    the canonical ``(d, d)`` kernel and ``(d,)`` bias. XLA then sees the attention's projections as the
    Flax examples' ``MultiHeadDotProductAttention`` gives them to it, rather than a Dense followed by a reshape:
    bakeoff's jitted step went from 0.95x to 1.00x the Flax-examples encoder at text_classifier/tiny, dropout 0
    (bench/reference_efficiency.py, #25)."""

    d: int
    heads: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        hd = self.d // self.heads
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (self.d, self.d), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (self.d,), jnp.float32)
        kernel = kernel.reshape(self.d, self.heads, hd).astype(self.dtype)
        return jnp.einsum("btd,dhc->bthc", x.astype(self.dtype), kernel) + bias.reshape(self.heads, hd).astype(
            self.dtype)


class MergeHeads(nn.Module):
    """The output projection from heads, ``(B, T, heads, head_dim) -> (B, T, d)``, with a canonical ``(d, d)``
    kernel: Flax's ``DenseGeneral(axis=(-2, -1))`` as :class:`HeadsDense` is its per-head projection."""

    d: int
    heads: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, y: jax.Array) -> jax.Array:
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (self.d, self.d), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (self.d,), jnp.float32)
        kernel = kernel.reshape(self.heads, self.d // self.heads, self.d).astype(self.dtype)
        return jnp.einsum("bthc,hcd->btd", y.astype(self.dtype), kernel) + bias.astype(self.dtype)


class SelfAttention(nn.Module):
    """Multi-head self-attention with q, k, v, o projections of ``(d, d)`` kernels, as PyTorch's packed one."""

    d: int
    heads: int
    rate: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array | None, deterministic: bool) -> jax.Array:
        hd = self.d // self.heads
        q, k, v = (HeadsDense(self.d, self.heads, self.dtype, name=n)(x) for n in "qkv")  # (B, T, heads, hd)
        logits = jnp.einsum("bqhc,bkhc->bhqk", q / np.sqrt(hd).astype(q.dtype), k)  # (B, heads, T, T)
        logits = logits.astype(jnp.float32)  # softmax in fp32, as autocast runs it
        if mask is not None:  # (B, 1, 1, T): True for keys that may be attended to
            logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
        weights = nn.Dropout(self.rate)(jax.nn.softmax(logits, -1), deterministic=deterministic)
        mixed = jnp.einsum("bhqk,bkhc->bqhc", weights.astype(self.dtype), v)  # (B, T, heads, hd)
        return MergeHeads(self.d, self.heads, self.dtype, name="o")(mixed)  # (B, T, d)


class FeedForward(nn.Module):
    d: int
    ff: int
    rate: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
        h = nn.relu(nn.Dense(self.ff, dtype=self.dtype, name="in")(x))  # (B, T, ff)
        return nn.Dense(self.d, dtype=self.dtype, name="out")(nn.Dropout(self.rate)(h, deterministic=deterministic))


class TransformerBlock(nn.Module):
    """Post-norm encoder block, the same computation as ``torch.nn.TransformerEncoderLayer`` (relu, batch first):
    ``x = LN1(x + Drop(MHA(x))); x = LN2(x + Drop(FFN(x)))``."""

    d: int
    heads: int
    ff: int
    rate: float
    eps: float
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array | None = None, deterministic: bool = True) -> jax.Array:
        a = SelfAttention(self.d, self.heads, self.rate, self.dtype, name="attn")(x, mask, deterministic)
        x = layer_norm(self.eps, self.dtype, "norm1")(x + nn.Dropout(self.rate)(a, deterministic=deterministic))
        f = FeedForward(self.d, self.ff, self.rate, self.dtype, name="ffn")(x, deterministic)
        return layer_norm(self.eps, self.dtype, "norm2")(x + nn.Dropout(self.rate)(f, deterministic=deterministic))


# --- canonical weights ⇄ params -------------------------------------------------------------------------------

_NORM_LEAVES = {"scale": "gamma", "bias": "beta"}


def canonical_name(path: Path) -> str:
    """A Flax parameter path's canonical name: the path joined with dots, Flax's own leaf names translated."""
    *modules, leaf = path
    if leaf == "embedding":  # nn.Embed's table: the module's name is the canonical one (embed.tokens)
        return ".".join(modules)
    if modules and modules[-1].startswith("norm"):
        leaf = _NORM_LEAVES[leaf]
    return ".".join([*modules, leaf])


class CanonicalParams:
    """The map between a model's Flax params tree and its canonical weights, read off the tree's structure.

    Built from the module's abstract init (``jax.eval_shape``: shapes only, nothing computed), so every Flax
    parameter has exactly one canonical name and shape, and a weight of the wrong shape or a missing or extra name
    is an error rather than a silently ignored entry.
    """

    def __init__(self, init: Callable[[], Params]) -> None:
        abstract = flatten_dict(jax.eval_shape(init))
        self.paths: dict[str, Path] = {canonical_name(p): p for p in abstract}
        self.shapes: dict[str, tuple[int, ...]] = {canonical_name(p): tuple(s.shape) for p, s in abstract.items()}
        assert len(self.paths) == len(abstract), "two Flax parameters map to one canonical name"

    def to_params(self, weights: Mapping[str, np.ndarray]) -> Params:
        if sorted(weights) != sorted(self.paths):
            raise ValueError(f"canonical weights differ from the model's: {differing(self.paths, weights)}")
        flat = {}
        for name, path in self.paths.items():
            value = np.asarray(weights[name], np.float32)
            if value.shape != self.shapes[name]:
                raise ValueError(f"weight {name}: expected shape {self.shapes[name]}, got {value.shape}")
            flat[path] = jnp.asarray(value)
        return unflatten_dict(flat)

    def to_weights(self, params: Params) -> Weights:
        flat = flatten_dict(params)
        return {name: np.asarray(flat[path], np.float32).copy() for name, path in sorted(self.paths.items())}

    def count(self) -> int:
        return int(sum(np.prod(s) for s in self.shapes.values()))


class FlaxModel:
    """What every JAX ModelImpl shares: canonical weights ⇄ params, the parameter count, and applying the Flax
    module in training or inference mode at a compute dtype. A workload's impl supplies :meth:`net` (the module
    at a compute dtype) and :meth:`example` (inputs the module's shapes are read from), then its loss and outputs.

    The contract is functional, unlike the stateful PyTorch and Keras impls: the engine holds the params and the
    impl's methods are pure functions of them, so they can be jitted, differentiated and sharded as they are.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = dict(config)
        self._canonical: CanonicalParams | None = None

    def net(self, dtype: Any = jnp.float32) -> nn.Module:
        """The Flax module computing at ``dtype`` (its parameters are fp32 whatever the dtype)."""
        raise NotImplementedError

    def example(self) -> tuple[jax.Array, ...]:
        """Inputs of one example, from which Flax reads every parameter's shape."""
        raise NotImplementedError

    @property
    def canonical(self) -> CanonicalParams:
        if self._canonical is None:  # built on first use: after the engine has chosen the platform
            self._canonical = CanonicalParams(
                lambda: self.net().init(jax.random.PRNGKey(0), *self.example())["params"])
        return self._canonical

    def init(self, weights: Weights) -> Params:
        return self.canonical.to_params(weights)

    def get_weights(self, params: Params) -> Weights:
        return self.canonical.to_weights(params)

    def num_params(self, params: Params) -> int:
        return int(sum(x.size for x in jax.tree.leaves(params)))

    def apply(self, params: Params, inputs: jax.Array, training: bool, rng: jax.Array | None,
              dtype: Any = jnp.float32) -> jax.Array:
        """The module's forward pass; dropout (training only) draws its masks from ``rng``."""
        rngs = {"dropout": rng} if training and rng is not None else {}
        return self.net(dtype).apply({"params": params}, inputs, deterministic=not training, rngs=rngs)
