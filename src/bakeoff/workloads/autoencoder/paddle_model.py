"""Transformer autoencoder in Paddle (``paddle.nn``, dygraph), exchanging canonical weights.

The same computation as ``torch_model.py`` beside it (the block: :mod:`.common.paddle_encoder`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import paddle
from paddle import nn

from bakeoff.workloads.common import layouts
from bakeoff.workloads.common.paddle_encoder import EncoderBlock, PaddleModel, block_table


class TransformerAutoencoderNet(nn.Layer):
    def __init__(self, cfg: Mapping[str, Any]) -> None:
        super().__init__()
        d = cfg["d_model"]
        self.blocks = nn.LayerList([
            EncoderBlock(d, cfg["num_heads"], cfg["d_ff"], cfg["dropout"], cfg["layer_norm_eps"])
            for _ in range(cfg["num_layers"])])
        self.head = nn.Linear(d, d)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        for block in self.blocks:  # (B, T, d) throughout
            x = block(x)
        return self.head(x)  # (B, T, d) reconstruction


class TransformerAutoencoder(PaddleModel):
    """ModelImpl for Paddle."""

    def net(self) -> TransformerAutoencoderNet:
        return TransformerAutoencoderNet(self.config)

    def loss(self, batch: Mapping[str, paddle.Tensor], training: bool = True) -> tuple[paddle.Tensor, paddle.Tensor]:
        self.mode(training)
        x = batch["inputs"]
        summed = ((self.module(x).astype("float32") - x) ** 2).sum()  # squared error over every element, not a mean
        return summed, paddle.numel(x).astype("float32")  # the count: every element

    @paddle.no_grad()
    def outputs(self, batch: Mapping[str, paddle.Tensor]) -> paddle.Tensor:
        self.module.eval()
        return self.module(batch["inputs"]).astype("float32")

    # Canonical kernels are (in, out) for ``x @ kernel``, as Paddle's nn.Linear stores them.

    def table(self) -> layouts.Table:
        table: dict[str, tuple[str, layouts.Layout]] = {}
        for prefix, native in self.blocks().items():
            table.update(block_table(prefix, native))
        table["head.kernel"], table["head.bias"] = ("head.weight", layouts.AS_IS), ("head.bias", layouts.AS_IS)
        return table
