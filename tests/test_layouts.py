"""The weight-layout helpers (bakeoff.workloads.common.layouts) move weights between PyTorch's layouts and the
canonical (Keras', Flax's) ones so that PyTorch computes, from the converted weights, what the canonical layer
computes — checked against the layer written out in numpy in the canonical layout (the Keras formulas)."""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.core import registry
from bakeoff.workloads.common import layouts
from bakeoff.workloads.common.layouts import AS_IS, CONV, CONV_TRANSPOSE, DENSE, flattened

TORCH = pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
rng = np.random.default_rng(0)


def normal(*shape: int) -> np.ndarray:
    return rng.normal(size=shape).astype(np.float32)


@pytest.mark.parametrize("layout, shape", [(DENSE, (5, 3)), (CONV, (3, 4, 2, 6)), (CONV, (5, 2, 7)),
                                           (CONV_TRANSPOSE, (3, 3, 4, 2)), (flattened((2, 3, 4)), (24, 5))])
def test_each_layout_is_undone_by_its_inverse(layout, shape):
    kernel = normal(*shape)
    native = layout.native(kernel)
    assert native.shape != kernel.shape or layout is DENSE and shape[0] == shape[1]
    np.testing.assert_array_equal(layout.canonical(native), kernel)


def test_tables_move_a_state_and_name_what_does_not_fit():
    table = {"dense.kernel": ("fc.weight", DENSE), "dense.bias": ("fc.bias", AS_IS)}
    weights = {"dense.kernel": normal(4, 3), "dense.bias": normal(3)}
    native = layouts.from_canonical(weights, table, shapes={"fc.weight": (3, 4), "fc.bias": (3,)})
    assert native["fc.weight"].shape == (3, 4)
    back = layouts.to_canonical({**native, "fc.num_batches_tracked": np.zeros(())}, table)
    assert back.keys() == weights.keys() and all(np.array_equal(back[k], weights[k]) for k in weights)
    with pytest.raises(ValueError, match=r"dense.kernel: the model's fc.weight has shape \(4, 4\)"):
        layouts.from_canonical(weights, table, shapes={"fc.weight": (4, 4)})
    with pytest.raises(KeyError, match="weight dense.bias: the model has no 'fc.bias'"):
        layouts.to_canonical({"fc.weight": native["fc.weight"]}, table)
    with pytest.raises(KeyError, match="dense.bias .* not among the canonical weights"):
        layouts.from_canonical({"dense.kernel": weights["dense.kernel"]}, table)


def test_tables_copy_so_weights_read_do_not_move_with_the_model():
    live = {"fc.bias": np.zeros(3, np.float32)}  # as tensor.numpy() gives: the parameter's own memory
    read = layouts.to_canonical(live, {"dense.bias": ("fc.bias", AS_IS)})
    live["fc.bias"] += 1  # a training step
    np.testing.assert_array_equal(read["dense.bias"], np.zeros(3))


def test_gates_reorder_and_refuse_orders_that_name_other_gates():
    value = np.repeat(np.arange(3.0), 2)  # blocks r r | z z | n n
    np.testing.assert_array_equal(layouts.reorder_gates(value, "rzn", "zrn"), [1, 1, 0, 0, 2, 2])
    with pytest.raises(ValueError, match="name different gates"):
        layouts.reorder_gates(value, "rzn", "ifo")
    with pytest.raises(ValueError, match="does not split into 4 gates"):
        layouts.reorder_gates(value, "ifgo", "ifgo")


def test_momentum_conversions_are_each_others_inverse():
    assert layouts.torch_bn_momentum(0.99) == pytest.approx(0.01)
    assert layouts.keras_bn_momentum(0.1) == pytest.approx(0.9)
    with pytest.raises(ValueError):
        layouts.torch_bn_momentum(1.5)


@TORCH
def test_torch_layers_compute_the_canonical_layer_from_converted_weights():
    import torch
    from torch import nn

    torch.manual_seed(0)
    x = normal(2, 6, 7, 3)  # NHWC
    kernel, bias = normal(3, 2, 3, 4), normal(4)  # (kh, kw, in, out)
    conv = nn.Conv2d(3, 4, (3, 2))
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(CONV.native(kernel).copy()))
        conv.bias.copy_(torch.from_numpy(bias))
        got = conv(torch.from_numpy(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1).numpy()
    # the canonical convolution (valid, stride 1), NHWC, written out
    want = np.zeros((2, 4, 6, 4), np.float32) + bias
    for i in range(4):
        for j in range(6):
            want[:, i, j] += np.einsum("bhwc,hwco->bo", x[:, i:i + 3, j:j + 2], kernel)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(CONV.canonical(conv.weight.detach().numpy()), kernel)

    # a dense layer after flattening: PyTorch flattens (C, H, W), the canonical rows are (H, W, C)
    features, dense = normal(2, 4, 6, 4), normal(4 * 6 * 4, 5)
    linear = nn.Linear(96, 5, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(flattened((4, 6, 4)).native(dense).copy()))
        got = linear(torch.from_numpy(features).permute(0, 3, 1, 2).flatten(1)).numpy()
    np.testing.assert_allclose(got, features.reshape(2, -1) @ dense, rtol=1e-5, atol=1e-5)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


@TORCH
def test_torch_gru_and_lstm_compute_the_keras_cells_from_converted_weights():
    import torch
    from torch import nn

    x, h0 = normal(2, 5, 3), np.zeros((2, 4), np.float32)
    # Keras GRU(reset_after=True): gates z, r, h; bias (2, 3h) = input and recurrent biases
    kernel, recurrent, bias = normal(3, 12), normal(4, 12), normal(2, 12)
    gru = nn.GRU(3, 4, batch_first=True)
    with torch.no_grad():
        for param, value in zip((gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0, gru.bias_hh_l0),
                                layouts.gru_to_torch(kernel, recurrent, bias), strict=True):
            param.copy_(torch.from_numpy(np.ascontiguousarray(value)))
        got = gru(torch.from_numpy(x))[0].numpy()
    h = h0
    for t in range(5):
        xi, hr = x[:, t] @ kernel + bias[0], h @ recurrent + bias[1]
        z, r = _sigmoid(xi[:, :4] + hr[:, :4]), _sigmoid(xi[:, 4:8] + hr[:, 4:8])
        h = z * h + (1 - z) * np.tanh(xi[:, 8:] + r * hr[:, 8:])
    np.testing.assert_allclose(got[:, -1], h, rtol=1e-5, atol=1e-5)
    back = layouts.gru_from_torch(*(p.detach().numpy() for p in (gru.weight_ih_l0, gru.weight_hh_l0,
                                                                 gru.bias_ih_l0, gru.bias_hh_l0)))
    for a, b in zip(back, (kernel, recurrent, bias), strict=True):
        np.testing.assert_array_equal(a, b)

    # Keras LSTM: gates i, f, c, o; one bias
    kernel, recurrent, bias = normal(3, 16), normal(4, 16), normal(16)
    lstm = nn.LSTM(3, 4, batch_first=True)
    with torch.no_grad():
        for param, value in zip((lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0),
                                layouts.lstm_to_torch(kernel, recurrent, bias), strict=True):
            param.copy_(torch.from_numpy(np.ascontiguousarray(value)))
        got = lstm(torch.from_numpy(x))[0].numpy()
    h, c = h0, h0
    for t in range(5):
        g = x[:, t] @ kernel + h @ recurrent + bias
        i, f, cand, o = _sigmoid(g[:, :4]), _sigmoid(g[:, 4:8]), np.tanh(g[:, 8:12]), _sigmoid(g[:, 12:])
        c = f * c + i * cand
        h = o * np.tanh(c)
    np.testing.assert_allclose(got[:, -1], h, rtol=1e-5, atol=1e-5)


@TORCH
def test_torch_batchnorm_with_the_converted_momentum_keeps_keras_running_mean():
    import torch
    from torch import nn

    x = normal(8, 3) * 2 + 1
    bn = nn.BatchNorm1d(3, momentum=layouts.torch_bn_momentum(0.9), eps=layouts.NORM_EPSILON["keras"]["batch_norm"])
    bn.train()
    bn(torch.from_numpy(x))
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.9 * 0 + 0.1 * x.mean(0), rtol=1e-5)
    # What a table cannot fix: PyTorch's running variance is the unbiased one, Keras' the biased one.
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 * 1 + 0.1 * x.var(0, ddof=1), rtol=1e-5)
    assert set(layouts.NORM_NAMES["torch"].values()) <= set(bn.state_dict())
