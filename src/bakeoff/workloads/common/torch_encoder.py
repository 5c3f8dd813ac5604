"""``torch.nn.TransformerEncoderLayer`` ⇄ canonical encoder-block weights (names in :mod:`.encoder`).

torch.nn.Linear stores ``(out, in)``, canonical kernels are ``(in, out)``; MultiheadAttention packs q, k, v into one
``(3d, d)`` ``in_proj_weight`` and ``(3d,)`` ``in_proj_bias``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from bakeoff.core.workload import Weights


def encoder_layer(d: int, heads: int, ff: int, dropout: float, eps: float) -> nn.TransformerEncoderLayer:
    """The block as every workload builds it: batch-first, post-norm, relu."""
    return nn.TransformerEncoderLayer(d, heads, ff, dropout, activation="relu", layer_norm_eps=eps,
                                      batch_first=True, norm_first=False)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy().copy()


@torch.no_grad()
def put(param: torch.Tensor, value: np.ndarray, name: str) -> None:
    """Copy a canonical array into a parameter of exactly the same shape."""
    value = np.asarray(value, np.float32)
    if tuple(param.shape) != value.shape:
        raise ValueError(f"weight {name}: expected shape {tuple(param.shape)}, got {value.shape}")
    param.copy_(torch.from_numpy(value))


def get_block_weights(block: nn.TransformerEncoderLayer, prefix: str) -> Weights:
    """The block's canonical weights, each name prefixed by ``prefix`` (e.g. ``"blocks.0."``)."""
    attn = block.self_attn
    w: Weights = {}
    qkv_w = to_numpy(attn.in_proj_weight).reshape(3, -1, attn.embed_dim)  # (3, d, d), each (out, in)
    qkv_b = to_numpy(attn.in_proj_bias).reshape(3, -1)
    for j, name in enumerate("qkv"):
        w[prefix + f"attn.{name}.kernel"], w[prefix + f"attn.{name}.bias"] = qkv_w[j].T.copy(), qkv_b[j]
    linears = {"attn.o.": attn.out_proj, "ffn.in.": block.linear1, "ffn.out.": block.linear2}
    for canon, linear in linears.items():
        w[prefix + canon + "kernel"] = to_numpy(linear.weight).T.copy()
        w[prefix + canon + "bias"] = to_numpy(linear.bias)
    for canon, norm in (("norm1.", block.norm1), ("norm2.", block.norm2)):
        w[prefix + canon + "gamma"], w[prefix + canon + "beta"] = to_numpy(norm.weight), to_numpy(norm.bias)
    return w


def set_block_weights(block: nn.TransformerEncoderLayer, prefix: str, weights: Mapping[str, np.ndarray]) -> None:
    """Load the canonical weights under ``prefix`` into the block; shapes must match exactly."""
    attn = block.self_attn
    put(attn.in_proj_weight, np.concatenate([weights[prefix + f"attn.{n}.kernel"].T for n in "qkv"]),
        prefix + "attn.{q,k,v}.kernel")
    put(attn.in_proj_bias, np.concatenate([weights[prefix + f"attn.{n}.bias"] for n in "qkv"]),
        prefix + "attn.{q,k,v}.bias")
    linears = {"attn.o.": attn.out_proj, "ffn.in.": block.linear1, "ffn.out.": block.linear2}
    for canon, linear in linears.items():
        put(linear.weight, weights[prefix + canon + "kernel"].T, prefix + canon + "kernel")
        put(linear.bias, weights[prefix + canon + "bias"], prefix + canon + "bias")
    for canon, norm in (("norm1.", block.norm1), ("norm2.", block.norm2)):
        put(norm.weight, weights[prefix + canon + "gamma"], prefix + canon + "gamma")
        put(norm.bias, weights[prefix + canon + "beta"], prefix + canon + "beta")
