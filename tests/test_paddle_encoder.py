"""The Paddle Transformer models (text classifier, autoencoder; block in ``workloads/common/paddle_encoder.py``)
against the PyTorch ones, without an engine: both built from the same canonical weights (the workload's own
``init_weights``, and those weights perturbed so that biases are non-zero and LayerNorms not the identity), then
compared with the product's fp32 tolerances (:mod:`bakeoff.analysis.parity_tolerances`): parameter counts, the
canonical round trip (exact), inference outputs, the summed training loss and every canonical tensor's gradient of
it (dropout off). PyTorch is the reference throughout; expected counts are typed in from the brief's hand counts.

Runtime: 16 s on 2 CPUs shared at a load of 7 (tiny models, one batch each; the two bf16 segfault subprocesses
about half of it).
"""

from __future__ import annotations

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")
torch = pytest.importorskip("torch")

from bakeoff.analysis import parity_tolerances as parity  # noqa: E402
from bakeoff.workloads.autoencoder import paddle_model as paddle_ae  # noqa: E402
from bakeoff.workloads.autoencoder import torch_model as torch_ae  # noqa: E402
from bakeoff.workloads.autoencoder.workload import AutoencoderWorkload, make_sequences  # noqa: E402
from bakeoff.workloads.text_classifier import paddle_model as paddle_tc  # noqa: E402
from bakeoff.workloads.text_classifier import torch_model as torch_tc  # noqa: E402
from bakeoff.workloads.text_classifier.workload import TextClassifierWorkload  # noqa: E402

# tiny: text_classifier 4000·64 + 128·64 + 2 × 33,472 (a block: 4·(64·64+64) + 64·128+128 + 128·64+64 + 4·64)
# + 64·1+1; autoencoder 2 × 33,472 + 64·64+64.
COUNTS = {"text_classifier": 331_201, "autoencoder": 71_104}
CASES = ["text_classifier", "text_classifier-3class", "text_classifier-hd12", "autoencoder"]
"""hd12: d_model 48 over 4 heads, whose 1/√12 scale is not a power of two (tiny's 1/√16 multiplies exactly)."""


def _case(case: str, dropout: float = 0.0) -> tuple[dict, dict, dict]:
    """(config, canonical weights, a numpy batch) for ``case`` at the tiny preset, dropout ``dropout``."""
    rng = np.random.default_rng(7)
    if case.startswith("text_classifier"):
        wl = TextClassifierWorkload()
        cfg = wl.config("tiny")
        cfg["num_classes"] = 3 if case.endswith("3class") else 2
        if case.endswith("hd12"):
            cfg["d_model"] = 48
        b, t = 6, cfg["seq_len"]
        tokens = rng.integers(2, cfg["vocab_size"], (b, t))
        for row, length in enumerate((t, 100, 37, 5, 1, 64)):  # padding (0) at the end, one row full
            tokens[row, length:] = 0
        batch = {"tokens": tokens.astype(np.int64), "labels": rng.integers(0, cfg["num_classes"], b).astype(np.int64)}
    else:
        wl = AutoencoderWorkload()
        cfg = wl.config("tiny")
        batch = {"inputs": make_sequences(4, cfg["seq_len"], cfg["d_model"], cfg["latent_dim"], seed=5)}
    cfg["dropout"] = dropout
    return cfg, wl.init_weights(cfg, 0), batch


def _perturbed(weights: dict) -> dict:
    """Non-zero biases and betas, gammas away from 1, every tensor nudged: no term can hide behind a 0 or a 1."""
    rng = np.random.default_rng(11)
    out = {}
    for name, w in weights.items():
        noise = rng.normal(0, 0.1, w.shape).astype(np.float32)
        out[name] = (w + noise + (1.0 if name.endswith("gamma") else 0.0) * noise).astype(np.float32)
    return out


def _models(case: str, weights: dict, cfg: dict):
    pkg = (paddle_tc, torch_tc) if case.startswith("text_classifier") else (paddle_ae, torch_ae)
    name = "TextClassifier" if case.startswith("text_classifier") else "TransformerAutoencoder"
    ours, ref = getattr(pkg[0], name)(cfg, "cpu"), getattr(pkg[1], name)(cfg, "cpu")
    ours.build(weights)
    ref.build(weights)
    return ours, ref


def _agree(findings: list) -> None:
    bad = parity.first_failure(findings)
    assert bad is None, bad.describe()


@pytest.mark.parametrize("case", CASES)
def test_parameter_count_and_round_trip(case):
    cfg, weights, _ = _case(case)
    ours, ref = _models(case, weights, cfg)
    if case in COUNTS:
        assert ours.num_params() == COUNTS[case]
    assert ours.num_params() == ref.num_params()
    _agree(parity.compare_parameters(ours.num_params(), ours.get_weights(), weights))
    perturbed = _perturbed(weights)
    ours.set_weights(perturbed)
    _agree(parity.compare_parameters(ours.num_params(), ours.get_weights(), perturbed))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("weights_kind", ["canonical", "perturbed"])
def test_outputs_match_pytorch(case, weights_kind):
    cfg, weights, batch = _case(case, dropout=0.1)  # the preset's dropout: inference must switch it off
    if weights_kind == "perturbed":
        weights = _perturbed(weights)
    ours, ref = _models(case, weights, cfg)
    a = ours.outputs({k: paddle.to_tensor(v) for k, v in batch.items()}).numpy()
    b = ref.outputs({k: torch.from_numpy(v) for k, v in batch.items()}).numpy()
    _agree(parity.compare_outputs(a, b, "fp32"))
    assert np.ptp(b) > 1e-3  # the outputs vary across examples: the comparison is not vacuous


def _paddle_loss_and_gradients(model, batch: dict) -> tuple[float, float, dict]:
    """The summed loss, its count, and each canonical tensor's gradient of the summed loss: the gradients are read
    through the model's own weight mapping, loaded in place of the weights (as the engines' canonical_gradients)."""
    summed, count = model.loss({k: paddle.to_tensor(v) for k, v in batch.items()}, True)
    summed.backward()
    saved = model.get_weights()
    params = model.trainable()
    grads = [p.grad.numpy().copy() for p in params]
    for p, g in zip(params, grads, strict=True):
        p.set_value(g)
    out = model.get_weights()
    model.set_weights(saved)
    return float(summed), float(count), out


def _torch_loss_and_gradients(model, batch: dict) -> tuple[float, float, dict]:
    summed, count = model.loss({k: torch.from_numpy(v) for k, v in batch.items()}, True)
    summed.backward()
    saved = model.get_weights()
    with torch.no_grad():
        for p in model.trainable():
            p.copy_(p.grad)
    out = model.get_weights()
    model.set_weights(saved)
    return float(summed.detach()), float(count), out


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("weights_kind", ["canonical", "perturbed"])
def test_summed_loss_and_gradients_match_pytorch(case, weights_kind):
    cfg, weights, batch = _case(case)
    if weights_kind == "perturbed":
        weights = _perturbed(weights)
    ours, ref = _models(case, weights, cfg)
    loss_a, count_a, grads_a = _paddle_loss_and_gradients(ours, batch)
    loss_b, count_b, grads_b = _torch_loss_and_gradients(ref, batch)
    expected_count = batch["labels"].shape[0] if "labels" in batch else batch["inputs"].size
    assert count_a == count_b == expected_count  # a sum and its count, never a mean
    _agree(parity.compare_losses(np.array([loss_a]), np.array([loss_b]), "fp32"))
    declared = TextClassifierWorkload.zero_gradient if case.startswith("text_classifier") else ()
    _agree(parity.compare_gradients(grads_a, grads_b, declared=declared))
    assert sorted(grads_a) == sorted(weights)
    assert min(float(np.abs(g).max()) for k, g in grads_b.items() if not k.endswith("attn.k.bias")) > 1e-6


def test_dropout_is_on_in_training_and_off_in_inference():
    cfg, weights, batch = _case("text_classifier", dropout=0.5)
    ours, _ = _models("text_classifier", weights, cfg)
    tokens = {k: paddle.to_tensor(v) for k, v in batch.items()}
    paddle.seed(0)
    first, second = (float(ours.loss(tokens, True)[0]) for _ in range(2))
    assert first != second  # different masks each call
    assert float(ours.loss(tokens, False)[0]) == float(ours.loss(tokens, False)[0])
    np.testing.assert_array_equal(ours.outputs(tokens).numpy(), ours.outputs(tokens).numpy())


def test_set_weights_refuses_a_wrong_shape_or_a_missing_name():
    cfg, weights, _ = _case("autoencoder")
    ours, _ = _models("autoencoder", weights, cfg)
    bad = dict(weights, **{"head.kernel": weights["head.kernel"].T[:, :-1]})
    with pytest.raises(ValueError, match="head.kernel"):
        ours.set_weights(bad)
    missing = {k: v for k, v in weights.items() if k != "blocks.1.attn.v.bias"}
    with pytest.raises(ValueError, match="blocks.1.attn.v.bias"):
        ours.set_weights(missing)


SEGFAULT = """
import paddle
w = paddle.create_parameter([8, 8], "float32")
def loss(x):
    with paddle.amp.auto_cast(dtype="bfloat16", level="O1"):
        return paddle.matmul(x, w).astype("float32").sum()
x = paddle.randn([2, 3, 8])
x.stop_gradient = {stop}
paddle.jit.to_static(loss, full_graph=True)(x).backward()
print("grad", float(w.grad.abs().sum()))
"""


@pytest.mark.parametrize("input_needs_gradient", [False, True])
def test_paddle_bf16_matmul_gradient_needs_both_operands_to_need_one(input_needs_gradient, tmp_path):
    # Why the engine marks floating inputs as needing a gradient under bf16 on a CPU (PaddleEngine._train_tensors):
    # Paddle 3.3.1's oneDNN bf16 matmul_grad segfaults when one operand needs no gradient. When a Paddle release
    # fixes it, the first case fails here: remove the workaround then.
    import subprocess
    import sys

    script = tmp_path / "matmul.py"  # to_static reads the function's source: a file, not python -c
    script.write_text(SEGFAULT.format(stop=not input_needs_gradient))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    if input_needs_gradient:
        assert run.returncode == 0 and "grad" in run.stdout, run.stderr[-2000:]
    else:
        assert run.returncode == -11, (run.returncode, run.stdout[-2000:])  # SIGSEGV, in the kernel named:
        assert "MatmulGradKernel<phi::dtype::bfloat16" in run.stdout + run.stderr
