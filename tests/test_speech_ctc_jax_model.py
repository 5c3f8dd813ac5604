"""The JAX (Flax + Optax) CTC acoustic model on its own, in this process: canonical weights, the loss's sum and
count, CTC against a brute-force sum over alignments, padding, jit. Cross-framework parity is
test_parity_speech_ctc_jax.py's (one framework per process, through the engine)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bakeoff.core import registry

pytestmark = pytest.mark.skipif(not registry.installed("jax"), reason="needs jax installed (pip install jax)")


@pytest.fixture(scope="module")
def setup():
    from bakeoff.core.spec import RunSpec
    from bakeoff.trial.parity_probe import perturbed
    from bakeoff.workloads.speech_ctc.jax_model import SpeechCTC

    wl = registry.workload("speech_ctc")
    spec = RunSpec(workload="speech_ctc", framework="jax", preset="tiny", max_steps=1, batch_size=8, device="cpu")
    data = wl.load_data(spec)
    cfg = wl.config("tiny", spec, data)
    cfg["dropout"] = 0.0
    weights = perturbed(wl.init_weights(cfg, 0))  # non-zero biases, non-unit LayerNorm: every mapping matters
    impl = SpeechCTC(cfg)
    batch = next(wl.batches(data.train, 8, 0, 0))
    return wl, cfg, weights, impl, impl.init(weights), batch


@pytest.fixture(scope="module")
def evaluate(setup):
    """Jitted eval-mode (loss, outputs) of the fixture's model: eager JAX compiles every op it meets, slower here."""
    import jax

    impl = setup[3]
    return jax.jit(lambda p, b: impl.loss(p, b, False, None)), jax.jit(impl.outputs)


def _brute_force_nll(log_probs: np.ndarray, label: list[int]) -> float:
    """−log Σ over every frame-level path (blank 0) that collapses to ``label``: merge repeats, drop blanks."""
    frames, vocab = log_probs.shape
    total = -np.inf
    for path in itertools.product(range(vocab), repeat=frames):
        collapsed = [k for k, _ in itertools.groupby(path) if k != 0]
        if collapsed == label:
            total = np.logaddexp(total, sum(log_probs[t, k] for t, k in enumerate(path)))
    return float(-total)


def test_parameter_count_is_the_canonical_count(setup):
    wl, cfg, weights, impl, params, _ = setup
    canonical = sum(v.size for v in wl.init_weights(cfg, 0).values())
    assert canonical == 216_445  # the PyTorch and TensorFlow models' count (test_parity_speech_ctc)
    assert impl.num_params(params) == canonical


def test_canonical_weights_round_trip_exactly(setup):
    import jax
    import jax.numpy as jnp

    _, _, weights, impl, params, _ = setup
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree_util.tree_leaves(params))
    back = impl.get_weights(params)
    assert sorted(back) == sorted(weights)
    assert all(back[k].dtype == np.float32 and np.array_equal(back[k], weights[k]) for k in weights)


def test_init_rejects_wrong_names_and_shapes(setup):
    _, _, weights, impl, _, _ = setup
    with pytest.raises(ValueError, match="differ from the model.s.*head.bias"):
        impl.init({k: v for k, v in weights.items() if k != "head.bias"})
    with pytest.raises(ValueError, match=r"frontend.conv1.kernel: expected shape \(3, 40, 96\)"):
        impl.init({**weights, "frontend.conv1.kernel": weights["frontend.conv1.kernel"].transpose(2, 1, 0)})


def test_ctc_equals_brute_force_sum_over_alignments():
    import jax.numpy as jnp

    from bakeoff.workloads.speech_ctc.jax_model import ctc_losses

    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (6, 8, 4)).astype(np.float32)  # 6 utterances, 8 frames (some padding), 4 classes
    # a repeat (needs a blank between), an empty transcript, a label at the last frame, a repeat run
    labels = [[1, 2], [1, 1], [], [3], [2, 1, 2], [1, 1, 3]]
    frames = np.array([6, 5, 4, 6, 5, 6], np.int32)
    padded = np.zeros((6, 3), np.int32)
    for i, y in enumerate(labels):
        padded[i, : len(y)] = y
    padded[0, 2] = 1  # whatever sits in the padding is ignored (here: equal to the last real label)
    got = np.asarray(ctc_losses(jnp.asarray(logits), jnp.asarray(frames), jnp.asarray(padded),
                                jnp.asarray([len(y) for y in labels], jnp.int32)))
    log_probs = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
    want = [_brute_force_nll(log_probs[i, : frames[i]], y) for i, y in enumerate(labels)]
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_ctc_infeasible_utterance_is_infinite_as_in_torch():
    import jax.numpy as jnp

    from bakeoff.workloads.speech_ctc.jax_model import ctc_losses

    logits = jnp.zeros((3, 6, 4))
    labels = jnp.array([[1, 1, 1], [1, 2, 3], [1, 1, 1]], jnp.int32)
    # [1, 1, 1] needs 5 frames (blanks between repeats): 4 is infeasible, 5 is not; [1, 2, 3] fits in 3
    got = np.asarray(ctc_losses(logits, jnp.array([4, 3, 5]), labels, jnp.array([3, 3, 3])))
    assert got[0] == np.inf and np.isfinite(got[1:]).all()
    np.testing.assert_allclose(got[1], 3 * np.log(4), rtol=1e-6)  # one path: each of its 3 frames p = 1/4


def test_loss_is_a_sum_over_utterances_with_their_count(setup, evaluate):
    """Half-batches padded to their own lengths add up to the batch: the summed loss and count are exact."""
    import jax.numpy as jnp

    _, _, _, _, params, batch = setup
    loss, _ = evaluate
    total, count = loss(params, batch)
    assert count.dtype == jnp.float32 and float(count) == 8.0
    assert total.dtype == jnp.float32 and np.isfinite(float(total)) and float(total) > 0
    halves = []
    for idx in (np.arange(4), np.arange(4, 8)):
        part = {k: v[idx] for k, v in batch.items()}
        part["features"] = part["features"][:, : part["feature_lengths"].max()]  # tighter padding
        halves.append(loss(params, part))
    assert sum(float(c) for _, c in halves) == 8.0
    assert abs(sum(float(s) for s, _ in halves) - float(total)) <= 1e-5 * float(total)


def test_padding_never_changes_real_frames(setup, evaluate):
    _, _, _, _, params, batch = setup
    outputs = evaluate[1]
    out = np.asarray(outputs(params, batch))  # (B, T', 29)
    longer = {**batch, "features": np.pad(batch["features"], [(0, 0), (0, 37), (0, 0)])}
    out_long = np.asarray(outputs(params, longer))
    assert out_long.shape[1] > out.shape[1] and out.shape[2] == 29
    assert np.abs(out_long[:, : out.shape[1]] - out).max() <= 1e-5
    from bakeoff.data.ctc import output_frames

    n = output_frames(batch["feature_lengths"])  # encoder lengths through both stride-2 convolutions
    frames = np.arange(out_long.shape[1])[None, :]
    assert np.all(out_long[frames >= n[:, None]] == 0.0)
    assert np.all(out_long[frames < n[:, None]] < 0.0)  # real frames are log-probabilities
    assert np.allclose(np.exp(out[0, : n[0]]).sum(-1), 1.0, atol=1e-5)


def test_jit_loss_and_gradient_equal_eager(setup):
    import jax

    _, _, _, impl, params, batch = setup
    eager, _ = impl.loss(params, batch, training=True, rng=None)
    jitted, _ = jax.jit(lambda p, b: impl.loss(p, b, True, None))(params, batch)
    assert abs(float(jitted) - float(eager)) <= 1e-5 * abs(float(eager))
    grads = jax.jit(jax.grad(lambda p, b: impl.loss(p, b, True, None)[0]))(params, batch)
    flat = impl.get_weights(grads)
    assert sorted(flat) == sorted(impl.get_weights(params))
    assert all(np.isfinite(g).all() for g in flat.values())
    assert min(np.abs(g).max() for k, g in flat.items() if not k.endswith("attn.k.bias")) > 1e-6


def test_dropout_only_when_training_with_a_key(setup):
    import jax
    import jax.numpy as jnp

    _, cfg, weights, _, _, batch = setup
    from bakeoff.workloads.speech_ctc.jax_model import SpeechCTC

    impl = SpeechCTC({**cfg, "dropout": 0.1})
    params = impl.init(weights)
    plain = float(impl.loss(params, batch, training=False, rng=None)[0])
    assert float(impl.loss(params, batch, training=True, rng=None)[0]) == plain  # no key: deterministic
    a = float(impl.loss(params, batch, training=True, rng=jax.random.key(1))[0])
    b = float(impl.loss(params, batch, training=True, rng=jax.random.key(1))[0])
    assert a == b and a != plain
    assert float(impl.loss(params, batch, True, jax.random.key(2), jnp.float32)[0]) != a


def test_bf16_compute_keeps_fp32_params_and_loss(setup):
    import jax.numpy as jnp

    _, _, _, impl, params, batch = setup
    fp32 = float(impl.loss(params, batch, training=False, rng=None)[0])
    total, count = impl.loss(params, batch, training=False, rng=None, dtype=jnp.bfloat16)
    logits, _ = impl.logits(params, batch, training=False, rng=None, dtype=jnp.bfloat16)
    assert logits.dtype == jnp.bfloat16 and total.dtype == count.dtype == jnp.float32
    assert abs(float(total) - fp32) <= 8 * 2.0**-8 * fp32  # a few bf16 roundings per layer, not a different model
    assert impl.outputs(params, batch, dtype=jnp.bfloat16).dtype == jnp.float32
