"""Transformer text classifier in Paddle (``paddle.nn``, dygraph), exchanging canonical weights.

The same computation as ``torch_model.py`` beside it, layer for layer (the block: :mod:`.common.paddle_encoder`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import paddle
import paddle.nn.functional as F
from paddle import nn

from bakeoff.workloads.common import layouts
from bakeoff.workloads.common.paddle_encoder import EncoderBlock, PaddleModel, block_table, padding_mask


class TextClassifierNet(nn.Layer):
    def __init__(self, cfg: Mapping[str, Any], out_units: int) -> None:
        super().__init__()
        d = cfg["d_model"]
        self.tokens = nn.Embedding(cfg["vocab_size"], d)
        self.positions = self.create_parameter([cfg["seq_len"], d], default_initializer=nn.initializer.Constant(0.0))
        layer = (d, cfg["num_heads"], cfg["d_ff"], cfg["dropout"], cfg["layer_norm_eps"])
        self.blocks = nn.LayerList([EncoderBlock(*layer) for _ in range(cfg["num_layers"])])
        self.drop = nn.Dropout(cfg["dropout"])
        self.head = nn.Linear(d, out_units)

    def forward(self, tokens: paddle.Tensor) -> paddle.Tensor:
        pad = tokens == 0  # (B, T) True where padding
        x = self.tokens(tokens) + self.positions[: tokens.shape[1]]  # (B, T, d)
        mask = padding_mask(pad)  # (B, 1, 1, T)
        for block in self.blocks:
            x = block(x, mask)
        keep = paddle.logical_not(pad).unsqueeze(-1).astype(x.dtype)  # (B, T, 1)
        pooled = (x * keep).sum(1) / keep.sum(1)  # (B, d): mean over valid tokens only
        return self.head(self.drop(pooled))  # (B, out_units) logits


class TextClassifier(PaddleModel):
    """ModelImpl for Paddle."""

    def __init__(self, config: Mapping[str, Any], device: str | None = None) -> None:
        super().__init__(config, device)
        self.out_units = 1 if config["num_classes"] == 2 else int(config["num_classes"])

    def net(self) -> TextClassifierNet:
        return TextClassifierNet(self.config, self.out_units)

    def loss(self, batch: Mapping[str, paddle.Tensor], training: bool = True) -> tuple[paddle.Tensor, paddle.Tensor]:
        self.mode(training)
        logits = self.module(batch["tokens"]).astype("float32")  # the loss in fp32, as autocast computes it
        labels = batch["labels"]
        if self.out_units == 1:
            summed = F.binary_cross_entropy_with_logits(logits[:, 0], labels.astype("float32"), reduction="sum")
        else:
            summed = F.cross_entropy(logits, labels, reduction="sum")
        return summed, paddle.numel(labels).astype("float32")  # the count: one per example

    @paddle.no_grad()
    def outputs(self, batch: Mapping[str, paddle.Tensor]) -> paddle.Tensor:
        self.module.eval()
        logits = self.module(batch["tokens"]).astype("float32")
        return F.sigmoid(logits[:, 0]) if self.out_units == 1 else F.softmax(logits, axis=-1)

    # --- canonical weights: Paddle's kernels are (in, out) already; the blocks' table is common.paddle_encoder's

    def table(self) -> layouts.Table:
        table: dict[str, tuple[str, layouts.Layout]] = {
            "embed.tokens": ("tokens.weight", layouts.AS_IS), "embed.positions": ("positions", layouts.AS_IS)}
        for prefix, native in self.blocks().items():
            table.update(block_table(prefix, native))
        table["head.kernel"], table["head.bias"] = ("head.weight", layouts.AS_IS), ("head.bias", layouts.AS_IS)
        return table
