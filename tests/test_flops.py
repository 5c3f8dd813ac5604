"""Each workload's FLOPs per example against an independent count: torch's FlopCounterMode over one real training
step (forward and backward) of the PyTorch model at the tiny preset, on a real batch of the shipped data. The
convention (:meth:`bakeoff.spec.Workload.flops_per_example`): what the step computes, padding included."""

from __future__ import annotations

import pytest

from bakeoff import registry
from bakeoff.spec import RunSpec

pytestmark = pytest.mark.skipif(not registry.installed("torch"), reason="needs PyTorch")
BATCH = 8


def counted(name: str) -> tuple[float, float]:
    """(FLOPs of one training step counted by torch, the workload's flops_per_example × the batch)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    wl = registry.workload(name)
    spec = RunSpec(workload=name, framework="torch", preset="tiny", max_steps=1, batch_size=BATCH)
    data = wl.load_data(spec)
    config = wl.config("tiny", spec, data)
    model = registry.model_class(name, "torch")(config)
    model.build(wl.init_weights(config, 0))
    batch = {k: torch.from_numpy(v) for k, v in next(iter(wl.batches(data.train, BATCH, 0, 0))).items()}
    with FlopCounterMode(display=False) as counter:
        summed, _ = model.loss(batch)
        summed.backward()
    return float(counter.get_total_flops()), BATCH * wl.flops_per_example(config)


@pytest.mark.parametrize("name", ["text_classifier", "autoencoder", "mnist"])
def test_flops_per_example_agrees_with_torchs_count_within_2_percent(name):
    torch_count, ours = counted(name)
    assert ours == pytest.approx(torch_count, rel=0.02)
