"""Distributed training agrees across frameworks, through the multi-worker code path on one machine.

Two workers, each addressed as a machine of its own would be (torchrun's agents, one per node, rendezvous at the
first worker's address; TF_CONFIG lists each worker at its address). PyTorch (DDP, two torchrun agents) and
TensorFlow (MultiWorkerMirroredStrategy) train the same global batches from the same weights: their per-step
losses agree within the tolerance of the single-device parity tests (relative 1e-4, fp32), as each agrees with its
own single-device run (``test_distributed_torch.py``, ``test_distributed_tf.py``).
"""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.core import registry
from bakeoff.core.spec import RunSpec, Status
from bakeoff.run.executors.local import run_one
from parity_checks import check_losses

pytestmark = pytest.mark.skipif(not (registry.installed("torch") and registry.installed("tensorflow")),
                                reason="needs PyTorch and TensorFlow")

def test_multi_worker_trains_alike_in_both_frameworks(tmp_path) -> None:
    results = {}
    for framework, execution in (("torch", "eager"), ("tensorflow", "graph")):
        spec = RunSpec(workload="text_classifier", framework=framework, execution=execution,
                       parallelism="multi_worker", workers=2, batch_size=16, max_steps=10,
                       eval_every=1000, config={"dropout": "0"}, device="cpu")
        result = run_one(spec, 300, tmp_path / framework)
        assert result.status is Status.OK, f"{framework}: {result.reason}"
        dist = result.distributed
        assert dist.replicas_identical is True and dist.processes == 2
        assert [r["rank"] for r in dist.ranks] == [0, 1]
        results[framework] = result
    torch_run, tf_run = results["torch"], results["tensorflow"]
    check_losses(np.asarray(torch_run.losses), np.asarray(tf_run.losses), "fp32")
