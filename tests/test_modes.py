"""Training modes as spec fields: mixed precision and gradient accumulation run through the real trial path."""

from __future__ import annotations

import pytest

from bakeoff import registry, runner
from bakeoff.spec import RunSpec, SpecError
from bakeoff.store import Store

BOTH = pytest.mark.skipif(not (registry.installed("torch") and registry.installed("tensorflow")),
                          reason="needs torch and tensorflow")


def _spec(**kw) -> RunSpec:
    return RunSpec(**{"workload": "text_classifier", "framework": "torch", "max_steps": 4, "eval_every": 4,
                      "batch_size": 16, "device": "cpu", **kw})


@BOTH
def test_bf16_runs_and_fp16_on_cpu_is_unsupported(tmp_path):
    specs = [_spec(framework=fw, precision=p, grad_accum=2 if p == "bf16" else 1)
             for fw in ("torch", "tensorflow") for p in ("bf16", "fp16")]
    with Store(tmp_path / "r.sqlite") as store:
        summary = runner.run(specs, store, "modes", timeout_s=600, log_dir=tmp_path / "logs")
    by = {(r.run_spec.framework.value, r.run_spec.precision.value): r for r in summary.ran}
    for fw, mixed in (("torch", "torch.autocast(torch.bfloat16)"), ("tensorflow", "mixed_bfloat16")):
        bf16 = by[(fw, "bf16")]
        assert bf16.status.value == "ok", bf16.reason
        assert bf16.environment["mixed_precision"] == mixed
        assert bf16.examples_per_step == 32 and len(bf16.losses) == 4  # 2 micro-batches of 16 per step
        assert 0.3 < bf16.losses[0] < 1.5  # a real binary cross-entropy, not garbage
        fp16 = by[(fw, "fp16")]
        assert fp16.status.value == "unsupported" and "fp16 with loss scaling needs a" in fp16.reason


def test_contradictory_accumulation_is_rejected_before_running():
    with pytest.raises(SpecError, match="batch_size × grad_accum = 1024 × 4 = 4096 examples, more than the 4000"):
        runner.validate([_spec(batch_size=1024, grad_accum=4)])
