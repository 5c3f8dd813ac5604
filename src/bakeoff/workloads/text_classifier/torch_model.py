"""Transformer text classifier in PyTorch (``torch.nn``), exchanging canonical weights."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bakeoff.spec import Weights


class TextClassifierNet(nn.Module):
    def __init__(self, cfg: Mapping[str, Any], out_units: int) -> None:
        super().__init__()
        d = cfg["d_model"]
        self.tokens = nn.Embedding(cfg["vocab_size"], d)
        self.positions = nn.Parameter(torch.zeros(cfg["seq_len"], d))
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d, cfg["num_heads"], cfg["d_ff"], cfg["dropout"], activation="relu",
                                       layer_norm_eps=cfg["layer_norm_eps"], batch_first=True, norm_first=False)
            for _ in range(cfg["num_layers"]))
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

    # --- canonical weights -------------------------------------------------------------------------------
    # Canonical kernels are (in, out) for ``x @ kernel``; torch.nn.Linear stores (out, in), and
    # MultiheadAttention packs q, k, v into one (3d, d) in_proj_weight.

    def get_weights(self) -> Weights:
        m = self.module

        def np_(t: torch.Tensor) -> np.ndarray:
            return t.detach().float().cpu().numpy().copy()

        w: Weights = {"embed.tokens": np_(m.tokens.weight), "embed.positions": np_(m.positions)}
        for i, b in enumerate(m.blocks):
            p = f"blocks.{i}."
            qkv_w = np_(b.self_attn.in_proj_weight).reshape(3, -1, b.self_attn.embed_dim)
            qkv_b = np_(b.self_attn.in_proj_bias).reshape(3, -1)
            for j, name in enumerate("qkv"):
                w[p + f"attn.{name}.kernel"] = qkv_w[j].T.copy()
                w[p + f"attn.{name}.bias"] = qkv_b[j]
            w[p + "attn.o.kernel"] = np_(b.self_attn.out_proj.weight).T.copy()
            w[p + "attn.o.bias"] = np_(b.self_attn.out_proj.bias)
            w[p + "norm1.gamma"], w[p + "norm1.beta"] = np_(b.norm1.weight), np_(b.norm1.bias)
            w[p + "ffn.in.kernel"], w[p + "ffn.in.bias"] = np_(b.linear1.weight).T.copy(), np_(b.linear1.bias)
            w[p + "ffn.out.kernel"], w[p + "ffn.out.bias"] = np_(b.linear2.weight).T.copy(), np_(b.linear2.bias)
            w[p + "norm2.gamma"], w[p + "norm2.beta"] = np_(b.norm2.weight), np_(b.norm2.bias)
        w["head.kernel"], w["head.bias"] = np_(m.head.weight).T.copy(), np_(m.head.bias)
        return w

    @torch.no_grad()
    def set_weights(self, weights: Weights) -> None:
        m = self.module

        def put(param: torch.Tensor, value: np.ndarray) -> None:
            value = np.asarray(value, np.float32)
            if tuple(param.shape) != value.shape:
                raise ValueError(f"weight shape mismatch: expected {tuple(param.shape)}, got {value.shape}")
            param.copy_(torch.from_numpy(value))

        put(m.tokens.weight, weights["embed.tokens"])
        put(m.positions, weights["embed.positions"])
        for i, b in enumerate(m.blocks):
            p = f"blocks.{i}."
            put(b.self_attn.in_proj_weight,
                np.concatenate([weights[p + f"attn.{n}.kernel"].T for n in "qkv"], axis=0))
            put(b.self_attn.in_proj_bias, np.concatenate([weights[p + f"attn.{n}.bias"] for n in "qkv"]))
            put(b.self_attn.out_proj.weight, weights[p + "attn.o.kernel"].T)
            put(b.self_attn.out_proj.bias, weights[p + "attn.o.bias"])
            put(b.norm1.weight, weights[p + "norm1.gamma"])
            put(b.norm1.bias, weights[p + "norm1.beta"])
            put(b.linear1.weight, weights[p + "ffn.in.kernel"].T)
            put(b.linear1.bias, weights[p + "ffn.in.bias"])
            put(b.linear2.weight, weights[p + "ffn.out.kernel"].T)
            put(b.linear2.bias, weights[p + "ffn.out.bias"])
            put(b.norm2.weight, weights[p + "norm2.gamma"])
            put(b.norm2.bias, weights[p + "norm2.beta"])
        put(m.head.weight, weights["head.kernel"].T)
        put(m.head.bias, weights["head.bias"])
