"""MNIST CNN in PyTorch (``torch.nn``, NCHW), exchanging canonical (channels-last) weights."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from bakeoff.core.workload import Weights
from bakeoff.workloads.common import layouts
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
    # (H·W·C, classes) with rows in channels-last flatten order; torch's Linear holds (classes, C·H·W). The
    # mapping is a table of names (bakeoff.workloads.common.layouts), the transposes the layouts'.

    def _table(self) -> layouts.Table:
        s = feature_size(self.config)
        dense = layouts.flattened((s, s, self.config["filters"][-1]))  # the last map, channels-last (H, W, C)
        return {"conv1.kernel": ("conv1.weight", layouts.CONV), "conv1.bias": ("conv1.bias", layouts.AS_IS),
                "conv2.kernel": ("conv2.weight", layouts.CONV), "conv2.bias": ("conv2.bias", layouts.AS_IS),
                "dense.kernel": ("dense.weight", dense), "dense.bias": ("dense.bias", layouts.AS_IS)}

    def get_weights(self) -> Weights:
        state = {k: v.detach().float().cpu().numpy() for k, v in self.module.state_dict().items()}
        return layouts.to_canonical(state, self._table())

    @torch.no_grad()
    def set_weights(self, weights: Weights) -> None:
        params = dict(self.module.named_parameters())
        native = layouts.from_canonical(weights, self._table(), {k: tuple(p.shape) for k, p in params.items()})
        for name, value in native.items():
            params[name].copy_(torch.from_numpy(value))
