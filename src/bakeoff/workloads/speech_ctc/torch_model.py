"""Convolution + Transformer CTC acoustic model in PyTorch (``torch.nn``), exchanging canonical weights."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bakeoff.core.workload import Weights
from bakeoff.workloads.common import layouts
from bakeoff.workloads.common.torch_encoder import encoder_layer
from bakeoff.workloads.speech_ctc.workload import sinusoids


def _mask_past(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Zero the frames of ``x`` (B, C, T) at or past each utterance's length."""
    valid = torch.arange(x.shape[-1], device=x.device)[None, :] < lengths[:, None]  # (B, T)
    return x * valid[:, None, :].to(x.dtype)


class SpeechCTCNet(nn.Module):
    def __init__(self, cfg: Mapping[str, Any]) -> None:
        super().__init__()
        d = cfg["d_model"]
        self.conv1 = nn.Conv1d(cfg["n_mels"], cfg["conv_channels"], 3, stride=2, padding=1)
        self.conv2 = nn.Conv1d(cfg["conv_channels"], d, 3, stride=2, padding=1)
        self.register_buffer("positions", torch.from_numpy(sinusoids(cfg["max_positions"], d)), persistent=False)
        self.blocks = nn.ModuleList(
            encoder_layer(d, cfg["num_heads"], cfg["d_ff"], cfg["dropout"], cfg["layer_norm_eps"])
            for _ in range(cfg["num_layers"]))
        self.drop = nn.Dropout(cfg["dropout"])
        self.head = nn.Linear(d, cfg["vocab_size"])

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = features.transpose(1, 2)  # (B, n_mels, T): Conv1d wants channels first
        lengths = (lengths + 1) // 2
        x = _mask_past(F.relu(self.conv1(x)), lengths)  # (B, C, ceil(T/2))
        lengths = (lengths + 1) // 2
        x = _mask_past(F.relu(self.conv2(x)), lengths)  # (B, d, T'), T' = ceil(ceil(T/2)/2)
        x = x.transpose(1, 2)  # (B, T', d)
        x = self.drop(x + self.positions[: x.shape[1]])
        pad = torch.arange(x.shape[1], device=x.device)[None, :] >= lengths[:, None]  # (B, T') True = padding
        for block in self.blocks:
            x = block(x, src_key_padding_mask=pad)
        return self.head(x), lengths  # (B, T', vocab) logits, (B,) encoder lengths


class SpeechCTC:
    """ModelImpl for PyTorch."""

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = torch.device(device)
        self.module: SpeechCTCNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = SpeechCTCNet(self.config).to(self.device)
        self.set_weights(weights)

    def logits(self, batch: Mapping[str, torch.Tensor], training: bool) -> tuple[torch.Tensor, torch.Tensor]:
        self.module.train(training)
        return self.module(batch["features"], batch["feature_lengths"].long())

    def loss(self, batch: Mapping[str, torch.Tensor], training: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        logits, lengths = self.logits(batch, training)
        # torch.compile breaks the graph at ctc_loss (its output shape depends on the label lengths, data): the
        # step compiles as 3 graphs, with the CTC op run eagerly between them, as for any user of this op.
        log_probs = F.log_softmax(logits.float(), -1).transpose(0, 1)  # (T', B, vocab): ctc_loss is time-major
        summed = F.ctc_loss(log_probs, batch["labels"].long(), lengths, batch["label_lengths"].long(), blank=0,
                            reduction="sum", zero_infinity=False)
        return summed, torch.tensor(logits.shape[0], dtype=summed.dtype, device=summed.device)

    @torch.no_grad()
    def outputs(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        logits, lengths = self.logits(batch, training=False)
        valid = torch.arange(logits.shape[1], device=logits.device)[None, :] < lengths[:, None]  # (B, T')
        return F.log_softmax(logits.float(), -1) * valid[..., None]  # (B, T', vocab), zero past the length

    def trainable(self) -> list[nn.Parameter]:
        return list(self.module.parameters())

    def num_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters() if p.requires_grad)

    # --- canonical weights -------------------------------------------------------------------------------
    # Canonical kernels are (in, out) for ``x @ kernel`` and (width, in, out) for convolutions; nn.Linear stores
    # (out, in), nn.Conv1d (out, in, width), and MultiheadAttention packs q, k, v into one (3d, d) in_proj_weight.

    def _pairs(self) -> list[tuple[str, torch.Tensor, str]]:
        """(canonical name, parameter, layout) with layout "" (as is), "T" (2-D transpose) or "conv"."""
        m = self.module
        rows = [("frontend.conv1.kernel", m.conv1.weight, "conv"), ("frontend.conv1.bias", m.conv1.bias, ""),
                ("frontend.conv2.kernel", m.conv2.weight, "conv"), ("frontend.conv2.bias", m.conv2.bias, "")]
        for i, b in enumerate(m.blocks):
            p = f"blocks.{i}."
            rows += [(p + "attn.o.kernel", b.self_attn.out_proj.weight, "T"),
                     (p + "attn.o.bias", b.self_attn.out_proj.bias, ""),
                     (p + "norm1.gamma", b.norm1.weight, ""), (p + "norm1.beta", b.norm1.bias, ""),
                     (p + "ffn.in.kernel", b.linear1.weight, "T"), (p + "ffn.in.bias", b.linear1.bias, ""),
                     (p + "ffn.out.kernel", b.linear2.weight, "T"), (p + "ffn.out.bias", b.linear2.bias, ""),
                     (p + "norm2.gamma", b.norm2.weight, ""), (p + "norm2.beta", b.norm2.bias, "")]
        rows += [("head.kernel", m.head.weight, "T"), ("head.bias", m.head.bias, "")]
        return rows

    @staticmethod
    def _relayout(value: np.ndarray, layout: str, to_torch: bool = False) -> np.ndarray:
        """Torch layout to canonical, or back with ``to_torch`` (bakeoff.workloads.common.layouts)."""
        move = {"T": layouts.DENSE, "conv": layouts.CONV}.get(layout, layouts.AS_IS)
        return np.ascontiguousarray(move.native(value) if to_torch else move.canonical(value))

    def get_weights(self) -> Weights:
        w: Weights = {}
        for name, param, layout in self._pairs():
            w[name] = self._relayout(param.detach().float().cpu().numpy(), layout).copy()
        for i, b in enumerate(self.module.blocks):
            d = b.self_attn.embed_dim
            qkv_w = b.self_attn.in_proj_weight.detach().float().cpu().numpy().reshape(3, d, d)
            qkv_b = b.self_attn.in_proj_bias.detach().float().cpu().numpy().reshape(3, d)
            for j, n in enumerate("qkv"):
                w[f"blocks.{i}.attn.{n}.kernel"], w[f"blocks.{i}.attn.{n}.bias"] = qkv_w[j].T.copy(), qkv_b[j].copy()
        return w

    @torch.no_grad()
    def set_weights(self, weights: Weights) -> None:
        def put(param: torch.Tensor, value: np.ndarray, name: str) -> None:
            value = np.ascontiguousarray(value, np.float32)
            if tuple(param.shape) != value.shape:
                raise ValueError(f"weight {name}: expected shape {tuple(param.shape)}, got {value.shape}")
            param.copy_(torch.from_numpy(value))

        for name, param, layout in self._pairs():
            put(param, self._relayout(np.asarray(weights[name], np.float32), layout, to_torch=True), name)
        for i, b in enumerate(self.module.blocks):
            p = f"blocks.{i}.attn."
            put(b.self_attn.in_proj_weight, np.concatenate([weights[p + f"{n}.kernel"].T for n in "qkv"]), p + "qkv")
            put(b.self_attn.in_proj_bias, np.concatenate([weights[p + f"{n}.bias"] for n in "qkv"]), p + "qkv.bias")
