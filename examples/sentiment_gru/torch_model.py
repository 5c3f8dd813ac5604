"""The GRU sentiment classifier in PyTorch (``nn.GRU``, batch first), exchanging canonical (Keras') weights.

Its weight mapping is a table of names (:mod:`bakeoff.workloads.common.layouts`): each canonical tensor, the
module's name for it, and its layout there (a dense kernel is ``(in, out)`` canonically, ``nn.Linear.weight``
``(out, in)``). The GRU's three canonical tensors become ``nn.GRU``'s four through ``layouts.gru_to_torch`` and
back through ``layouts.gru_from_torch``: the gates reordered from Keras' (z, r, n) to PyTorch's (r, z, n), the
kernels transposed, Keras' ``bias (2, 3h)`` split into ``bias_ih`` and ``bias_hh``. PyTorch's GRU computes
``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, which is Keras' ``reset_after=True``: the same cell, so outputs,
gradients and training agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bakeoff.core.workload import Weights
from bakeoff.workloads.common import layouts

TABLE: layouts.Table = {
    "embed.tokens": ("tokens.weight", layouts.AS_IS),
    "norm.gamma": ("norm.weight", layouts.AS_IS),
    "norm.beta": ("norm.bias", layouts.AS_IS),
    "dense.kernel": ("dense.weight", layouts.DENSE),
    "dense.bias": ("dense.bias", layouts.AS_IS),
    "out.kernel": ("out.weight", layouts.DENSE),
    "out.bias": ("out.bias", layouts.AS_IS),
}
"""canonical name -> (``SentimentGRUNet``'s parameter, its layout); the GRU's tensors go through :data:`GRU`."""

GRU = ("gru.weight_ih_l0", "gru.weight_hh_l0", "gru.bias_ih_l0", "gru.bias_hh_l0")
"""``nn.GRU``'s four tensors, in the order ``layouts.gru_to_torch`` returns them."""

ORDER = ("embed.tokens", "gru.kernel", "gru.recurrent_kernel", "gru.bias", "norm.gamma", "norm.beta",
         "dense.kernel", "dense.bias", "out.kernel", "out.bias")
"""The canonical names in the model's order (the workload's), so parity names the first disagreeing tensor."""


class SentimentGRUNet(nn.Module):
    def __init__(self, cfg: Mapping[str, Any], out_units: int) -> None:
        super().__init__()
        e, h = cfg["embed_dim"], cfg["units"]
        self.tokens = nn.Embedding(cfg["vocab_size"], e)
        self.gru = nn.GRU(e, h, batch_first=True)
        self.norm = nn.LayerNorm(h, eps=cfg["layer_norm_eps"])
        self.drop = nn.Dropout(cfg["dropout"])
        self.dense = nn.Linear(h, h)
        self.out = nn.Linear(h, out_units)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        keep = (tokens != 0).unsqueeze(-1)  # (B, T, 1) True for the review's tokens, False for padding
        x, _ = self.gru(self.tokens(tokens))  # (B, T, h): every step's output
        x = self.norm(x)
        keep = keep.to(x.dtype)
        pooled = (x * keep).sum(1) / keep.sum(1)  # (B, h): the mean over the review's tokens
        return self.out(F.relu(self.dense(self.drop(pooled))))  # (B, out_units) logits


class SentimentGRU:
    """ModelImpl for PyTorch."""

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = torch.device(device)
        self.out_units = 1 if config["num_classes"] == 2 else int(config["num_classes"])
        self.module: SentimentGRUNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = SentimentGRUNet(self.config, self.out_units).to(self.device)
        self.set_weights(weights)

    def loss(self, batch: Mapping[str, torch.Tensor], training: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        self.module.train(training)
        logits = self.module(batch["tokens"]).float()
        labels = batch["labels"]
        if self.out_units == 1:
            summed = F.binary_cross_entropy_with_logits(logits[:, 0], labels.to(logits.dtype), reduction="sum")
        else:
            summed = F.cross_entropy(logits, labels, reduction="sum")
        return summed, torch.tensor(labels.shape[0], dtype=summed.dtype, device=summed.device)

    @torch.no_grad()
    def outputs(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        self.module.eval()
        logits = self.module(batch["tokens"]).float()
        return torch.sigmoid(logits[:, 0]) if self.out_units == 1 else torch.softmax(logits, -1)

    def trainable(self) -> list[nn.Parameter]:
        return list(self.module.parameters())

    def num_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters() if p.requires_grad)

    def get_weights(self) -> Weights:
        state = {k: v.detach().float().cpu().numpy() for k, v in self.module.state_dict().items()}
        weights = layouts.to_canonical(state, TABLE)
        gru = layouts.gru_from_torch(*(state[name] for name in GRU))
        weights.update(zip(("gru.kernel", "gru.recurrent_kernel", "gru.bias"), gru, strict=True))
        return {name: weights[name] for name in ORDER}

    @torch.no_grad()
    def set_weights(self, weights: Weights) -> None:
        params = dict(self.module.named_parameters())
        shapes = {name: tuple(p.shape) for name, p in params.items()}
        native = layouts.from_canonical(weights, TABLE, shapes)
        gru = layouts.gru_to_torch(weights["gru.kernel"], weights["gru.recurrent_kernel"], weights["gru.bias"])
        native.update(zip(GRU, gru, strict=True))
        for name, value in native.items():
            if tuple(value.shape) != shapes[name]:
                raise ValueError(f"{name}: the model's shape is {shapes[name]}, the canonical weights give "
                                 f"{tuple(value.shape)}")
            params[name].copy_(torch.from_numpy(np.ascontiguousarray(value, np.float32)))
