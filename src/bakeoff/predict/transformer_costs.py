"""What the capacity plan (:mod:`bakeoff.predict.capacity`) counts: a Transformer's :class:`Shape` and the
:class:`Machine` it is planned on, sizes with their units, and per training step the bytes one layer keeps for its
backward pass (Korthikanti et al. 2022), the FLOPs (Kaplan et al. 2020), the elementwise work, and the GEMMs a step
runs with their time at a device's measured rates by shape (#49)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

from bakeoff.core.spec import SpecError

BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
"""Bytes of an activation element, by the precision the model computes in."""

GPT3_WIDTH_PER_LAYER = 128
"""The shape rule for a bare parameter count: width = 128 × layers, as GPT-3's models are shaped (Brown et al. 2020,
Table 2.1: 175B is 96 layers of 12,288), heads of 128, feed-forward 4 × width."""


class PlanError(SpecError):
    """A plan that cannot be made: the message names the field and what is accepted (exit 2 in the CLI)."""


@dataclasses.dataclass(frozen=True)
class Shape:
    """A Transformer: ``layers`` blocks of width ``width`` with ``heads`` attention heads and a feed-forward of
    ``ffn``, over sequences of ``seq`` tokens from a vocabulary of ``vocab``; ``lm_head``: a vocabulary-sized output
    (a language model) rather than a classifier's few classes."""

    layers: int
    width: int
    heads: int
    seq: int
    vocab: int
    ffn: int
    lm_head: bool = True

    def __post_init__(self) -> None:
        for name in ("layers", "width", "heads", "seq", "vocab", "ffn"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise PlanError(f"{name}={value!r}: give a positive integer")
        if self.width % self.heads:
            raise PlanError(f"heads={self.heads} does not divide width={self.width}: give heads among "
                            f"{[h for h in range(1, min(self.width, 256) + 1) if self.width % h == 0][-6:]}")

    @property
    def params(self) -> int:
        """Trainable parameters: per block q, k, v and output projections with biases (4h² + 4h), the feed-forward
        (2hf + f + h) and two LayerNorms (4h); token and position embeddings (V·h + s·h); the output head shares the
        token embedding (tied) when it is a language model's."""
        h, f = self.width, self.ffn
        block = 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h
        return self.layers * block + self.vocab * h + self.seq * h

    @property
    def compute_params(self) -> int:
        """The parameters a token's matmuls use (Kaplan et al.'s non-embedding count, plus a language model's output
        projection): a lookup costs no FLOPs, so ``6·P·tokens`` counts these, not :attr:`params` — at
        text_classifier's ``small`` the embeddings are 61% of the parameters."""
        return self.layers * self.layer_params + (self.vocab * self.width if self.lm_head else 0)

    @property
    def layer_params(self) -> int:
        h, f = self.width, self.ffn
        return 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h

    @classmethod
    def from_params(cls, params: float, seq: int, vocab: int) -> Shape:
        """The shape :data:`GPT3_WIDTH_PER_LAYER` gives a parameter count (about ``12·L·h²`` in the blocks)."""
        if not params >= 1e5:
            raise PlanError(f"params={params!r}: give a parameter count of at least 1e5 (e.g. 7e9, 100e9)")
        layers = max(1, round((params / (12 * GPT3_WIDTH_PER_LAYER ** 2)) ** (1 / 3)))
        width = GPT3_WIDTH_PER_LAYER * layers
        return cls(layers, width, max(1, width // 128), seq, vocab, 4 * width)


@dataclasses.dataclass(frozen=True)
class Machine:
    """``devices`` accelerators of ``memory`` bytes each; ``flops``: a device's peak FLOP/s at the plan's
    precision; ``bandwidth``: bytes/s each device moves to the others (None: unknown, times not computed)."""

    devices: int
    memory: float
    flops: float | None = None
    bandwidth: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.devices, int) or self.devices < 1:
            raise PlanError(f"devices={self.devices!r}: give a positive integer")
        if not self.memory > 0:
            raise PlanError(f"memory={self.memory!r}: give a size with a unit, e.g. 80GB or 80GiB")


_UNITS = {"": None, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2 ** 10, "mib": 2 ** 20,
          "gib": 2 ** 30, "tib": 2 ** 40}


def parse_size(text: str, what: str = "memory", per_second: bool = False) -> float:
    """``"80GB"`` (10⁹), ``"80GiB"`` (2³⁰), ``"450GB/s"`` with ``per_second``; a bare number is refused: bytes or
    gigabytes is exactly the mistake a plan should not make silently."""
    suffix = "/s" if per_second else ""
    match = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([kmgt]?i?b)?" + re.escape(suffix) + r"\s*", text.lower())
    unit = (match.group(2) or "") if match else ""
    if not match or _UNITS.get(unit) is None:
        example = "450GB/s" if per_second else "80GB or 80GiB"
        raise PlanError(f"{what}={text!r}: give a number with a unit (B, KB, MB, GB, TB or KiB, MiB, GiB, TiB"
                        f"{suffix}), e.g. {example}")
    return float(match.group(1)) * _UNITS[unit]



def layer_activations(shape: Shape, batch: float, e: int, tensor: int = 1, fused: bool = False,
                      dropout: bool = True, sequence: bool = False) -> float:
    """Bytes one layer keeps for its backward pass, for ``batch`` sequences (Korthikanti et al. eq. 1-2, per element
    size ``e``): replicated under tensor parallelism, the two LayerNorms' inputs (2e), the attention's and the
    feed-forward's inputs (e each) and two dropout masks (1 each); split ``tensor`` ways, Q and K (2e), V (e), the
    output projection's input (e), the feed-forward's two ``f``-wide tensors (2e·f/h) and, unless the attention is
    fused, the scores: softmax output and dropout output (e each) and their mask (1) over ``a·s²``. ``sequence``:
    sequence parallelism (their §4.2.2) splits the replicated part ``tensor`` ways too, along the sequence."""
    s, h, a = shape.seq, shape.width, shape.heads
    masks = 1 if dropout else 0
    replicated = s * batch * h * (4 * e + 2 * masks)
    split = s * batch * h * 4 * e + 2 * e * s * batch * shape.ffn
    if not fused:
        split += a * s * s * batch * (2 * e + masks)
    return replicated / (tensor if sequence else 1) + split / tensor


def training_flops(shape: Shape, batch: float, recompute: bool = False) -> float:
    """FLOPs of a training step on ``batch`` sequences: the matmuls' ``6·P·tokens`` (Kaplan et al.) plus attention's
    QKᵀ and AV, ``12·s²·h`` a sequence a layer (4·s²·h forward, twice that backward); a full recomputation runs the
    forward twice (8 and 16). The workloads count the same (``flops_per_example``), so an MFU bakeoff measured
    converts back to time exactly."""
    s, h = shape.seq, shape.width
    forward_passes = 4 if recompute else 3
    return forward_passes * batch * s * (2 * shape.compute_params + 4 * s * h * shape.layers)


def attention_elements(shape: Shape, batch: float, recompute: bool = False) -> float:
    """Elements of the attention scores a step computes, ``heads·s²`` a sequence a layer (softmax and dropout
    forward and backward pass over each): the memory-bound work a calibration times apart from the FLOPs."""
    return (4 / 3 if recompute else 1.0) * shape.heads * shape.seq ** 2 * batch * shape.layers


def activation_elements(shape: Shape, batch: float, recompute: bool = False) -> float:
    """Elements of each layer's ``(tokens, width)`` activations a step computes, ``batch·s·h`` a layer: the
    memory-bound work over them (LayerNorms, residual adds, biases, dropout, forward and backward) that a
    calibration times apart from the GEMMs, as :func:`attention_elements` is the softmax's."""
    return (4 / 3 if recompute else 1.0) * batch * shape.seq * shape.width * shape.layers


@dataclasses.dataclass(frozen=True)
class Gemm:
    """``count`` products a training step runs of ``batch`` independent ``(m, k) @ (k, n)`` matrices, 2·m·n·k FLOPs
    each; ``key`` is what a rate table is measured and looked up by."""

    name: str
    batch: int
    m: int
    n: int
    k: int
    count: int

    @property
    def key(self) -> tuple[int, int, int, int]:
        return (self.batch, self.m, self.n, self.k)

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k * self.count


RateTable = Mapping[tuple[int, int, int, int], float]
"""FLOP/s of each GEMM shape ``(batch, m, n, k)`` for one framework and precision on one device."""


def gemms(shape: Shape, batch: float, recompute: bool = False) -> list[Gemm]:
    """The GEMMs of a training step on ``batch`` sequences (``T = batch·s`` tokens): for each of the ``layers``
    blocks' projections — QKV (``h → 3h``, fused as PyTorch's and Megatron's are), the attention's output
    (``h → h``), the MLP's up (``h → f``) and down (``f → h``), and a language model's logits (``h → V``) — the
    forward ``(T, in) @ (in, out)``, the input gradient ``(T, out) @ (out, in)`` and the weight gradient
    ``(in, T) @ (T, out)``; and per block the attention's ``batch·heads`` products of ``d = h/heads``: scores
    ``QKᵀ`` ``(s, d) @ (d, s)`` and context ``PV`` ``(s, s) @ (s, d)`` forward, and backward ``dP = dO·Vᵀ``
    (as the scores), ``dV = Pᵀ·dO``, ``dQ = dS·K`` and ``dK = dSᵀ·Q`` (as the context). A full recomputation runs
    every forward product twice. Their FLOPs are :func:`training_flops`' less its biases and LayerNorms.
    A fractional per-device batch is rounded (a shape has whole rows)."""
    b = max(1, round(batch))
    tokens, s, h, f, layers = b * shape.seq, shape.seq, shape.width, shape.ffn, shape.layers
    forward = 2 if recompute else 1
    out: list[Gemm] = []
    projections = [("QKV", h, 3 * h), ("attention output", h, h), ("MLP up", h, f), ("MLP down", f, h)]
    for name, inner, outer in projections:
        out += [Gemm(f"{name} forward", 1, tokens, outer, inner, layers * forward),
                Gemm(f"{name} input gradient", 1, tokens, inner, outer, layers),
                Gemm(f"{name} weight gradient", 1, inner, outer, tokens, layers)]
    heads, d = shape.heads, h // shape.heads
    out += [Gemm("attention scores forward", b * heads, s, s, d, layers * forward),
            Gemm("attention context forward", b * heads, s, d, s, layers * forward),
            Gemm("attention probabilities gradient", b * heads, s, s, d, layers),
            Gemm("attention value, query and key gradients", b * heads, s, d, s, 3 * layers)]
    if shape.lm_head:
        out += [Gemm("logits forward", 1, tokens, shape.vocab, h, forward),
                Gemm("logits input gradient", 1, tokens, h, shape.vocab, 1),
                Gemm("logits weight gradient", 1, h, shape.vocab, tokens, 1)]
    return out


def gemm_seconds(products: Iterable[Gemm], rates: RateTable) -> float | None:
    """The step's GEMMs each at the measured rate of its own shape; None when the table lacks one."""
    total = 0.0
    for g in products:
        rate = rates.get(g.key)
        if not rate:
            return None
        total += g.flops / rate
    return total
