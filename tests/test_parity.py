"""Fairness, proven, for every workload: the PyTorch and TensorFlow models compute the same function and train
alike, in the modes trials are timed in.

One declarative harness: each workload row names its exact parameter count, output shape and the probes it runs
beyond eager fp32 (compiled modes, bf16); the checks and their tolerances are tests/parity_checks.py's, the same
for every workload. Each probe is one framework in one mode, in its own process (`python -m
bakeoff.trial.parity_probe`), through the real engine and model code, dropout off. speech_ctc has its own file
(tests/test_parity_speech_ctc.py: its micro-batches are padded to different lengths and CTC is checked on its own).

Which compiled checks run where, to keep CI time modest (each torch.compile costs ~30 s on 2 cores): tf.function
for every workload; torch.compile and XLA for the text classifier and MNIST; bf16 eagerly for the text classifier
and the autoencoder, compiled on both sides for MNIST.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bakeoff.core import registry
from parity_checks import (
    EAGER,
    STEPS,
    Mode,
    Probes,
    check_accumulation,
    check_gradients,
    check_losses,
    check_moved,
    check_outputs,
    check_weights,
    pairs,
)

pytestmark = pytest.mark.skipif(not all(registry.installed(m.framework) for m in EAGER),
                                reason="parity needs both torch and tensorflow installed")


@dataclasses.dataclass(frozen=True)
class Case:
    params: int  # tiny preset, counted by hand below
    output_shape: tuple[int, ...]  # of the outputs on the first 64 test examples
    modes: tuple[Mode, ...]  # the probes compared, eager fp32 in both frameworks always among them


CASES = {
    # 4000·64 tokens + 128·64 positions + 2 blocks × (4·(64·64+64) + 2·2·64 + 64·128+128 + 128·64+64) + head 64+1
    "text_classifier": Case(331_201, (64,), (*EAGER, Mode("tensorflow", "graph"), Mode("tensorflow", "xla"),
                                             Mode("torch", "graph"), Mode("torch", precision="bf16"),
                                             Mode("tensorflow", precision="bf16"))),
    # 2 blocks × (4·(64·64+64) attention + 2·2·64 LayerNorms + 64·128+128 + 128·64+64 FFN) + head 64·64+64
    "autoencoder": Case(71_104, (64, 32, 64), (*EAGER, Mode("tensorflow", "graph"), Mode("torch", precision="bf16"),
                                               Mode("tensorflow", precision="bf16"))),
    # conv1 3·3·1·8+8 = 80, conv2 3·3·8·16+16 = 1168, dense (5·5·16)·10+10 = 4010; outputs: class probabilities
    "mnist": Case(5_258, (64, 10), (*EAGER, Mode("tensorflow", "graph"), Mode("tensorflow", "xla"),
                                    Mode("torch", "graph"), Mode("torch", "graph", "bf16"),
                                    Mode("tensorflow", "graph", "bf16"))),
}
PAIRS = [(w, a, b) for w, case in CASES.items() for a, b in pairs(case.modes)]
PROBES = [(w, m) for w, case in CASES.items() for m in case.modes]


@pytest.fixture(scope="module")
def probes(parity_probes: Probes) -> Probes:
    parity_probes.prefetch(PROBES)
    return parity_probes


def _ids(value: object) -> str:
    return str(value)


@pytest.mark.parametrize("workload", list(CASES))
def test_parameter_counts_equal_and_exact(probes, workload):
    wl = registry.workload(workload)
    canonical = sum(v.size for v in wl.init_weights(wl.config("tiny"), 0).values())
    assert canonical == CASES[workload].params
    assert [int(probes.get(workload, m)["num_params"]) for m in EAGER] == [canonical] * 2


@pytest.mark.parametrize("workload", list(CASES))
def test_canonical_weights_round_trip_exactly(probes, workload):
    for mode in EAGER:
        assert bool(probes.get(workload, mode)["roundtrip_same_keys"])
        assert float(probes.get(workload, mode)["roundtrip_max_err"]) == 0.0


@pytest.mark.parametrize(("workload", "torch_mode", "tf_mode"), PAIRS, ids=_ids)
def test_forward_outputs_equal_with_copied_weights(probes, workload, torch_mode, tf_mode):
    # Perturbed weights (non-zero biases, non-unit LayerNorm) exercise every canonical-name mapping and layout.
    # torch's predict runs eagerly in graph mode too (evaluation is off the clock); its compiled forward pass is
    # checked by the first training loss and the gradients below.
    a, b = probes.get(workload, torch_mode), probes.get(workload, tf_mode)
    for which in ("outputs", "outputs_perturbed"):
        assert a[which].shape == CASES[workload].output_shape
        check_outputs(a, b, torch_mode.precision, which)


@pytest.mark.parametrize(("workload", "torch_mode", "tf_mode"), PAIRS, ids=_ids)
def test_training_losses_equal_every_step(probes, workload, torch_mode, tf_mode):
    a, b = probes.get(workload, torch_mode), probes.get(workload, tf_mode)
    assert a["losses"].shape == (STEPS,)
    check_losses(a["losses"], b["losses"], torch_mode.precision)
    check_losses(a["losses_accum"], b["losses_accum"], torch_mode.precision)  # grad_accum = 4, across frameworks


@pytest.mark.parametrize(("workload", "torch_mode", "tf_mode"),
                         [p for p in PAIRS if p[1].precision == "fp32"], ids=_ids)
def test_gradients_and_trained_weights_equal_per_tensor(probes, workload, torch_mode, tf_mode):
    a, b = probes.get(workload, torch_mode), probes.get(workload, tf_mode)
    check_gradients(a, b)
    check_weights(a, b)


@pytest.mark.parametrize(("workload", "mode"), [p for p in PROBES if p[1].precision == "fp32"], ids=_ids)
def test_gradient_accumulation_is_exact(probes, workload, mode):
    check_accumulation(probes.get(workload, mode))


@pytest.mark.parametrize(("workload", "mode"), PROBES, ids=_ids)
def test_training_moved_every_tensor(probes, workload, mode):
    check_moved(probes.get(workload, mode), registry.workload(workload).config("tiny")["learning_rate"])


@pytest.mark.parametrize(("workload", "mode"), [p for p in PROBES if p[1].precision == "bf16"], ids=_ids)
def test_bf16_is_in_force_and_close_to_fp32(probes, workload, mode):
    bf16, fp32 = probes.get(workload, mode), probes.get(workload, Mode(mode.framework))
    assert np.abs(bf16["outputs"] - fp32["outputs"]).max() > 1e-4  # bf16 rounding shows: it really ran in bf16
    check_outputs(bf16, fp32, "bf16", "outputs")
    check_losses(bf16["losses"], fp32["losses"], "bf16")


@pytest.mark.parametrize(("workload", "mode"), [p for p in PROBES if p[1].execution != "eager"], ids=_ids)
def test_compiled_step_builds_its_graphs_once(probes, workload, mode):
    # The whole training step is compiled in both frameworks. tf.function / XLA: the first step traces it once.
    # torch.compile: the forward pass (and its backward) for this batch shape was compiled by the gradient checks
    # before training, so the first step compiles the update: the gradients' division and Adam's step, 2 graphs
    # (Optimizer.step breaks the graph around itself). Later steps, of the same shapes, build nothing.
    builds = probes.get(workload, mode)["graph_builds"]
    assert builds[1] - builds[0] == {"torch": 2, "tensorflow": 1}[mode.framework], builds
    assert np.all(builds[1:] == builds[1]), builds
