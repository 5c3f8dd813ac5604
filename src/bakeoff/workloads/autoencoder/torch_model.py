"""Transformer autoencoder in PyTorch (``torch.nn``), exchanging canonical weights."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from bakeoff.core.workload import Weights
from bakeoff.workloads.common.torch_encoder import encoder_layer, get_block_weights, put, set_block_weights, to_numpy


class TransformerAutoencoderNet(nn.Module):
    def __init__(self, cfg: Mapping[str, Any]) -> None:
        super().__init__()
        d = cfg["d_model"]
        # The snippet's nn.TransformerEncoder(layer, 2) only deep-copies the layer twice and runs the copies in
        # turn; a ModuleList of the same layers computes the same and names the blocks as the canonical weights do.
        self.blocks = nn.ModuleList(
            encoder_layer(d, cfg["num_heads"], cfg["d_ff"], cfg["dropout"], cfg["layer_norm_eps"])
            for _ in range(cfg["num_layers"]))
        self.head = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:  # (B, T, d) throughout
            x = block(x)
        return self.head(x)  # (B, T, d) reconstruction


class TransformerAutoencoder:
    """ModelImpl for PyTorch."""

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = torch.device(device)
        self.module: TransformerAutoencoderNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = TransformerAutoencoderNet(self.config).to(self.device)
        self.set_weights(weights)

    def loss(self, batch: Mapping[str, torch.Tensor], training: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        self.module.train(training)
        x = batch["inputs"]
        summed = ((self.module(x) - x) ** 2).sum()  # squared error over every element, not a mean
        return summed, torch.tensor(x.numel(), dtype=summed.dtype, device=summed.device)

    @torch.no_grad()
    def outputs(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        self.module.eval()
        return self.module(batch["inputs"]).float()

    def trainable(self) -> list[nn.Parameter]:
        return list(self.module.parameters())

    def num_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters() if p.requires_grad)

    # Canonical kernels are (in, out) for ``x @ kernel``; torch.nn.Linear stores (out, in).

    def get_weights(self) -> Weights:
        m = self.module
        w: Weights = {}
        for i, block in enumerate(m.blocks):
            w.update(get_block_weights(block, f"blocks.{i}."))
        w["head.kernel"], w["head.bias"] = to_numpy(m.head.weight).T.copy(), to_numpy(m.head.bias)
        return w

    def set_weights(self, weights: Weights) -> None:
        m = self.module
        for i, block in enumerate(m.blocks):
            set_block_weights(block, f"blocks.{i}.", weights)
        put(m.head.weight, weights["head.kernel"].T, "head.kernel")
        put(m.head.bias, weights["head.bias"], "head.bias")
