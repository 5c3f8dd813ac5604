"""Each workload's FLOPs per example against an independent count: torch's FlopCounterMode over real training
steps (forward and backward) of the PyTorch model at the tiny preset, on real batches of the shipped data. The
convention (:meth:`bakeoff.core.workload.Workload.flops_per_example`): what the step computes, padding included."""

from __future__ import annotations

from collections import Counter

import pytest

from bakeoff.core import registry
from bakeoff.core.spec import RunSpec

pytestmark = pytest.mark.skipif(not registry.installed("torch"), reason="needs PyTorch")
BATCH = 8


def counted(name: str, steps: int = 1) -> tuple[float, float]:
    """(FLOPs of the first ``steps`` training steps counted by torch, the workload's flops_per_example × their
    examples). A padded workload's config is given those batches' lengths, so the two count the same batches."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    wl = registry.workload(name)
    spec = RunSpec(workload=name, framework="torch", preset="tiny", max_steps=steps, batch_size=BATCH)
    data = wl.load_data(spec)
    config = wl.config("tiny", spec, data)
    model = registry.model_class(name, "torch")(config)
    model.build(wl.init_weights(config, 0))
    batches = [b for _, b in zip(range(steps), wl.batches(data.train, BATCH, spec.seed, 0), strict=False)]
    if "padded_frames" in config:
        config["padded_frames"] = [list(p) for p in Counter(b["features"].shape[1] for b in batches).items()]
    with FlopCounterMode(display=False) as counter:
        for batch in batches:
            summed, _ = model.loss({k: torch.from_numpy(v) for k, v in batch.items()})
            summed.backward()
    return float(counter.get_total_flops()), steps * BATCH * wl.flops_per_example(config)


@pytest.mark.parametrize("name", ["text_classifier", "autoencoder", "mnist"])
def test_flops_per_example_agrees_with_torchs_count_within_2_percent(name):
    torch_count, ours = counted(name)
    assert ours == pytest.approx(torch_count, rel=0.02)


def test_speech_flops_count_each_batchs_padding_within_2_percent():
    """Speech batches are padded to their longest utterance: four real batches of different lengths."""
    torch_count, ours = counted("speech_ctc", steps=4)
    assert ours == pytest.approx(torch_count, rel=0.02)


def test_speech_config_keeps_the_padded_length_of_every_batch_of_the_first_epoch():
    wl = registry.workload("speech_ctc")
    spec = RunSpec(workload="speech_ctc", framework="torch", preset="tiny", max_steps=1, batch_size=BATCH)
    data = wl.load_data(spec)
    lengths = Counter(b["features"].shape[1] for b in wl.batches(data.train, BATCH, spec.seed, 0))
    kept = wl.config("tiny", spec, data)["padded_frames"]
    assert dict(map(tuple, kept)) == lengths
    assert sum(lengths.values()) == len(data.train["feature_lengths"]) // BATCH
    # padding counted: more than the mean utterance's FLOPs, which a store recorded before this change falls back to
    config = wl.config("tiny", spec, data)
    assert wl.flops_per_example(config) > wl.flops_per_example({**config, "padded_frames": None})
