"""PyTorch engine: eager or ``torch.compile`` (graph), on CPU or CUDA."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from bakeoff.engines.base import Engine, Unsupported
from bakeoff.registry import model_class
from bakeoff.spec import Batch, Device, Execution, Parallelism, Precision


class TorchEngine(Engine):
    framework = "torch"

    def setup(self, weights: Mapping[str, np.ndarray]) -> None:
        spec = self.spec
        if spec.execution is Execution.XLA:
            raise Unsupported("PyTorch has no XLA mode here (torch_xla targets TPUs); use eager or graph")
        if spec.precision is not Precision.FP32:
            raise Unsupported(f"precision {spec.precision} is not implemented yet for torch (fp32 only)")
        if spec.parallelism is not Parallelism.NONE:
            raise Unsupported(f"parallelism {spec.parallelism} is not implemented yet for torch")
        cuda = torch.cuda.is_available()
        if spec.device is Device.CUDA and not cuda:
            raise Unsupported("device cuda requested but torch sees no CUDA device")
        self.device = torch.device("cuda" if cuda and spec.device is not Device.CPU else "cpu")
        # Pin numerics: no TF32 (fp32 means fp32 in both frameworks), deterministic thread counts.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_num_threads(spec.threads or os.cpu_count() or 1)
        torch.manual_seed(spec.seed)  # dropout masks

        self.impl = model_class(spec.workload, "torch")(self.config, str(self.device))
        self.impl.build(dict(weights))
        self.optimizer = torch.optim.Adam(self.impl.trainable(), lr=self.config["learning_rate"],
                                          betas=(0.9, 0.999), eps=1e-8)
        loss_fn = self.impl.loss
        if spec.execution is Execution.GRAPH:
            loss_fn = torch.compile(loss_fn)
        self._loss_fn = loss_fn

    def _tensors(self, batch: Batch) -> dict[str, torch.Tensor]:
        return {k: torch.from_numpy(v).to(self.device, non_blocking=True) for k, v in batch.items()}

    def train_step(self, batch: Batch) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        summed, count = self._loss_fn(self._tensors(batch), True)
        loss = summed / count
        loss.backward()
        self.optimizer.step()
        return loss.item()  # host copy: synchronises CUDA

    def predict(self, split: Mapping[str, np.ndarray], batch_size: int) -> np.ndarray:
        n = len(next(iter(split.values())))
        parts = []
        for start in range(0, n, batch_size):
            batch = self._tensors({k: v[start:start + batch_size] for k, v in split.items()})
            parts.append(self.impl.outputs(batch).cpu().numpy())
        return np.concatenate(parts)

    def num_params(self) -> int:
        return self.impl.num_params()

    def peak_memory(self) -> tuple[int, str]:
        if self.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.device)), "torch.cuda.max_memory_allocated"
        return super().peak_memory()

    def environment(self) -> dict[str, Any]:
        env: dict[str, Any] = {
            "framework_version": torch.__version__,
            "device": str(self.device),
            "intra_op_threads": torch.get_num_threads(),
            "inter_op_threads": torch.get_num_interop_threads(),
            "tf32": False,
        }
        if self.device.type == "cuda":
            env["device_name"] = torch.cuda.get_device_name(self.device)
        return env

    def extras(self) -> dict[str, Any]:
        if self.spec.execution is not Execution.GRAPH:
            return {}
        from torch._dynamo.utils import counters

        return {"dynamo_frames_compiled": int(counters["stats"]["unique_graphs"]),
                "dynamo_graph_breaks": int(sum(counters["graph_break"].values()))}
