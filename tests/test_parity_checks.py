"""The parity checks catch what they are for, on hand-made arrays (no framework needed): a gradient wrong in one
small tensor, a tensor that did not train, weights that moved differently, a bf16 loss outside its tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.analysis.parity_tolerances import flatten, per_tensor_errors, unflatten
from parity_checks import BF16_U, check_gradients, check_losses, check_moved, check_weights


def _grads(**tensors: np.ndarray) -> dict[str, np.ndarray]:
    return flatten("grad", tensors)


def test_per_tensor_errors_are_relative_with_an_absolute_floor():
    big, small = np.full(3, 10.0), np.full(3, 1e-9)
    errors = per_tensor_errors({"big": big + 1e-3, "small": small * 3}, {"big": big, "small": small}, floor=1e-6)
    assert errors["big"] == pytest.approx(1e-4)
    assert errors["small"] == pytest.approx(2e-9 / 1e-6)  # held to the floor, not to its own noise
    with pytest.raises(ValueError, match="different tensors"):
        per_tensor_errors({"a": big}, {"b": big}, floor=1e-6)


def test_a_small_tensor_wrong_fails_though_the_largest_entries_agree():
    rng = np.random.default_rng(0)
    reference = {"embed": rng.normal(0, 1.0, 100), "q.kernel": rng.normal(0, 1e-5, 10)}
    same = {k: v * (1 + 1e-6) for k, v in reference.items()}
    check_gradients(_grads(**same), _grads(**reference))
    wrong = {**same, "q.kernel": same["q.kernel"] * 1.01}  # 1% off, ~1e-7 absolute: nothing next to the largest entry
    with pytest.raises(AssertionError, match="q.kernel"):
        check_gradients(_grads(**wrong), _grads(**reference))


def test_a_zero_gradient_is_known_by_measurement_or_declaration_never_by_a_name():
    from bakeoff.analysis import parity_tolerances as parity

    # Keras names an attention's key bias its own way: noise on both sides, it is zero as measured, whatever its
    # name (a hard-coded "attn.k.bias" never matched it, and parity called the unmodified Keras example different)
    keras = {"dense/kernel": np.ones(4), "multi_head_attention/key/bias": np.full(4, 7e-10)}
    other = {**keras, "multi_head_attention/key/bias": np.full(4, -3e-10)}
    check_gradients(_grads(**keras), _grads(**other))
    assert parity.zero_gradients(keras, other) == {"multi_head_attention/key/bias":
                                                   "measured: rounding noise on both sides"}
    # declared zero but not noise: the workload's own statement fails it
    bad = {"w": np.ones(4), "attn.k.bias": np.full(4, 1e-3)}
    [_, bias] = parity.compare_gradients(bad, bad, declared=("attn.k.bias",))
    assert not bias.ok and "not rounding noise (declared zero by the workload)" in bias.note
    # a tensor called attn.k.bias with a real gradient is compared like any other: a port wrong in it fails
    wrong = {**bad, "attn.k.bias": bad["attn.k.bias"] * 1.01}
    with pytest.raises(AssertionError, match="attn.k.bias"):
        check_gradients(_grads(**wrong), _grads(**bad))


def test_the_trained_weights_of_a_zero_gradient_are_not_compared_and_the_finding_says_why():
    from bakeoff.analysis import parity_tolerances as parity

    init = {"w": np.ones(4), "key/bias": np.zeros(4)}
    a = {"w": init["w"] + 1e-3, "key/bias": np.full(4, 1e-3)}  # Adam moved the noise by a full step, each its own way
    b = {"w": init["w"] + 1e-3, "key/bias": np.full(4, -1e-3)}
    zero = parity.zero_gradients({"w": np.ones(4), "key/bias": np.full(4, 1e-12)}, {"w": np.ones(4),
                                                                                    "key/bias": np.zeros(4)})
    findings = {f.item: f for f in parity.compare_weights(init, a, b, zero=zero)}
    bias = findings["key/bias"]
    assert findings["w"].ok and bias.ok and "its gradient is zero (measured" in bias.note
    assert not {f.item: f for f in parity.compare_weights(init, a, b)}["key/bias"].ok  # without: a disagreement


def test_a_check_within_2x_of_failing_is_flagged_near():
    from bakeoff.analysis.parity_tolerances import Finding
    from bakeoff.run.parity_session import CheckRow, Mode, ParityReport

    mode = Mode("eager", "fp32")
    row = CheckRow(mode, "jax", "gradients", (Finding("gradients", "ffn.kernel", 0, 0, 6.9e-5, 1e-4, "", True),
                                              Finding("gradients", "out.bias", 0, 0, 1e-6, 1e-4, "", True)))
    assert row.ok and row.near and row.margin == pytest.approx(0.69)
    far = CheckRow(mode, "jax", "outputs", (Finding("outputs", "outputs", 0, 0, 3e-6, 1e-5, "", True),))
    assert far.ok and not far.near and far.margin == pytest.approx(0.3)
    report = ParityReport("blobs", "torch", ("torch", "jax"), (mode,), (row, far), {})
    checks = report.to_dict()["checks"]
    assert [(c["check"], c["near"], round(c["margin"], 2)) for c in checks] == [("gradients", True, 0.69),
                                                                                ("outputs", False, 0.3)]


def _trained(init: dict[str, np.ndarray], moves: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**flatten("init", init), **flatten("weights", {k: init[k] + moves[k] for k in init})}


def test_weights_compared_by_how_far_they_moved():
    init = {"w": np.ones(50), "b": np.zeros(5)}
    step = {"w": np.full(50, 1e-3), "b": np.full(5, 1e-3)}
    a = _trained(init, step)
    check_moved(a, learning_rate=1e-3)
    check_weights(a, _trained(init, {k: v * (1 + 1e-4) for k, v in step.items()}))
    # 1% of the movement apart is 1e-5 of the weight: weights compared to themselves would call this equal
    with pytest.raises(AssertionError, match="moved differently"):
        check_weights(a, _trained(init, {**step, "w": step["w"] * 1.01}))
    with pytest.raises(AssertionError, match="did not move"):
        check_moved(_trained(init, {**step, "b": np.zeros(5)}), learning_rate=1e-3)
    assert sorted(unflatten(a, "weights")) == ["b", "w"]


def test_bf16_losses_held_to_u_at_first_and_8u_after():
    fp32 = np.array([0.7, 0.6, 0.5])
    check_losses(fp32 * (1 + np.array([0.5, 4, 7]) * BF16_U), fp32, "bf16")
    with pytest.raises(AssertionError, match="step 1 loss"):
        check_losses(fp32 * (1 + np.array([2, 0, 0]) * BF16_U), fp32, "bf16")
    with pytest.raises(AssertionError, match="step 2 loss"):
        check_losses(fp32 * (1 + np.array([0, 9, 0]) * BF16_U), fp32, "bf16")
    with pytest.raises(AssertionError, match="step 2 loss"):
        check_losses(fp32 * (1 + np.array([0, 2e-4, 0])), fp32, "fp32")


def test_running_statistics_are_weights_but_neither_parameters_nor_gradients():
    from bakeoff.analysis.parity_tolerances import (
        compare_gradients,
        compare_parameters,
        compare_weights,
        running_statistic,
    )

    assert running_statistic("stem.bn.moving_variance") and running_statistic("batch_normalization/moving_mean")
    assert not running_statistic("bn.gamma") and not running_statistic("moving_mean_head.kernel")

    canonical = {"bn.gamma": np.ones(4), "bn.beta": np.zeros(4), "bn.moving_mean": np.zeros(4),
                 "bn.moving_variance": np.ones(4)}
    [count, *values] = compare_parameters(8, canonical, canonical)  # 8 trainable: gamma and beta
    assert count.ok and [v.item for v in values] == list(canonical) and all(v.ok for v in values)
    assert not compare_parameters(16, canonical, canonical)[0].ok
    # an engine reading gradients through the weight mapping finds the statistics' values there: not compared
    grads = {"bn.gamma": np.full(4, 0.1), "bn.beta": np.full(4, 0.2)}
    found = compare_gradients({**grads, "bn.moving_mean": np.full(4, 5.0)}, {**grads, "bn.moving_mean": np.zeros(4)})
    assert [f.item for f in found] == ["bn.gamma", "bn.beta"] and all(f.ok for f in found)
    # after training: a momentum of 0.99 for 0.01 moves the running mean 99 times as far
    batch_mean = np.full(4, 0.5)
    keras = {**canonical, "bn.moving_mean": 0.01 * batch_mean}
    unconverted = {**canonical, "bn.moving_mean": 0.99 * batch_mean}
    assert all(f.ok for f in compare_weights(canonical, keras, keras))
    [bad] = [f for f in compare_weights(canonical, unconverted, keras) if not f.ok]
    assert bad.item == "bn.moving_mean" and bad.error == pytest.approx(98)


def test_dropout_left_on_in_evaluation_fails_the_evaluation_check():
    from bakeoff.analysis.parity_tolerances import compare_evaluation

    outputs = np.random.default_rng(0).uniform(0, 1, 64).astype(np.float32)
    probe = {"outputs": outputs, "eval_dropout": np.array(0.2), "outputs_dropout": outputs.copy(),
             "outputs_dropout_again": outputs + 1e-7}
    found = compare_evaluation(probe, "fp32")
    assert [f.check for f in found] == ["evaluation"] * 2 and all(f.ok for f in found)
    assert found[0].item == "outputs with dropout 0.2 (evaluation mode)"
    mask = np.random.default_rng(1).uniform(size=64) > 0.2
    dropped = {**probe, "outputs_dropout": np.where(mask, outputs / 0.8, 0), "outputs_dropout_again": outputs}
    assert [f.ok for f in compare_evaluation(dropped, "fp32")] == [False, True]
