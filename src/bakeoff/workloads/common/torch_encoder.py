"""``torch.nn.TransformerEncoderLayer`` ⇄ canonical encoder-block weights (names in :mod:`.encoder`), and the layer
with its training-time self-attention written as PyTorch's Transformer code writes it today (:class:`EncoderLayer`).

torch.nn.Linear stores ``(out, in)``, canonical kernels are ``(in, out)``; MultiheadAttention packs q, k, v into one
``(3d, d)`` ``in_proj_weight`` and ``(3d,)`` ``in_proj_bias``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bakeoff.core.workload import Weights
from bakeoff.workloads.common import layouts


class EncoderLayer(nn.TransformerEncoderLayer):
    """``nn.TransformerEncoderLayer`` whose self-attention in training is written as PyTorch's Transformer code
    writes it today (nanoGPT; transformers' BERT with ``attn_implementation="sdpa"``): one packed q, k, v projection
    of the batch-first input, the heads split by a view, ``F.scaled_dot_product_attention``, the output projection.
    ``nn.MultiheadAttention`` computes the same in a sequence-first layout and, inside a batch-first layer, pays for
    it with transposes and copies of q, k, v and of the output, forward and backward: with it bakeoff's PyTorch
    step ran at 0.90x transformers' ``BertEncoder`` at text_classifier/tiny with dropout 0 on both sides
    (bench/reference_efficiency.py, #25).

    The parameters, their names and the canonical weights are the layer's own (``self_attn.in_proj_weight`` packs
    q, k, v); inference keeps the layer's fused fast path (``aten::_transformer_encoder_layer_fwd``), which its
    ``forward`` takes before it would reach this method. ``_sa_block`` is the layer's own hook for its attention
    sub-block (private, stable since torch 1.12); tests/test_torch_encoder.py holds this one to the stock layer's
    outputs and gradients, so a torch release that changed its contract would fail there first.
    """

    def _sa_block(self, x: torch.Tensor, attn_mask: torch.Tensor | None, key_padding_mask: torch.Tensor | None,
                  is_causal: bool = False) -> torch.Tensor:
        attn = self.self_attn
        b, t, d = x.shape
        qkv = F.linear(x, attn.in_proj_weight, attn.in_proj_bias)  # (B, T, 3d)
        q, k, v = qkv.view(b, t, 3, attn.num_heads, d // attn.num_heads).permute(2, 0, 3, 1, 4)  # (B, h, T, hd)
        mask = _additive_mask(attn_mask, key_padding_mask)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=attn.dropout if self.training else 0.0,
                                           is_causal=is_causal and mask is None)  # (B, h, T, hd)
        return self.dropout1(attn.out_proj(y.transpose(1, 2).reshape(b, t, d)))  # (B, T, d)


def _additive_mask(attn_mask: torch.Tensor | None, key_padding_mask: torch.Tensor | None) -> torch.Tensor | None:
    """The layer's masks as SDPA adds them to the scores: ``forward`` has made both float (0 keep, -inf drop);
    a (B, T) key padding mask becomes (B, 1, 1, T), broadcast over heads and queries, plus a (T, T) attn_mask."""
    mask = None if key_padding_mask is None else key_padding_mask[:, None, None, :]
    if attn_mask is not None:
        mask = attn_mask if mask is None else mask + attn_mask
    return mask


def encoder_layer(d: int, heads: int, ff: int, dropout: float, eps: float) -> EncoderLayer:
    """The block as every workload builds it: batch-first, post-norm, relu."""
    return EncoderLayer(d, heads, ff, dropout, activation="relu", layer_norm_eps=eps, batch_first=True,
                        norm_first=False)


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
        w[prefix + canon + "kernel"] = layouts.DENSE.canonical(to_numpy(linear.weight)).copy()
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
        put(linear.weight, layouts.DENSE.native(weights[prefix + canon + "kernel"]), prefix + canon + "kernel")
        put(linear.bias, weights[prefix + canon + "bias"], prefix + canon + "bias")
    for canon, norm in (("norm1.", block.norm1), ("norm2.", block.norm2)):
        put(norm.weight, weights[prefix + canon + "gamma"], prefix + canon + "gamma")
        put(norm.bias, weights[prefix + canon + "beta"], prefix + canon + "beta")
