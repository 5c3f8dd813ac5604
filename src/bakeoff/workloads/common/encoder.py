"""The post-norm Transformer encoder block shared by workloads: canonical weight names and numpy initialisation.

One block computes ``x = LN1(x + Drop(MHA(x))); x = LN2(x + Drop(FFN(x)))`` with ``FFN = Dense(ff, relu) → Dense(d)``,
as ``torch.nn.TransformerEncoderLayer(batch_first=True, norm_first=False, activation="relu")`` does. Its canonical
weights, under a prefix such as ``"blocks.0."``, are (kernels ``(in, out)`` for ``x @ kernel``)::

    attn.{q,k,v,o}.kernel (d, d)   attn.{q,k,v,o}.bias (d,)   norm1.gamma, norm1.beta (d,)
    ffn.in.kernel (d, ff)  ffn.in.bias (ff,)  ffn.out.kernel (ff, d)  ffn.out.bias (d,)  norm2.gamma, norm2.beta (d,)

The framework halves live in :mod:`.torch_encoder` and :mod:`.tf_encoder`.
"""

from __future__ import annotations

import numpy as np

from bakeoff.core.workload import Weights

LAYER_NORM_EPS = 1e-5  # pinned in both frameworks (Keras defaults to 1e-3, PyTorch to 1e-5)


def glorot(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    """Glorot-uniform ``(fan_in, fan_out)`` kernel, Keras' default initialiser for Dense."""
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=(fan_in, fan_out)).astype(np.float32)


def init_encoder_block(rng: np.random.Generator, prefix: str, d: int, ff: int) -> Weights:
    """One block's initial canonical weights: Glorot kernels drawn in the order q, k, v, o, ffn.in, ffn.out;
    zero biases; LayerNorm gamma 1, beta 0."""
    zeros, ones = (lambda n: np.zeros(n, np.float32)), (lambda n: np.ones(n, np.float32))
    w: Weights = {}
    for name in ("q", "k", "v", "o"):
        w[prefix + f"attn.{name}.kernel"], w[prefix + f"attn.{name}.bias"] = glorot(rng, d, d), zeros(d)
    w[prefix + "norm1.gamma"], w[prefix + "norm1.beta"] = ones(d), zeros(d)
    w[prefix + "ffn.in.kernel"], w[prefix + "ffn.in.bias"] = glorot(rng, d, ff), zeros(ff)
    w[prefix + "ffn.out.kernel"], w[prefix + "ffn.out.bias"] = glorot(rng, ff, d), zeros(d)
    w[prefix + "norm2.gamma"], w[prefix + "norm2.beta"] = ones(d), zeros(d)
    return w


def encoder_block_flops(d: int, ff: int, t: int) -> float:
    """Forward FLOPs of one block on a length-``t`` sequence: 2·(matmul weights)·t plus attention 4·t²·d."""
    return float(2 * t * (4 * d * d + 2 * d * ff) + 4 * t * t * d)
