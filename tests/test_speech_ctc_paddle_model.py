"""The PaddlePaddle CTC acoustic model on its own, against the PyTorch one in this process: the same canonical weights
in both, then parameter counts, the canonical round trip, per-frame log-probabilities, the summed CTC loss and its
count, per-tensor gradients of the summed loss (dropout off), with bakeoff.analysis.parity_tolerances' fp32
tolerances; CTC against a brute-force sum over alignments and PyTorch's op; padding; to_static; dropout; bf16
(to_static's AMP). Through-the-engine parity (training steps, accumulation) is test_parity_speech_ctc_paddle.py's.

About 15 s wall (6 to 12 s of tests after the imports of both frameworks), measured on two shared cores.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bakeoff.analysis import parity_tolerances as parity
from bakeoff.core import registry

pytestmark = pytest.mark.skipif(not all(registry.installed(f) for f in ("paddle", "torch")),
                                reason="needs paddle and torch installed (pip install 'bakeoff[paddle,torch]')")


@pytest.fixture(scope="module")
def setup():
    from bakeoff.core.spec import RunSpec

    wl = registry.workload("speech_ctc")
    spec = RunSpec(workload="speech_ctc", framework="paddle", preset="tiny", max_steps=1, batch_size=8, device="cpu")
    data = wl.load_data(spec)
    cfg = wl.config("tiny", spec, data)
    cfg["dropout"] = 0.0
    batch = next(wl.batches(data.train, 8, 0, 0))
    return wl, cfg, wl.init_weights(cfg, 0), batch


def _paddle(cfg, weights):
    from bakeoff.workloads.speech_ctc.paddle_model import SpeechCTC

    impl = SpeechCTC(cfg)
    impl.build(weights)
    return impl


def _torch(cfg, weights):
    from bakeoff.workloads.speech_ctc.torch_model import SpeechCTC

    impl = SpeechCTC(cfg)
    impl.build(weights)
    return impl


def _pt(batch):
    import paddle

    return {k: paddle.to_tensor(v) for k, v in batch.items()}


def _th(batch):
    import torch

    return {k: torch.from_numpy(v) for k, v in batch.items()}


def _paddle_grads(impl, batch) -> dict[str, np.ndarray]:
    """Canonical gradients of the summed loss, read through the model's own mapping (as the engines do)."""
    import paddle

    impl.module.clear_gradients()
    impl.loss(_pt(batch), training=True)[0].backward()
    saved = [p.numpy().copy() for p in impl.trainable()]
    with paddle.no_grad():
        for p in impl.trainable():
            p.set_value(p.grad)
        out = impl.get_weights()
        for p, value in zip(impl.trainable(), saved, strict=True):
            p.set_value(value)
    return out


def _torch_grads(impl, batch) -> dict[str, np.ndarray]:
    import torch

    impl.module.zero_grad()
    impl.loss(_th(batch), training=True)[0].backward()
    with torch.no_grad():
        for p in impl.trainable():
            p.copy_(p.grad)
    return impl.get_weights()


def _agree(findings, what: str) -> None:
    bad = parity.first_failure(findings)
    assert bad is None, f"{what}: {bad.describe()}"


def test_parameter_count_is_the_canonical_count(setup):
    wl, cfg, weights, _ = setup
    # test_parity_speech_ctc's count, term by term: the PyTorch and TensorFlow models' 216,445
    assert sum(v.size for v in weights.values()) == 216_445
    assert _paddle(cfg, weights).num_params() == _torch(cfg, weights).num_params() == 216_445


def test_canonical_weights_round_trip_exactly(setup):
    from bakeoff.trial.parity_probe import perturbed

    _, cfg, weights, _ = setup
    weights = perturbed(weights)
    back = _paddle(cfg, weights).get_weights()
    assert sorted(back) == sorted(weights)
    assert all(back[k].dtype == np.float32 and np.array_equal(back[k], weights[k]) for k in weights)


def test_set_weights_rejects_wrong_names_and_shapes(setup):
    _, cfg, weights, _ = setup
    impl = _paddle(cfg, weights)
    with pytest.raises(ValueError, match="differ from the model.s.*head.bias"):
        impl.set_weights({k: v for k, v in weights.items() if k != "head.bias"})
    with pytest.raises(ValueError, match=r"frontend.conv1.kernel: the model's conv1.weight has shape \(96, 40, 3\)"):
        impl.set_weights({**weights, "frontend.conv1.kernel": weights["frontend.conv1.kernel"].transpose(2, 1, 0)})


@pytest.mark.parametrize("perturb", [False, True], ids=["init", "perturbed"])
def test_log_probs_loss_and_gradients_equal_pytorch(setup, perturb):
    """The same weights (perturbed: non-zero biases, non-unit LayerNorm, so every mapping matters) in both."""
    from bakeoff.trial.parity_probe import perturbed

    wl, cfg, weights, batch = setup
    weights = perturbed(weights) if perturb else weights
    p, t = _paddle(cfg, weights), _torch(cfg, weights)
    a, b = p.outputs(_pt(batch)).numpy(), t.outputs(_th(batch)).numpy()
    assert a.shape == b.shape == (8, 42, 29) and np.ptp(b) > 1e-2  # 167 frames → 84 → 42; the check is not vacuous
    _agree(parity.compare_outputs(a, b, "fp32"), "log-probabilities")
    (ls, lc), (ts, tc) = p.loss(_pt(batch)), t.loss(_th(batch))
    assert str(ls.dtype) == str(lc.dtype) == "paddle.float32" and float(lc) == tc.item() == 8.0
    assert abs(float(ls) - ts.item()) <= parity.TOLERANCES["fp32"].first_loss * ts.item()
    ga, gb = _paddle_grads(p, batch), _torch_grads(t, batch)
    _agree(parity.compare_gradients(ga, gb, parity.TOLERANCES["fp32"].gradients, declared=wl.zero_gradient),
           "gradients of the summed loss")


def _brute_force_nll(log_probs: np.ndarray, label: list[int]) -> float:
    """−log Σ over every frame-level path (blank 0) that collapses to ``label``: merge repeats, drop blanks."""
    frames, vocab = log_probs.shape
    total = -np.inf
    for path in itertools.product(range(vocab), repeat=frames):
        collapsed = [k for k, _ in itertools.groupby(path) if k != 0]
        if collapsed == label:
            total = np.logaddexp(total, sum(log_probs[t, k] for t, k in enumerate(path)))
    return float(-total)


def test_ctc_equals_brute_force_sum_over_alignments():
    import paddle

    from bakeoff.workloads.speech_ctc.paddle_model import ctc_losses

    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (6, 8, 4)).astype(np.float32)  # 6 utterances, 8 frames (some padding), 4 classes
    # a repeat (needs a blank between), an empty transcript, a label at the last frame, a repeat run
    labels = [[1, 2], [1, 1], [], [3], [2, 1, 2], [1, 1, 3]]
    frames = np.array([6, 5, 4, 6, 5, 6], np.int32)
    padded = np.zeros((6, 3), np.int32)
    for i, y in enumerate(labels):
        padded[i, : len(y)] = y
    padded[0, 2] = 1  # whatever sits in the padding is ignored (here: equal to the last real label)
    got = ctc_losses(paddle.to_tensor(logits), paddle.to_tensor(frames), paddle.to_tensor(padded),
                     paddle.to_tensor(np.array([len(y) for y in labels], np.int32))).numpy()
    log_probs = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
    want = [_brute_force_nll(log_probs[i, : frames[i]], y) for i, y in enumerate(labels)]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_ctc_infeasible_utterance_is_infinite_as_in_torch():
    import paddle

    from bakeoff.workloads.speech_ctc.paddle_model import ctc_losses

    labels = paddle.to_tensor(np.array([[1, 1, 1], [1, 2, 3], [1, 1, 1]], np.int32))
    # [1, 1, 1] needs 5 frames (blanks between repeats): 4 is infeasible (warp-ctc alone says 0), 5 is not
    got = ctc_losses(paddle.zeros([3, 6, 4]), paddle.to_tensor([4, 3, 5]), labels, paddle.to_tensor([3, 3, 3])).numpy()
    assert got[0] == np.inf and np.isfinite(got[1:]).all()
    np.testing.assert_allclose(got[1], 3 * np.log(4), rtol=1e-6)  # one path: each of its 3 frames p = 1/4


def test_ctc_equals_pytorch_on_the_parity_probes_logits():
    """test_parity_speech_ctc.py's fixed CTC case, per utterance, against ``F.ctc_loss(reduction="none")``."""
    import paddle
    import torch
    import torch.nn.functional as F

    from bakeoff.workloads.speech_ctc.paddle_model import ctc_losses

    rng = np.random.default_rng(3)
    logits, labels = rng.normal(0, 2, (4, 30, 29)).astype(np.float32), rng.integers(1, 29, (4, 12)).astype(np.int32)
    label_lengths, frames = np.array([12, 1, 7, 10], np.int32), np.array([30, 9, 30, 21], np.int32)
    got = ctc_losses(*map(paddle.to_tensor, (logits, frames, labels, label_lengths))).numpy()
    want = F.ctc_loss(F.log_softmax(torch.from_numpy(logits), -1).transpose(0, 1), torch.from_numpy(labels).long(),
                      torch.from_numpy(frames).long(), torch.from_numpy(label_lengths).long(), blank=0,
                      reduction="none").numpy()
    assert np.all(np.isfinite(want)) and np.all(want > 0)
    assert np.abs(got - want).max() / np.abs(want).max() <= 1e-5, (got, want)


def test_loss_is_a_sum_over_utterances_with_their_count(setup):
    """Half-batches padded to their own lengths add up to the batch: the summed loss and count are exact."""
    _, cfg, weights, batch = setup
    impl = _paddle(cfg, weights)
    total, count = impl.loss(_pt(batch), training=False)
    halves = []
    for idx in (np.arange(4), np.arange(4, 8)):
        part = {k: v[idx] for k, v in batch.items()}
        part["features"] = part["features"][:, : part["feature_lengths"].max()]  # tighter padding
        halves.append(impl.loss(_pt(part), training=False))
    assert float(count) == 8.0 and sum(float(c) for _, c in halves) == 8.0
    assert abs(sum(float(s) for s, _ in halves) - float(total)) <= 1e-5 * float(total)


def test_padding_never_changes_real_frames(setup):
    from bakeoff.data.ctc import output_frames

    _, cfg, weights, batch = setup
    impl = _paddle(cfg, weights)
    out = impl.outputs(_pt(batch)).numpy()  # (B, T', 29)
    longer = {**batch, "features": np.pad(batch["features"], [(0, 0), (0, 37), (0, 0)])}
    out_long = impl.outputs(_pt(longer)).numpy()
    assert out_long.shape[1] > out.shape[1]
    assert np.abs(out_long[:, : out.shape[1]] - out).max() <= 1e-5
    n = output_frames(batch["feature_lengths"])  # encoder lengths through both stride-2 convolutions
    frames = np.arange(out_long.shape[1])[None, :]
    assert np.all(out_long[frames >= n[:, None]] == 0.0)
    assert np.all(out_long[frames < n[:, None]] < 0.0)  # real frames are log-probabilities
    assert np.allclose(np.exp(out[0, : n[0]]).sum(-1), 1.0, atol=1e-5)


def test_to_static_loss_and_gradients_equal_eager_one_program_per_batch_shape(setup):
    """``paddle.jit.to_static(full_graph=True)`` (a whole-program translation) builds one program per input shape:
    speech batches padded to different lengths each build their own, and a length seen before reuses its program."""
    import paddle

    wl, cfg, weights, batch = setup
    impl = _paddle(cfg, weights)

    def summed(b):  # a def, not a lambda: to_static's AST translation reads the function's source
        return impl.loss(b, training=True)[0]

    static = paddle.jit.to_static(summed, full_graph=True)
    eager = float(impl.loss(_pt(batch))[0])
    loss = static(_pt(batch))
    loss.backward()
    grads = {n: p.grad.numpy().copy() for n, p in impl.module.named_parameters()}
    assert abs(float(loss) - eager) <= 1e-5 * eager
    impl.module.clear_gradients()
    impl.loss(_pt(batch))[0].backward()
    for n, p in impl.module.named_parameters():
        assert np.abs(grads[n] - p.grad.numpy()).max() <= 1e-4 * max(np.abs(p.grad.numpy()).max(), 1e-6), n
    shorter = {**batch, "features": batch["features"][:, :-9], "feature_lengths": np.minimum(
        batch["feature_lengths"], batch["features"].shape[1] - 9)}
    assert len(static.program_cache) == 1
    static(_pt(shorter))
    assert len(static.program_cache) == 2  # a new length: a new program
    static(_pt(batch))
    assert len(static.program_cache) == 2  # a length seen before: reused


def test_dropout_only_in_training(setup):
    import paddle

    _, cfg, weights, batch = setup
    impl = _paddle({**cfg, "dropout": 0.1}, weights)
    plain = float(impl.loss(_pt(batch), training=False)[0])
    assert float(_paddle(cfg, weights).loss(_pt(batch), training=True)[0]) == pytest.approx(plain, rel=1e-6)
    paddle.seed(1)
    a = float(impl.loss(_pt(batch), training=True)[0])
    paddle.seed(1)
    b = float(impl.loss(_pt(batch), training=True)[0])
    assert a == b and abs(a - plain) > 1e-3 * plain
    assert float(impl.loss(_pt(batch), training=False)[0]) == plain


def test_bf16_amp_keeps_fp32_params_and_loss(setup):
    """bf16 as the engine runs it on a CPU: AMP O1 inside a to_static program (Paddle's dygraph auto_cast is a no-op
    on a CPU, measured: it warns "amp_guard can only be enabled on CUDAPlace..." and computes in fp32)."""
    import paddle

    _, cfg, weights, batch = setup
    impl = _paddle(cfg, weights)
    fp32 = float(impl.loss(_pt(batch), training=False)[0])

    def amp(b):
        with paddle.amp.auto_cast(level="O1", dtype="bfloat16"):
            return impl.loss(b, training=False), impl.outputs(b)

    (total, count), outputs = paddle.jit.to_static(amp, full_graph=True)(_pt(batch))
    assert str(total.dtype) == str(count.dtype) == str(outputs.dtype) == "paddle.float32" and float(count) == 8.0
    assert all(str(p.dtype) == "paddle.float32" for p in impl.trainable())
    assert float(total) != fp32  # bf16 rounding shows: it really ran in bf16
    assert abs(float(total) - fp32) <= 8 * parity.BF16_U * fp32  # a few bf16 roundings per layer, not another model
    assert np.abs(outputs.numpy() - impl.outputs(_pt(batch)).numpy()).max() > 1e-4
