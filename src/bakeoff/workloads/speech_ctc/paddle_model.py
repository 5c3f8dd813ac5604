"""Convolution + Transformer CTC acoustic model in PaddlePaddle (``paddle.nn``, dygraph), exchanging canonical weights.

The same computation as :mod:`.torch_model`: two stride-2 convolutions (kernel 3, one frame of zero padding each
side) with the frames at or past each utterance's length zeroed after each, fixed sinusoidal positions, post-norm
Transformer blocks with padded frames masked out of attention as keys, a dense head.

The Transformer block and the canonical-weights mapping are :mod:`bakeoff.workloads.common.paddle_encoder`'s (the
text classifier's and autoencoder's: torch's layer computed in its order, q, k, v packed in one projection). The front
end's ``nn.Conv1D`` stores ``(out, in, width)`` as PyTorch's Conv1d does (canonical ``(width, in, out)``: the ``CONV``
layout); ``nn.Linear`` stores ``(in, out)``, the canonical kernel itself.

CTC is ``paddle.nn.functional.ctc_loss`` (warp-ctc), matched to ``F.ctc_loss(blank=0, reduction="sum",
zero_infinity=False)``:
  * it takes *logits*, time-major (T, B, vocab), and applies softmax itself (measured: passing log-softmax output
    gives the same value, as softmax(log_softmax(x)) = softmax(x); logits save one op);
  * labels int32, lengths int64; ``reduction="none"`` gives each utterance's negative log-likelihood, not divided by
    its transcript length: summing them is torch's ``reduction="sum"``, and the count is the number of utterances;
  * warp-ctc returns 0, with a zero gradient, for an utterance with too few frames for its labels (fewer than one per
    label plus a blank between repeats) where PyTorch's ``zero_infinity=False`` gives +inf: the loss sets those
    utterances to +inf explicitly, from the lengths (their gradient stays 0 rather than PyTorch's NaN; the shipped
    data never has one — speech.py checks feasibility).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import paddle
import paddle.nn.functional as F
from paddle import nn

from bakeoff.workloads.common import layouts
from bakeoff.workloads.common.paddle_encoder import EncoderBlock, PaddleModel, block_table, padding_mask
from bakeoff.workloads.speech_ctc.workload import sinusoids

BLANK = 0


def _valid(lengths: paddle.Tensor, frames: int) -> paddle.Tensor:
    """(B, frames) True for the frames before each utterance's length."""
    return paddle.arange(frames, dtype=lengths.dtype)[None, :] < lengths[:, None]


def _mask_past(x: paddle.Tensor, lengths: paddle.Tensor) -> paddle.Tensor:
    """Zero the frames of ``x`` (B, C, T) at or past each utterance's length."""
    return x * _valid(lengths, x.shape[-1])[:, None, :].astype(x.dtype)


class SpeechCTCNet(nn.Layer):
    def __init__(self, cfg: Mapping[str, Any]) -> None:
        super().__init__()
        d = cfg["d_model"]
        self.conv1 = nn.Conv1D(cfg["n_mels"], cfg["conv_channels"], 3, stride=2, padding=1)
        self.conv2 = nn.Conv1D(cfg["conv_channels"], d, 3, stride=2, padding=1)
        self.register_buffer("positions", paddle.to_tensor(sinusoids(cfg["max_positions"], d)), persistable=False)
        layer = (d, cfg["num_heads"], cfg["d_ff"], cfg["dropout"], cfg["layer_norm_eps"])
        self.blocks = nn.LayerList([EncoderBlock(*layer) for _ in range(cfg["num_layers"])])
        self.drop = nn.Dropout(cfg["dropout"])
        self.head = nn.Linear(d, cfg["vocab_size"])

    def forward(self, features: paddle.Tensor, lengths: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        x = features.transpose([0, 2, 1])  # (B, n_mels, T): Conv1D (NCL) wants channels first
        lengths = (lengths + 1) // 2
        x = _mask_past(F.relu(self.conv1(x)), lengths)  # (B, C, ceil(T/2))
        lengths = (lengths + 1) // 2
        x = _mask_past(F.relu(self.conv2(x)), lengths)  # (B, d, T'), T' = ceil(ceil(T/2)/2)
        x = x.transpose([0, 2, 1])  # (B, T', d)
        x = self.drop(x + self.positions[: x.shape[1]])
        mask = padding_mask(paddle.logical_not(_valid(lengths, x.shape[1])))  # (B, 1, 1, T'): real frames only
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x), lengths  # (B, T', vocab) logits, (B,) encoder lengths


def ctc_losses(logits: paddle.Tensor, logit_lengths: paddle.Tensor, labels: paddle.Tensor,
               label_lengths: paddle.Tensor) -> paddle.Tensor:
    """Per-utterance CTC negative log-likelihood (B,), blank 0, as ``F.ctc_loss(reduction="none")`` of PyTorch (see
    the module docstring for how warp-ctc's conventions are matched). ``logits`` (B, T, vocab) are cast to fp32."""
    logit_lengths, label_lengths = logit_lengths.astype("int64"), label_lengths.astype("int64")
    labels = labels.astype("int32")
    per = F.ctc_loss(logits.astype("float32").transpose([1, 0, 2]), labels, logit_lengths, label_lengths,
                     blank=BLANK, reduction="none")  # (B,): warp-ctc applies the softmax
    real = _valid(label_lengths, labels.shape[1])  # (B, S)
    repeats = ((labels[:, 1:] == labels[:, :-1]) & real[:, 1:]).astype("int64").sum(axis=1)  # need a blank between
    infeasible = logit_lengths < label_lengths + repeats
    return paddle.where(infeasible, paddle.full_like(per, float("inf")), per)


class SpeechCTC(PaddleModel):
    """ModelImpl for PaddlePaddle."""

    def net(self) -> SpeechCTCNet:
        return SpeechCTCNet(self.config)

    def logits(self, batch: Mapping[str, paddle.Tensor], training: bool) -> tuple[paddle.Tensor, paddle.Tensor]:
        self.mode(training)
        return self.module(batch["features"], batch["feature_lengths"].astype("int64"))

    def loss(self, batch: Mapping[str, paddle.Tensor], training: bool = True) -> tuple[paddle.Tensor, paddle.Tensor]:
        logits, lengths = self.logits(batch, training)
        summed = ctc_losses(logits, lengths, batch["labels"], batch["label_lengths"]).sum()
        return summed, paddle.full([], logits.shape[0], dtype=summed.dtype)

    @paddle.no_grad()
    def outputs(self, batch: Mapping[str, paddle.Tensor]) -> paddle.Tensor:
        logits, lengths = self.logits(batch, training=False)
        valid = _valid(lengths, logits.shape[1])  # (B, T')
        return F.log_softmax(logits.astype("float32"), -1) * valid[..., None].astype("float32")  # zero past length

    # --- canonical weights: convolutions transposed, the rest as is; the blocks' table is common.paddle_encoder's

    def table(self) -> layouts.Table:
        table: dict[str, tuple[str, layouts.Layout]] = {}
        for conv in ("conv1", "conv2"):
            table[f"frontend.{conv}.kernel"] = (f"{conv}.weight", layouts.CONV)
            table[f"frontend.{conv}.bias"] = (f"{conv}.bias", layouts.AS_IS)
        for prefix, native in self.blocks().items():
            table.update(block_table(prefix, native))
        table["head.kernel"], table["head.bias"] = ("head.weight", layouts.AS_IS), ("head.bias", layouts.AS_IS)
        return table
