"""MNIST CNN in PaddlePaddle (``paddle.nn``, NCHW as PyTorch's), exchanging canonical (channels-last) weights."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle import nn

from bakeoff.core.workload import Weights
from bakeoff.workloads.common import layouts
from bakeoff.workloads.mnist.workload import feature_size


class MnistCNNNet(nn.Layer):
    def __init__(self, cfg: Mapping[str, Any]) -> None:
        super().__init__()
        c1, c2 = cfg["filters"]
        k = cfg["kernel_size"]
        self.conv1 = nn.Conv2D(1, c1, k)  # valid padding, stride 1
        self.conv2 = nn.Conv2D(c1, c2, k)
        self.pool = nn.MaxPool2D(2)
        self.drop = nn.Dropout(cfg["dropout"])
        self.dense = nn.Linear(feature_size(cfg) ** 2 * c2, cfg["num_classes"])

    def forward(self, images: paddle.Tensor) -> paddle.Tensor:
        x = images.unsqueeze(1)  # (B, 1, 28, 28)
        x = self.pool(F.relu(self.conv1(x)))  # (B, c1, 13, 13)
        x = self.pool(F.relu(self.conv2(x)))  # (B, c2, 5, 5)
        return self.dense(self.drop(x.flatten(1)))  # (B, 10) logits; features in (C, H, W) order


def dense_after_flatten(feature_shape: tuple[int, ...]) -> layouts.Layout:
    """A dense kernel after flattening an NCHW map: the rows in PyTorch's ``(C, H, W)`` order, as
    :func:`~bakeoff.workloads.common.layouts.flattened`, but held ``(in, out)`` as ``paddle.nn.Linear`` holds it
    (PyTorch's is ``(out, in)``)."""
    torch_order = layouts.flattened(feature_shape)
    return layouts.Layout(f"paddle {torch_order.name}", lambda kernel: torch_order.native(kernel).T,
                          lambda weight: torch_order.canonical(weight.T))


class MnistCNN:
    """ModelImpl for PaddlePaddle."""

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = device
        self.module: MnistCNNNet | None = None

    def build(self, weights: Weights) -> None:
        self.module = MnistCNNNet(self.config)
        self.set_weights(weights)

    def loss(self, batch: Mapping[str, paddle.Tensor], training: bool = True) -> tuple[paddle.Tensor, paddle.Tensor]:
        self.module.train() if training else self.module.eval()
        labels = batch["labels"]
        summed = F.cross_entropy(self.module(batch["images"]), labels, reduction="sum")  # a sum, not a mean
        return summed, paddle.shape(labels)[0].astype(summed.dtype)  # the batch size, a tensor under to_static too

    @paddle.no_grad()
    def outputs(self, batch: Mapping[str, paddle.Tensor]) -> paddle.Tensor:
        self.module.eval()
        return F.softmax(self.module(batch["images"]).astype("float32"), -1)

    def trainable(self) -> list[paddle.Tensor]:
        return [p for p in self.module.parameters() if not p.stop_gradient]

    def num_params(self) -> int:
        return sum(int(np.prod(p.shape)) for p in self.trainable())

    # --- canonical weights -------------------------------------------------------------------------------
    # Conv kernels: canonical (kh, kw, in, out), Paddle's (out, in, kh, kw) as PyTorch's. Paddle's Linear holds
    # (in, out) like the canonical kernel, but the dense layer's rows follow the NCHW flatten, (C, H, W).

    def _table(self) -> layouts.Table:
        s = feature_size(self.config)
        dense = dense_after_flatten((s, s, self.config["filters"][-1]))  # the last map, channels-last (H, W, C)
        return {"conv1.kernel": ("conv1.weight", layouts.CONV), "conv1.bias": ("conv1.bias", layouts.AS_IS),
                "conv2.kernel": ("conv2.weight", layouts.CONV), "conv2.bias": ("conv2.bias", layouts.AS_IS),
                "dense.kernel": ("dense.weight", dense), "dense.bias": ("dense.bias", layouts.AS_IS)}

    def get_weights(self) -> Weights:
        state = {k: v.astype("float32").numpy() for k, v in self.module.state_dict().items()}
        return layouts.to_canonical(state, self._table())

    @paddle.no_grad()
    def set_weights(self, weights: Weights) -> None:
        params = dict(self.module.named_parameters())
        native = layouts.from_canonical(weights, self._table(), {k: tuple(p.shape) for k, p in params.items()})
        for name, value in native.items():
            params[name].set_value(np.ascontiguousarray(value, dtype=np.float32))
