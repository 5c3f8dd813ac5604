"""bakeoff's PyTorch encoder block (``common.torch_encoder.EncoderLayer``) computes exactly what the stock
``nn.TransformerEncoderLayer`` computes — training outputs, every parameter's gradient, with and without a key
padding mask, with an attention mask — and keeps the stock layer's fused inference path, so its faster training
attention (#25) changes no number a parity test or a deployment reads."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from bakeoff.workloads.common.torch_encoder import encoder_layer  # noqa: E402


def _pair(d: int = 32, heads: int = 4, ff: int = 64) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(0)
    ours = encoder_layer(d, heads, ff, 0.0, 1e-5)
    stock = nn.TransformerEncoderLayer(d, heads, ff, 0.0, activation="relu", layer_norm_eps=1e-5, batch_first=True)
    stock.load_state_dict(ours.state_dict())  # the same parameters under the same names
    return ours, stock


@pytest.mark.parametrize("masks", ["none", "padding", "padding+attn"])
def test_training_outputs_and_gradients_equal_the_stock_layers(masks):
    ours, stock = _pair()
    x = torch.randn(3, 7, 32)
    pad = torch.tensor([[False] * 7, [False] * 5 + [True] * 2, [False] * 2 + [True] * 5]) if masks != "none" else None
    attn = torch.triu(torch.full((7, 7), float("-inf")), 1) if masks == "padding+attn" else None
    outs = []
    for layer in (ours, stock):
        layer.train()
        y = layer(x, src_mask=attn, src_key_padding_mask=pad)
        (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
        outs.append((y.detach(), {n: p.grad.clone() for n, p in layer.named_parameters()}))
    (y_ours, g_ours), (y_stock, g_stock) = outs
    torch.testing.assert_close(y_ours, y_stock, rtol=1e-5, atol=1e-6)
    assert g_ours.keys() == g_stock.keys() and len(g_ours) == 12
    for name in g_ours:
        torch.testing.assert_close(g_ours[name], g_stock[name], rtol=1e-4, atol=1e-6, msg=name)


def test_training_dropout_draws_on_the_attention_weights():
    torch.manual_seed(0)
    layer = encoder_layer(16, 2, 32, 0.5, 1e-5).train()
    x = torch.randn(2, 5, 16)
    assert not torch.allclose(layer(x), layer(x))  # different masks each call: dropout is on in training
    layer.eval()
    with torch.no_grad():
        torch.testing.assert_close(layer(x), layer(x))


def test_inference_takes_the_stock_fused_path():
    ours, _ = _pair()
    ours.eval()
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        traced = torch.jit.trace(ours, (x,), check_trace=False)
    kinds = {n.kind() for n in traced.inlined_graph.nodes()}
    assert "aten::_transformer_encoder_layer_fwd" in kinds
