"""The encoder block in Paddle (``paddle.nn``, dygraph), and canonical weights ⇄ a Paddle layer's parameters (names
in :mod:`.encoder`).

The block computes what ``common.torch_encoder.EncoderLayer`` computes, in the same order: one packed q, k, v
projection of the batch-first input, the heads split by a reshape, ``softmax(q kᵀ / √hd + mask)`` with dropout on the
attention weights, the output projection; then the post-norm residuals ``x = LN1(x + Drop(MHA(x)));
x = LN2(x + Drop(FFN(x)))`` with ``FFN = Linear(ff) → relu → Dropout → Linear(d)``. It is written out, as
nanoGPT writes its attention, rather than taken from ``paddle.nn.TransformerEncoderLayer``, whose attention projects
q, k and v with three matmuls (``q_proj``, ``k_proj``, ``v_proj``) where torch's layer does one.

Paddle's ``nn.Linear.weight`` is ``(in, out)`` for ``x @ weight``, the canonical kernel layout, so every weight moves
:data:`~bakeoff.workloads.common.layouts.AS_IS` through a table (:func:`block_table`) but q, k, v, which the packed
``attn.qkv.weight`` ``(d, 3d)`` holds side by side (``(3d,)`` bias).

Mixed precision is Paddle's O1 AMP (``paddle.amp.auto_cast``): matmuls run in bf16 over fp32 parameters. The
attention scores are cast to fp32 before the mask and softmax, as ``torch.autocast`` runs softmax.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn

from bakeoff.core.workload import Weights, differing
from bakeoff.workloads.common import layouts

MASKED = float(np.finfo(np.float32).min)
"""Added to the scores of padding keys: ``exp`` of it underflows to 0 as ``-inf`` does (torch's float mask), and a
row with every key masked gives a uniform average rather than NaN."""


class SelfAttention(nn.Layer):
    """Multi-head self-attention with torch's packed q, k, v projection ``qkv`` ``(d, 3d)`` and output ``o``."""

    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: paddle.Tensor, mask: paddle.Tensor | None) -> paddle.Tensor:
        # reshape's 0 keeps the input's size on that axis: batch and length stay symbolic under to_static
        qkv = self.qkv(x).reshape([0, 0, 3, self.heads, self.head_dim])  # (B, T, 3, h, hd)
        q, k, v = qkv.transpose([2, 0, 3, 1, 4]).unbind(0)  # each (B, h, T, hd)
        # q scaled before the product, as the Flax twin does: T/hd times fewer multiplications than the scores'
        scores = paddle.matmul(q * (1.0 / np.sqrt(self.head_dim)), k, transpose_y=True)  # (B, h, T, T)
        scores = scores.astype("float32")  # mask and softmax in fp32, as autocast runs softmax
        if mask is not None:  # (B, 1, 1, T): 0 for keys to attend to, MASKED for padding
            scores = scores + mask
        weights = self.drop(F.softmax(scores, axis=-1))
        y = paddle.matmul(weights.astype(v.dtype), v)  # (B, h, T, hd)
        return self.o(y.transpose([0, 2, 1, 3]).reshape([0, 0, self.heads * self.head_dim]))  # (B, T, d)


class EncoderBlock(nn.Layer):
    """Post-norm encoder block, relu, batch first: ``torch.nn.TransformerEncoderLayer``'s computation."""

    def __init__(self, d: int, heads: int, ff: int, dropout: float, eps: float) -> None:
        super().__init__()
        self.attn = SelfAttention(d, heads, dropout)
        self.norm1 = nn.LayerNorm(d, epsilon=eps)
        self.ffn_in, self.ffn_out = nn.Linear(d, ff), nn.Linear(ff, d)
        self.norm2 = nn.LayerNorm(d, epsilon=eps)
        self.drop, self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: paddle.Tensor, mask: paddle.Tensor | None = None) -> paddle.Tensor:
        x = self.norm1(x + self.drop1(self.attn(x, mask)))  # (B, T, d)
        return self.norm2(x + self.drop2(self.ffn_out(self.drop(F.relu(self.ffn_in(x))))))


def padding_mask(pad: paddle.Tensor) -> paddle.Tensor:
    """A (B, T) padding mask (True at padding) as the scores' additive (B, 1, 1, T) mask, broadcast over heads and
    queries, as torch's layer turns ``src_key_padding_mask`` into one."""
    return (pad.astype("float32") * MASKED).unsqueeze([1, 2])


# --- canonical weights ⇄ parameters --------------------------------------------------------------------------

_PACKED = ("q", "k", "v")


def block_table(prefix: str, native: str) -> layouts.Table:
    """One block's canonical names under ``prefix`` → its parameters' structured names under ``native`` (the
    block's path in the model), all as they are; q, k and v are :func:`get_weights`' and :func:`set_weights`' to
    pack."""
    table: dict[str, tuple[str, layouts.Layout]] = {}
    for canon, layer in (("attn.o", "attn.o"), ("ffn.in", "ffn_in"), ("ffn.out", "ffn_out")):
        table[f"{prefix}{canon}.kernel"] = (f"{native}{layer}.weight", layouts.AS_IS)
        table[f"{prefix}{canon}.bias"] = (f"{native}{layer}.bias", layouts.AS_IS)
    for norm in ("norm1", "norm2"):
        table[f"{prefix}{norm}.gamma"] = (f"{native}{norm}.weight", layouts.AS_IS)
        table[f"{prefix}{norm}.beta"] = (f"{native}{norm}.bias", layouts.AS_IS)
    return table


def to_numpy(t: paddle.Tensor) -> np.ndarray:
    return t.detach().astype("float32").numpy().copy()


def put(param: paddle.Tensor, value: np.ndarray, name: str) -> None:
    """Copy a canonical array into a parameter of exactly the same shape (on the parameter's own device)."""
    value = np.ascontiguousarray(value, np.float32)
    if tuple(param.shape) != value.shape:
        raise ValueError(f"weight {name}: expected shape {tuple(param.shape)}, got {value.shape}")
    if param.dtype == paddle.float32:
        param.set_value(value)
    else:  # parameters AMP's O2 has cast to bf16 or fp16: numpy has no bf16, so cast on the device
        param.set_value(paddle.to_tensor(value, place=param.place).astype(param.dtype))


def get_weights(module: nn.Layer, table: layouts.Table, blocks: Mapping[str, str]) -> Weights:
    """The model's canonical weights: ``table``'s through their layouts, and each block's q, k, v from its packed
    projection (``blocks``: canonical prefix → the block's structured name, e.g. ``{"blocks.0.": "blocks.0."}``)."""
    params = {name: to_numpy(p) for name, p in module.named_parameters()}
    w = layouts.to_canonical(params, table)
    for prefix, native in blocks.items():
        kernels = np.split(params[f"{native}attn.qkv.weight"], 3, axis=1)  # (d, 3d) -> 3 × (d, d), each (in, out)
        biases = np.split(params[f"{native}attn.qkv.bias"], 3)
        for name, kernel, bias in zip(_PACKED, kernels, biases, strict=True):
            w[f"{prefix}attn.{name}.kernel"], w[f"{prefix}attn.{name}.bias"] = kernel.copy(), bias.copy()
    return w


def set_weights(module: nn.Layer, table: layouts.Table, blocks: Mapping[str, str], weights: Weights) -> None:
    """Load canonical weights into the model; every parameter must be given, each of exactly its shape."""
    params = dict(module.named_parameters())
    expected = set(table) | {f"{p}attn.{n}.{leaf}" for p in blocks for n in _PACKED for leaf in ("kernel", "bias")}
    if set(weights) != expected:
        raise ValueError(f"canonical weights differ from the model's: {differing(expected, weights)}")
    native = layouts.from_canonical(weights, table, {name: p.shape for name, p in params.items()})
    for prefix, block in blocks.items():
        native[f"{block}attn.qkv.weight"] = np.concatenate(
            [weights[f"{prefix}attn.{n}.kernel"] for n in _PACKED], axis=1)
        native[f"{block}attn.qkv.bias"] = np.concatenate([weights[f"{prefix}attn.{n}.bias"] for n in _PACKED])
    if set(native) != set(params):
        raise ValueError(f"the table misses parameters of the model: {differing(params, native)}")
    for name, value in native.items():
        put(params[name], value, name)


class PaddleModel:
    """What every Paddle ModelImpl of an encoder workload shares: the module's device, its trainable parameters,
    and canonical weights through a table (:meth:`table`, :meth:`blocks`) a workload's impl supplies with
    :meth:`net`."""

    def __init__(self, config: Mapping[str, Any], device: str | None = None) -> None:
        self.config = dict(config)
        self.device = device  # a Paddle place ("cpu", "gpu:0"); None: Paddle's current device
        self.module: nn.Layer | None = None

    def net(self) -> nn.Layer:
        raise NotImplementedError

    def table(self) -> layouts.Table:
        """Canonical name → (structured parameter name, layout), every parameter but the packed q, k, v."""
        raise NotImplementedError

    def blocks(self) -> dict[str, str]:
        """Canonical prefix → structured name of each encoder block."""
        return {f"blocks.{i}.": f"blocks.{i}." for i in range(self.config["num_layers"])}

    def build(self, weights: Weights) -> None:
        self.module = self.net()
        if self.device is not None:
            self.module.to(device=self.device)
        self.set_weights(weights)

    def mode(self, training: bool) -> None:
        """Training (dropout on) or inference mode: Paddle's ``train()`` and ``eval()``, which take no flag."""
        if training:
            self.module.train()
        else:
            self.module.eval()

    def trainable(self) -> list[paddle.Tensor]:
        return [p for p in self.module.parameters() if not p.stop_gradient]

    def num_params(self) -> int:
        return sum(int(np.prod(p.shape)) for p in self.trainable())

    def get_weights(self) -> Weights:
        return get_weights(self.module, self.table(), self.blocks())

    def set_weights(self, weights: Weights) -> None:
        set_weights(self.module, self.table(), self.blocks(), weights)
