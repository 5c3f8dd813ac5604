"""The residual CNN in PyTorch (NCHW), exchanging canonical (Keras', channels-last) weights.

Its weight mapping is a table of names (:mod:`bakeoff.workloads.common.layouts`): convolution kernels through
``layouts.CONV``, the dense kernel after the flatten through ``layouts.flattened``, each BatchNorm's four tensors by
``layouts.NORM_NAMES`` (Keras' ``moving_variance`` is PyTorch's ``running_var``).

Two things the table cannot fix. PyTorch's BatchNorm momentum is the weight of the new batch, Keras' the weight of
the old running value: ``layouts.torch_bn_momentum`` turns the workload's 0.99 (Keras') into 0.01. And
``nn.BatchNorm2d`` keeps an *unbiased* running variance (``n / (n - 1)`` times the batch's, n the values a channel
has in a batch), Keras the biased one: small at these sizes (n = 32·13·13 in the block) but not zero, and larger
for small batches or maps. So BatchNorm here is :class:`KerasBatchNorm2d`: it normalises with the batch's
statistics through ``F.batch_norm`` (the kernel ``nn.BatchNorm2d`` runs) and keeps its running statistics itself,
biased, as Keras does.
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
from residual_cnn.workload import FEATURES

NAMES = layouts.NORM_NAMES


def table(channels: int) -> layouts.Table:
    """canonical name -> (``ResidualCNNNet``'s parameter or buffer, its layout)."""
    return {
        "stem.kernel": ("stem.weight", layouts.CONV), **_norm_rows("stem.bn", "bn"),
        "block.conv1.kernel": ("block.conv1.weight", layouts.CONV), **_norm_rows("block.bn1", "block.bn1"),
        "block.conv2.kernel": ("block.conv2.weight", layouts.CONV), **_norm_rows("block.bn2", "block.bn2"),
        # the dense after a flatten: rows in (H, W, C) order canonically, PyTorch flattens (C, H, W)
        "head.kernel": ("head.weight", layouts.flattened((FEATURES, FEATURES, channels))),
        "head.bias": ("head.bias", layouts.AS_IS),
    }


def _norm_rows(prefix: str, native: str) -> layouts.Table:
    """One BatchNorm's rows: Keras' names under ``prefix`` (canonical) -> PyTorch's under ``native``, as they are."""
    return {f"{prefix}.{NAMES['keras'][part]}": (f"{native}.{NAMES['torch'][part]}", layouts.AS_IS)
            for part in ("scale", "offset", "mean", "variance")}


class KerasBatchNorm2d(nn.Module):
    """BatchNorm over NCHW channels that keeps its running statistics as Keras does: ``running = (1 - m) *
    running + m * batch`` with the *biased* batch variance, ``m`` PyTorch's momentum (the new batch's weight)."""

    def __init__(self, channels: int, momentum: float, eps: float) -> None:
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0,
                                self.eps)
        with torch.no_grad():  # the statistics are trained by the forward pass, not by gradients
            var, mean = torch.var_mean(x.float(), dim=(0, 2, 3), correction=0)  # biased, as Keras keeps it
            self.running_mean.mul_(1 - self.momentum).add_(self.momentum * mean)
            self.running_var.mul_(1 - self.momentum).add_(self.momentum * var)
        return F.batch_norm(x, None, None, self.weight, self.bias, True, 0.0, self.eps)  # the batch's statistics


class ResidualBlock(nn.Module):
    def __init__(self, c: int, momentum: float, eps: float) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)  # "same": Keras' padding for stride 1, kernel 3
        self.bn1 = KerasBatchNorm2d(c, momentum, eps)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = KerasBatchNorm2d(c, momentum, eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(x + y)


class ResidualCNNNet(nn.Module):
    def __init__(self, cfg: Mapping[str, Any]) -> None:
        super().__init__()
        c, eps = cfg["filters"], cfg["bn_epsilon"]
        momentum = layouts.torch_bn_momentum(cfg["bn_momentum"])  # Keras' 0.99 is PyTorch's 0.01
        self.stem = nn.Conv2d(1, c, 3, bias=False)  # valid padding, stride 1
        self.bn = KerasBatchNorm2d(c, momentum, eps)
        self.block = ResidualBlock(c, momentum, eps)
        self.head = nn.Linear(FEATURES * FEATURES * c, cfg["num_classes"])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.unsqueeze(1)  # (B, 1, 28, 28)
        x = F.max_pool2d(F.relu(self.bn(self.stem(x))), 2)  # (B, c, 13, 13)
        x = F.max_pool2d(self.block(x), 2)  # (B, c, 6, 6)
        return self.head(x.flatten(1))  # (B, 10) logits; features in (C, H, W) order


class ResidualCNN:
    """ModelImpl for PyTorch."""

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = torch.device(device)
        self.module: ResidualCNNNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = ResidualCNNNet(self.config).to(self.device)
        self.set_weights(weights)

    def loss(self, batch: Mapping[str, torch.Tensor], training: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        self.module.train(training)
        labels = batch["labels"]
        summed = F.cross_entropy(self.module(batch["images"]).float(), labels, reduction="sum")
        return summed, torch.tensor(labels.shape[0], dtype=summed.dtype, device=summed.device)

    @torch.no_grad()
    def outputs(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        self.module.eval()
        return torch.softmax(self.module(batch["images"]).float(), -1)

    def trainable(self) -> list[nn.Parameter]:
        return list(self.module.parameters())

    def num_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters() if p.requires_grad)

    def get_weights(self) -> Weights:
        state = {k: v.detach().float().cpu().numpy() for k, v in self.module.state_dict().items()}
        return layouts.to_canonical(state, table(self.config["filters"]))

    @torch.no_grad()
    def set_weights(self, weights: Weights) -> None:
        state = self.module.state_dict()  # parameters and the running statistics (buffers), sharing their memory
        native = layouts.from_canonical(weights, table(self.config["filters"]),
                                        {k: tuple(v.shape) for k, v in state.items()})
        for name, value in native.items():
            state[name].copy_(torch.from_numpy(np.ascontiguousarray(value)))
