"""MNIST CNN in PyTorch (``torch.nn``, NCHW), exchanging canonical (channels-last) weights."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bakeoff.core.workload import Weights
from bakeoff.workloads.mnist.workload import feature_size


class MnistCNNNet(nn.Module):
    def __init__(self, cfg: Mapping[str, Any]) -> None:
        super().__init__()
        c1, c2 = cfg["filters"]
        k = cfg["kernel_size"]
        self.conv1 = nn.Conv2d(1, c1, k)  # valid padding, stride 1
        self.conv2 = nn.Conv2d(c1, c2, k)
        self.pool = nn.MaxPool2d(2)
        self.drop = nn.Dropout(cfg["dropout"])
        self.dense = nn.Linear(feature_size(cfg) ** 2 * c2, cfg["num_classes"])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.unsqueeze(1)  # (B, 1, 28, 28)
        x = self.pool(F.relu(self.conv1(x)))  # (B, c1, 13, 13)
        x = self.pool(F.relu(self.conv2(x)))  # (B, c2, 5, 5)
        return self.dense(self.drop(x.flatten(1)))  # (B, 10) logits; features in (C, H, W) order


class MnistCNN:
    """ModelImpl for PyTorch."""

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = torch.device(device)
        self.module: MnistCNNNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = MnistCNNNet(self.config).to(self.device)
        self.set_weights(weights)

    def loss(self, batch: Mapping[str, torch.Tensor], training: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        self.module.train(training)
        labels = batch["labels"]
        summed = F.cross_entropy(self.module(batch["images"]), labels, reduction="sum")
        return summed, torch.tensor(labels.shape[0], dtype=summed.dtype, device=summed.device)

    @torch.no_grad()
    def outputs(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        self.module.eval()
        return torch.softmax(self.module(batch["images"]).float(), -1)

    def trainable(self) -> list[nn.Parameter]:
        return list(self.module.parameters())

    def num_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters() if p.requires_grad)

    # --- canonical weights -------------------------------------------------------------------------------
    # Canonical conv kernels are (kh, kw, in, out), torch's (out, in, kh, kw). The canonical dense kernel is
    # (H·W·C, classes) with rows in channels-last flatten order; torch's Linear holds (classes, C·H·W).

    def _flat_shape(self) -> tuple[int, int, int]:
        s = feature_size(self.config)
        return s, s, self.config["filters"][-1]  # (H, W, C)

    def get_weights(self) -> Weights:
        m = self.module

        def np_(t: torch.Tensor) -> np.ndarray:
            return t.detach().float().cpu().numpy()

        h, w_, c = self._flat_shape()
        dense = np_(m.dense.weight).reshape(-1, c, h, w_)  # (classes, C, H, W)
        return {
            "conv1.kernel": np_(m.conv1.weight).transpose(2, 3, 1, 0).copy(), "conv1.bias": np_(m.conv1.bias).copy(),
            "conv2.kernel": np_(m.conv2.weight).transpose(2, 3, 1, 0).copy(), "conv2.bias": np_(m.conv2.bias).copy(),
            "dense.kernel": dense.transpose(2, 3, 1, 0).reshape(h * w_ * c, -1).copy(),
            "dense.bias": np_(m.dense.bias).copy(),
        }

    @torch.no_grad()
    def set_weights(self, weights: Weights) -> None:
        m = self.module

        def put(param: torch.Tensor, value: np.ndarray, name: str) -> None:
            value = np.ascontiguousarray(value, np.float32)
            if tuple(param.shape) != value.shape:
                raise ValueError(f"weight {name}: expected shape {tuple(param.shape)}, got {value.shape}")
            param.copy_(torch.from_numpy(value))

        h, w_, c = self._flat_shape()
        for name, conv in (("conv1", m.conv1), ("conv2", m.conv2)):
            put(conv.weight, np.asarray(weights[f"{name}.kernel"]).transpose(3, 2, 0, 1), f"{name}.kernel")
            put(conv.bias, weights[f"{name}.bias"], f"{name}.bias")
        dense = np.asarray(weights["dense.kernel"])
        if dense.shape[0] != h * w_ * c:
            raise ValueError(f"weight dense.kernel: expected {h * w_ * c} rows, got shape {dense.shape}")
        put(m.dense.weight, dense.reshape(h, w_, c, -1).transpose(3, 2, 0, 1).reshape(dense.shape[1], -1),
            "dense.kernel")
        put(m.dense.bias, weights["dense.bias"], "dense.bias")
