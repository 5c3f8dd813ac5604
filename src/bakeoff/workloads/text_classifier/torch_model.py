"""Transformer text classifier in PyTorch (``torch.nn``), exchanging canonical weights."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bakeoff.core.workload import Weights
from bakeoff.workloads.common.torch_encoder import encoder_layer, get_block_weights, put, set_block_weights, to_numpy


class TextClassifierNet(nn.Module):
    def __init__(self, cfg: Mapping[str, Any], out_units: int) -> None:
        super().__init__()
        d = cfg["d_model"]
        self.tokens = nn.Embedding(cfg["vocab_size"], d)
        self.positions = nn.Parameter(torch.zeros(cfg["seq_len"], d))
        layer = (d, cfg["num_heads"], cfg["d_ff"], cfg["dropout"], cfg["layer_norm_eps"])
        self.blocks = nn.ModuleList(encoder_layer(*layer) for _ in range(cfg["num_layers"]))
        self.drop = nn.Dropout(cfg["dropout"])
        self.head = nn.Linear(d, out_units)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pad = tokens == 0  # (B, T) True where padding
        x = self.tokens(tokens) + self.positions[: tokens.shape[1]]  # (B, T, d)
        for block in self.blocks:
            x = block(x, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(x.dtype)  # (B, T, 1)
        pooled = (x * keep).sum(1) / keep.sum(1)  # (B, d): mean over valid tokens only
        return self.head(self.drop(pooled))  # (B, out_units) logits


class TextClassifier:
    """ModelImpl for PyTorch."""

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = torch.device(device)
        self.out_units = 1 if config["num_classes"] == 2 else int(config["num_classes"])
        self.module: TextClassifierNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = TextClassifierNet(self.config, self.out_units).to(self.device)
        self.set_weights(weights)

    def loss(self, batch: Mapping[str, torch.Tensor], training: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        self.module.train(training)
        logits = self.module(batch["tokens"])
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

    # --- canonical weights: kernels (in, out); the Transformer blocks' mapping is shared (common.torch_encoder)

    def get_weights(self) -> Weights:
        m = self.module
        w: Weights = {"embed.tokens": to_numpy(m.tokens.weight), "embed.positions": to_numpy(m.positions)}
        for i, block in enumerate(m.blocks):
            w.update(get_block_weights(block, f"blocks.{i}."))
        w["head.kernel"], w["head.bias"] = to_numpy(m.head.weight).T.copy(), to_numpy(m.head.bias)
        return w

    def set_weights(self, weights: Weights) -> None:
        m = self.module
        put(m.tokens.weight, weights["embed.tokens"], "embed.tokens")
        put(m.positions, weights["embed.positions"], "embed.positions")
        for i, block in enumerate(m.blocks):
            set_block_weights(block, f"blocks.{i}.", weights)
        put(m.head.weight, weights["head.kernel"].T, "head.kernel")
        put(m.head.bias, weights["head.bias"], "head.bias")
