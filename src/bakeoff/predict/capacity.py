"""The capacity plan: will a Transformer fit, and how long will a step take, under each framework's own strategies —
for sizes no machine here can try (``bakeoff plan``, issue #29).

Everything is a stated formula over the model's shape, the batch, the precision and a machine description; each
term says where it comes from, and the plan says what it leaves out. Sources:

* **Model states** (Rajbhandari et al. 2020, "ZeRO", §3.1 and §5), in bytes a parameter for the weights, the
  gradients and Adam's state as each framework's mixed-precision *recipe* holds them (:mod:`bakeoff.predict.recipes`:
  PyTorch's autocast and Keras' ``mixed_bfloat16`` keep fp32 weights and gradients and cache a bf16 copy for the
  compute, 4 + 2 / 4 / 8; FSDP's mixed precision keeps the fp32 ones sharded and gathers bf16 ones; DeepSpeed's
  ZeRO keeps 16-bit weights and gradients and an fp32 master in the optimizer state, the paper's 2 / 2 / 12); each
  row names its recipe, the default being what its framework's strategy does (``--recipe`` chooses another). ZeRO-1
  shards the optimizer state over the data-parallel devices, ZeRO-2 the gradients too, ZeRO-3 (FSDP) the weights
  too, holding two layers gathered at a time.
* **Activations** (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", §4,
  eq. 1-2): per layer ``s·b·h·(34 + 5·a·s/h)`` bytes for 16-bit activations with dropout masks of a byte; written
  here per element size ``e`` and feed-forward width ``f`` (:func:`layer_activations`, which gives exactly that at
  ``e = 2, f = 4h``), with tensor parallelism splitting what Megatron's layers split (eq. 2), a fused attention
  (FlashAttention, PyTorch's SDPA, XLA's fused attention) storing no ``a·s²`` scores, and full recomputation
  storing each layer's input only, plus one layer's activations while it is recomputed.
* **Communication** (ring algorithms: an all-reduce moves ``2(N-1)/N`` of the data through each device, an
  all-gather or a reduce-scatter ``(N-1)/N``; ZeRO §7: ZeRO-1 and 2 move what data parallelism moves, ZeRO-3 1.5×):
  per step, at the stated bandwidth per device, without overlap with compute and with perfect overlap.
* **Compute** (Kaplan et al. 2020, §2.1): ``6·P·tokens`` FLOPs a training step (8 with full recomputation), ``P``
  the parameters matmuls use (embeddings are lookups: :attr:`Shape.compute_params`), plus attention's own
  ``12·s²·h`` a sequence a layer (QKᵀ and AV, forward and backward; 16 recomputed) — the same count the workloads'
  ``flops_per_example`` and so bakeoff's measured MFU use (:func:`training_flops`) — at the MFU bakeoff *measured*
  for the framework (``bakeoff run`` stores it with every trial) on the same kind of device as the plan's (a CPU's
  utilisation says nothing of a GPU's: :func:`choose_mfu`) or one stated, over the stated peak FLOP/s of each device.
* **Calibration** on the machine the trials ran on (:class:`Calibration`, :func:`calibrate`): from stored
  text-classifier trials at three or more sizes, each framework's memory increment is fitted as a fixed working
  memory plus a scale of the count above (what the count misses: allocator arenas, XLA's buffers, temporaries), and
  its steady step as the FLOPs above at one rate plus the softmax-sized elementwise work (``heads·s²`` a sequence a
  layer: softmax, dropout and their backward, memory-bound) at another. Each fit states its worst leave-one-out
  error: every size predicted from the others only. ``bench/plan_accuracy.py`` checks it against fresh trials.
* **The device's own matmul rates by shape** (#49): a CPU (and a GPU) multiplies large matrices at a higher FLOP
  rate than small ones (PyTorch, 2 cores: 87 GFLOP/s at ``small``, 117 at ``paper``), so one rate fitted on small
  trials times a large step too long. Given a rate table (:mod:`bakeoff.measure.gemm_rates`: each GEMM shape a step
  runs, :func:`gemms`, timed once on the device per framework and precision, and kept), the calibrated step is the
  sum over its GEMMs of FLOPs over the measured rate of that shape, plus the calibrated elementwise part: attention's
  softmax-sized work as above, and the work over each layer's ``(tokens, width)`` activations (LayerNorms,
  residuals, biases, dropout: :func:`activation_elements`), each at a fitted rate (:attr:`Calibration.rated`).

Strategies are pure: each uses every device in one way (data, sharded states, tensor, pipeline, parameter servers).
The framework names are the APIs a user would call; where a framework ships no such strategy, the row says so.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bakeoff.core import frameworks
from bakeoff.core.spec import SpecError
from bakeoff.predict import recipes

if TYPE_CHECKING:
    from bakeoff.core.result import TrialResult

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


@dataclasses.dataclass(frozen=True)
class Strategy:
    """One way a framework spreads a step over the devices: ``kind`` is data | zero1 | zero2 | zero3 | tensor |
    pipeline | parameter_server; ``api`` what the user calls, or ``''`` with ``missing`` saying why there is none."""

    framework: str
    kind: str
    api: str
    missing: str = ""


KINDS = {"data": "data parallel", "zero1": "optimizer state sharded (ZeRO-1)",
         "zero2": "gradients and optimizer state sharded (ZeRO-2)",
         "zero3": "weights, gradients and optimizer state sharded (ZeRO-3 / FSDP)",
         "tensor": "tensor parallel (Megatron-style layers)", "pipeline": "pipeline parallel (1F1B)",
         "parameter_server": "parameter servers"}

STRATEGIES: tuple[Strategy, ...] = tuple(
    Strategy(name, kind, info.capacity.strategies.get(kind, ""), info.capacity.missing.get(kind, ""))
    for name, info in frameworks.FRAMEWORKS.items() if info.capacity is not None
    for kind in KINDS if kind in info.capacity.strategies or kind in info.capacity.missing)
"""Every framework × strategy kind the plan rows: each framework's record's ``capacity`` (its folder)."""


def planned() -> list[str]:
    """The frameworks the capacity plan has rows for (a record with ``capacity``)."""
    return list(dict.fromkeys(s.framework for s in STRATEGIES))


REPLICATED = ("data", "zero1", "zero2", "zero3", "parameter_server")
"""The strategies whose devices each take a share of the batch (every one a whole model's step)."""


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


@dataclasses.dataclass(frozen=True)
class Calibration:
    """One framework's fit to its stored trials on one machine, at one precision and execution mode: the training
    memory increment ≈ ``fixed + scale × count`` (the count: gradients and activations, :func:`layer_activations`
    unfused) and the steady step ≈ ``per_flop × FLOPs + per_element × elements`` (:func:`training_flops`,
    :func:`attention_elements`). ``memory_error`` and ``step_error``: the worst |predicted / measured - 1| when each
    size is predicted from the other sizes only; ``largest_flops``: the FLOPs of the largest step it measured.

    Given the device's GEMM rates by shape (:func:`calibrate`'s ``rates``: ``rated``), the step is also fitted as
    its GEMMs each at its shape's measured rate (:func:`gemm_seconds`) ``+ gemm_per_element × elements +
    gemm_per_activation × activation elements`` (the elementwise part: attention's softmax-sized work and the
    work over the layers' activations, :func:`activation_elements`),
    with its own leave-one-out error (``gemm_step_error``); a plan then times its own GEMMs the same way, and so
    follows the FLOP rate up as the matrices grow."""

    framework: str
    precision: str
    execution: str
    device: str
    sizes: int
    trials: int
    fixed: float
    scale: float
    per_flop: float
    per_element: float
    memory_error: float
    step_error: float
    largest_flops: float = 0.0
    rated: bool = False  # False: no rate table was given, the step is FLOPs at one rate
    gemm_per_element: float = 0.0
    gemm_per_activation: float = 0.0
    gemm_step_error: float | None = None

    def memory(self, count: float) -> float:
        return self.fixed + self.scale * count

    def step(self, flops: float, elements: float) -> float:
        return self.per_flop * flops + self.per_element * elements

    def rated_step(self, gemm_s: float, elements: float, activations: float) -> float:
        """The step from its GEMMs' time at the device's own rates by shape (:func:`gemm_seconds`), plus the
        elementwise part: attention's ``elements`` and the layers' ``activations`` (:func:`activation_elements`)."""
        return gemm_s + self.gemm_per_element * elements + self.gemm_per_activation * activations

    @property
    def source(self) -> str:
        step = (f"≤ {self.step_error:.0%} step" if self.gemm_step_error is None else
                f"≤ {self.gemm_step_error:.0%} step (its GEMMs at this device's rates by shape, plus attention's "
                f"elementwise work at {self.gemm_per_element * 1e9:.2g} ns an element and the activations' at "
                f"{self.gemm_per_activation * 1e9:.2g} ns an element)")
        return (f"calibrated on {self.device} ({self.framework} {self.execution}, {self.precision}): {self.trials} "
                f"trials at {self.sizes} sizes; leave-one-out error ≤ {self.memory_error:.0%} memory, {step}")

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "source": self.source}


@dataclasses.dataclass(frozen=True)
class Point:
    """One measured size: what the calibration predicts from (the count, FLOPs and elements of a step at the
    trial's batch) and what was measured (the median over its trials)."""

    count: float
    flops: float
    elements: float
    memory: float
    step: float
    gemm_s: float | None = None  # its GEMMs at the device's rates by shape (:func:`gemm_seconds`), when known
    activations: float = 0.0  # elements of the layers' (tokens, width) activations (:func:`activation_elements`)


EXTRAPOLATED = 4.0
"""A calibrated step of more than this many times the FLOPs of the largest step its calibration measured is said to
be extrapolated. Measured on a 2-core CPU, fp32 (bench/plan_accuracy.py): the `sizes` suite's largest size
predicted from the others (3.5× their largest step's FLOPs) came within 8% in every framework; the text
classifier's `paper` preset (12 × 768, sequences of 512, batch 8: 13× the suite's largest step) ran at 1.3–1.5× the
FLOP rate of `small`, and its calibrated step was 22–38% too long (``--beyond paper:8``)."""

MIN_SIZES = 3
"""Sizes a calibration needs: two coefficients, and each size must be predictable from the others."""


def point(shape: Shape, batch: float, precision: str, memory: float, step: float,
          rates: RateTable | None = None) -> Point:
    """The calibration's features of one measured configuration (a step on one device); ``rates``: the device's
    GEMM rates by shape for the trial's framework and precision."""
    count = (4 * shape.params + shape.layers * layer_activations(shape, batch, BYTES[precision], fused=False)
             + (shape.seq * batch * shape.vocab * (BYTES[precision] + 4) if shape.lm_head else 0))
    gemm_s = gemm_seconds(gemms(shape, batch), rates) if rates is not None else None
    return Point(count, training_flops(shape, batch), attention_elements(shape, batch), memory, step, gemm_s,
                 activation_elements(shape, batch))


def _fit_two(xs: Sequence[tuple[float, float]], ys: Sequence[float]) -> tuple[float, float]:
    """Non-negative least squares with two coefficients: the unconstrained fit when both are ≥ 0, else the better
    of the two one-coefficient fits (a negative working memory or rate is not a machine)."""
    import numpy as np

    a, y = np.array(xs, dtype=float), np.array(ys, dtype=float)
    both = np.linalg.lstsq(a, y, rcond=None)[0]
    if (both >= 0).all():
        return float(both[0]), float(both[1])
    best: tuple[float, tuple[float, float]] | None = None
    for j in (0, 1):
        column = a[:, j]
        k = max(0.0, float(column @ y / (column @ column))) if column @ column else 0.0
        residual = float(((y - k * column) ** 2).sum())
        coefficients = (k, 0.0) if j == 0 else (0.0, k)
        if best is None or residual < best[0]:
            best = (residual, coefficients)
    assert best is not None
    return best[1]


def fit(points: Sequence[Point]) -> tuple[float, float, float, float]:
    """(fixed, scale, per_flop, per_element) from measured sizes."""
    fixed, scale = _fit_two([(1.0, q.count) for q in points], [q.memory for q in points])
    per_flop, per_element = _fit_two([(q.flops, q.elements) for q in points], [q.step for q in points])
    return fixed, scale, per_flop, per_element


def leave_one_out(points: Sequence[Point]) -> list[tuple[float, float]]:
    """Each size's (memory error, step error) predicted from the other sizes' fit: predicted / measured - 1."""
    out = []
    for i, held in enumerate(points):
        fixed, scale, per_flop, per_element = fit([q for j, q in enumerate(points) if j != i])
        out.append(((fixed + scale * held.count) / held.memory - 1,
                    (per_flop * held.flops + per_element * held.elements) / held.step - 1))
    return out


def fit_rated(points: Sequence[Point]) -> tuple[float, float, float]:
    """(gemm_per_element, gemm_per_activation, worst leave-one-out step error): the step less its GEMMs' time at the
    device's rates by shape, fitted as attention's elementwise work and the work over the layers' activations;
    every point needs its ``gemm_s``."""
    def two(some: Sequence[Point]) -> tuple[float, float]:
        return _fit_two([(q.elements, q.activations) for q in some], [q.step - (q.gemm_s or 0.0) for q in some])

    errors = []
    for i, held in enumerate(points):
        e, a = two([q for j, q in enumerate(points) if j != i])
        errors.append(abs(((held.gemm_s or 0.0) + e * held.elements + a * held.activations) / held.step - 1))
    return (*two(points), max(errors))


CALIBRATED_WORKLOAD = "text_classifier"
"""The workload whose trials calibrate the plan: the Transformer the plan's :class:`Shape` describes."""


def trial_shape(result: TrialResult) -> Shape | None:
    """The :class:`Shape` a stored text-classifier trial trained (its resolved configuration), or None."""
    config = result.setup.config or {}
    try:
        return Shape(int(config["num_layers"]), int(config["d_model"]), int(config["num_heads"]),
                     int(config["seq_len"]), int(config["vocab_size"]), int(config["d_ff"]), lm_head=False)
    except (KeyError, TypeError, ValueError):
        return None


def calibrate(results: Iterable[TrialResult],
              rates: Mapping[tuple[str, str], RateTable] | None = None) -> list[Calibration]:
    """A :class:`Calibration` per framework and precision, from stored successful single-process text-classifier
    trials without accumulation, with a memory increment and a steady step, grouped by framework, precision,
    execution mode and machine (the device's name, or the CPU model with the trial's threads); a group needs
    :data:`MIN_SIZES` distinct sizes (shape and batch). Where a framework has several groups at one precision, the
    one with the most sizes wins (then the most trials). ``rates``: (framework, precision) -> the GEMM rates by
    shape of the device the trials ran on (:mod:`bakeoff.measure.gemm_rates`); where they cover every size's
    GEMMs, the step is also fitted on them (:attr:`Calibration.rated`)."""
    groups: dict[tuple[str, str, str, str, str], dict[tuple[Shape, int], list[tuple[float, float]]]] = {}
    for r in results:
        spec = r.spec
        if (r.status.value != "ok" or spec.get("workload") != CALIBRATED_WORKLOAD
                or spec.get("parallelism", "none") != "none" or int(spec.get("grad_accum", 1)) != 1
                or r.memory_increment_bytes is None
                or not r.steady_step_s or (shape := trial_shape(r)) is None):
            continue
        env = r.environment or {}
        resolved = str(env.get("device") or spec.get("device", "cpu")).lower()  # the engine's: cpu, cuda:0, /GPU:0
        where = "gpu" if "cuda" in resolved or "gpu" in resolved else "cpu"
        device = (env.get("device_name") or env.get("device_kind") or "a GPU" if where == "gpu"
                  else f"{env.get('cpu') or 'a CPU'}, {spec.get('threads') or 'all'} threads")
        key = (str(spec["framework"]), str(spec.get("precision", "fp32")), str(spec.get("execution", "")), where,
               device)
        size = (shape, int(spec["batch_size"]))
        groups.setdefault(key, {}).setdefault(size, []).append((float(r.memory_increment_bytes),
                                                               float(r.steady_step_s)))
    best: dict[tuple[str, str], Calibration] = {}
    for (framework, precision, execution, _, device), sizes in groups.items():
        if len(sizes) < MIN_SIZES:
            continue
        table = (rates or {}).get((framework, precision))
        points = [point(shape, batch, precision, _median([m for m, _ in runs]), _median([s for _, s in runs]), table)
                  for (shape, batch), runs in sizes.items()]
        errors = leave_one_out(points)
        rated = (dict(zip(("gemm_per_element", "gemm_per_activation", "gemm_step_error"), fit_rated(points),
                          strict=True),
                      rated=True) if all(q.gemm_s for q in points) else {})
        cal = Calibration(framework, precision, execution, device, len(points), sum(map(len, sizes.values())),
                          *fit(points), memory_error=max(abs(m) for m, _ in errors),
                          step_error=max(abs(s) for _, s in errors), largest_flops=max(q.flops for q in points),
                          **rated)
        held = best.get((framework, precision))
        if held is None or (cal.sizes, cal.trials) > (held.sizes, held.trials):
            best[framework, precision] = cal
    return list(best.values())


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@dataclasses.dataclass
class Row:
    """One framework × strategy: memory per device by part, whether it fits, communication, times."""

    framework: str
    kind: str
    api: str
    missing: str = ""
    recipe: str = ""  # how the model states are held (bakeoff.predict.recipes), its default or the one chosen
    recipe_bytes: dict[str, int] = dataclasses.field(default_factory=dict)  # a parameter, unsharded, by part
    weights: float = 0.0  # the parameters this device holds, in the recipe's dtype
    copy: float = 0.0  # the 16-bit weights the compute reads beyond those: casts kept, or layers gathered
    gradients: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    total: float = 0.0
    fits: bool | None = None
    headroom: float = 0.0  # memory - total: negative when it does not fit
    comm_bytes: float = 0.0
    comm_s: float | None = None
    compute_s: float | None = None
    step_s: float | None = None  # compute + communication, no overlap
    step_overlapped_s: float | None = None  # the larger of the two: perfect overlap
    mfu: float | None = None
    mfu_source: str = ""
    budget_s: float | None = None  # time to the token budget, no overlap
    # on the machine the stored trials ran on (a Calibration of this framework and precision), when given
    calibrated_total: float | None = None  # weights + Adam + fixed working memory + scale × (grads + activations)
    calibrated_compute_s: float | None = None  # FLOPs at the fitted rate + elementwise work at its rate
    calibrated_step_s: float | None = None  # calibrated compute + communication (when a bandwidth is given)
    calibration: str = ""  # what it was fitted to, and its leave-one-out error
    notes: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Plan:
    shape: Shape
    machine: Machine
    batch: int
    precision: str
    recompute: bool
    fused: bool
    tokens: float | None
    rows: list[Row]
    left_out: list[str]
    calibrations: dict[str, Calibration] = dataclasses.field(default_factory=dict)  # the ones applied
    uncalibrated: str = ""  # why calibrations that were given were not applied
    recipe: str = ""  # the recipe chosen for every row ('' : each framework's own)
    device_kind: str = ""  # "GPU" or "CPU": the kind of device the plan is for (the MFU used must be of it)
    mfu: dict[str, tuple[float, str]] = dataclasses.field(default_factory=dict)  # the MFU each framework's times use
    mfu_missing: dict[str, str] = dataclasses.field(default_factory=dict)  # framework -> why it has none

    def to_dict(self) -> dict[str, Any]:
        return {"shape": {**dataclasses.asdict(self.shape), "params": self.shape.params},
                "machine": dataclasses.asdict(self.machine), "batch": self.batch, "precision": self.precision,
                "recompute": self.recompute, "fused_attention": self.fused, "tokens": self.tokens,
                "rows": [r.to_dict() for r in self.rows], "left_out": self.left_out,
                "calibrations": {fw: c.to_dict() for fw, c in self.calibrations.items()},
                "uncalibrated": self.uncalibrated, "recipe": self.recipe,
                "recipes": {r.recipe: recipes.RECIPES[r.recipe].to_dict() for r in self.rows if r.recipe},
                "device_kind": self.device_kind,
                "mfu": {fw: {"value": v, "source": src} for fw, (v, src) in self.mfu.items()},
                "mfu_missing": self.mfu_missing}


LEFT_OUT = [
    "framework and allocator overheads (CUDA context, workspace, fragmentation) unless calibrated: leave headroom "
    "of several GB",
    "the recipes' transient buffers: communication buckets (PyTorch DDP's hold a second copy of the gradients unless "
    "gradient_as_bucket_view=True), a layer's unsharded gradients before FSDP reduce-scatters them",
    "the optimizer's and the elementwise work's FLOPs (compute counts the matmuls: 6·P·tokens and attention's "
    "12·s²·h a sequence a layer)",
    "embedding-gradient sparsity, and activations outside the blocks but the output logits",
    "mixed strategies (data × tensor × pipeline): each row uses every device one way",
]


def plan(shape: Shape, machine: Machine, batch: int, precision: str = "bf16", recompute: bool = False,
         fused: bool = True, tokens: float | None = None, mfu: Mapping[str, tuple[float, str]] | None = None,
         microbatches: int | None = None, parameter_servers: int = 1,
         calibrations: Iterable[Calibration] = (), recipe: str | None = None,
         rates: Mapping[tuple[str, str], RateTable] | None = None) -> Plan:
    """Every framework × strategy for ``shape`` at global ``batch`` sequences on ``machine``; ``mfu`` maps a
    framework to (its model-FLOPs utilisation, where that figure comes from); ``calibrations``: fits to the trials
    on the machine they ran on (:func:`calibrate`) — given, the plan's devices are that machine's, and each
    framework's rows also get the calibrated memory and step (from its calibration at the plan's precision);
    ``recipe``: how every row holds its model states (:data:`bakeoff.predict.recipes.RECIPES`), each framework's own
    by default; ``rates``: (framework, precision) -> that machine's GEMM rates by shape, covering this plan's
    GEMMs, for a calibration fitted on them (:attr:`Calibration.rated`)."""
    applied = {c.framework: c for c in calibrations if c.precision == precision}
    if precision not in BYTES:
        raise PlanError(f"precision={precision!r}: give one of {', '.join(BYTES)}")
    chosen = check_recipe(recipe, precision)
    if not isinstance(batch, int) or batch < 1:
        raise PlanError(f"batch={batch!r}: give a positive integer (the global batch, in sequences)")
    n, p = machine.devices, shape.params
    e = BYTES[precision]
    m = microbatches or min(batch, 4 * n)  # pipeline micro-batches
    rows = []
    for strategy in STRATEGIES:
        row = Row(strategy.framework, strategy.kind, strategy.api, strategy.missing)
        rows.append(row)
        if strategy.missing:
            continue
        kind = strategy.kind
        replicas = kind in REPLICATED
        per_device_batch = batch / n if replicas else batch
        if replicas and batch % n:
            row.notes.append(f"a global batch of {batch} does not split evenly over {n} devices")
        tensor = n if kind == "tensor" else 1
        if kind == "pipeline" and shape.layers < n:
            row.missing = f"{n} pipeline stages need at least {n} layers; the model has {shape.layers}"
            continue
        if kind == "tensor" and (shape.heads % n or shape.ffn % n):
            row.missing = (f"{n}-way tensor parallelism needs heads ({shape.heads}) and ffn ({shape.ffn}) divisible "
                           f"by {n}")
            continue
        # model states, as the row's recipe holds them (bakeoff.predict.recipes)
        held = chosen or recipes.default(strategy.framework, kind, precision)
        row.recipe = held.name
        row.recipe_bytes = {"weights": held.weights, "copy": held.copy, "gradients": held.gradients,
                            "optimizer": held.optimizer}
        if chosen and strategy.framework not in held.frameworks:
            row.notes.append(f"recipe {held.name} is not a {strategy.framework} API: the row is the bytes it would "
                             "take")
        row.weights, row.copy, row.gradients, row.optimizer = recipes.states(held, kind, n, p, shape.layer_params)
        if kind == "zero3":
            row.notes.append("ZeRO-3: this device's shard of the states, plus two layers' weights gathered to "
                             "compute (the one computing, the next)")
        if kind == "parameter_server":
            row.notes.append(f"optimizer state on {parameter_servers} parameter server(s): "
                             f"{p * held.optimizer / parameter_servers:.3g} bytes each, with the weights")
        # activations
        if kind == "pipeline":  # 1F1B: the first stage holds p micro-batches of its L/p layers = L layers of one
            micro = batch / m
            act_batch = micro
            row.notes.append(f"{m} micro-batches of {micro:g}; the schedule's bubble is "
                             f"{(n - 1) / (m + n - 1):.0%} of the step")
        else:
            act_batch = per_device_batch
        per_layer = layer_activations(shape, act_batch, e, tensor, fused)
        if recompute:  # each layer's input kept (replicated under tensor parallelism), one layer recomputed at a time
            row.activations = shape.seq * act_batch * shape.width * e * shape.layers + per_layer
        else:
            row.activations = per_layer * shape.layers
        if shape.lm_head and (kind != "pipeline"):  # the last stage's; the first stage's is the larger in 1F1B
            row.activations += shape.seq * act_batch * shape.vocab * (e + 4) / tensor  # logits, fp32 log-softmax
        row.total = row.weights + row.copy + row.gradients + row.optimizer + row.activations
        row.fits = row.total <= machine.memory
        row.headroom = machine.memory - row.total
        # communication per step, bytes through each device
        ring = (n - 1) / n if n > 1 else 0.0
        if kind in ("data", "zero1", "zero2"):
            row.comm_bytes = 2 * ring * p * held.gradients  # the recipe's gradients (FSDP: its reduce_dtype, fp32)
        elif kind == "zero3":  # gather the weights twice (forward, backward) as the compute reads them, scatter grads
            row.comm_bytes = ring * p * (2 * (held.copy if held.gathered else held.weights) + held.gradients)
        elif kind == "tensor":
            row.comm_bytes = shape.layers * 4 * 2 * ring * shape.seq * batch * shape.width * e
        elif kind == "pipeline":
            row.comm_bytes = 2 * m * shape.seq * (batch / m) * shape.width * e if n > 1 else 0.0
        elif kind == "parameter_server":
            row.comm_bytes = 2 * p * 4  # push gradients, pull weights
            row.notes.append(f"the parameter servers' links carry {n}× that: {n * 8 * p / parameter_servers:.3g} "
                             f"bytes a step each")
        if machine.bandwidth:
            link = row.comm_bytes
            if kind == "parameter_server":
                link = max(link, n * 8 * p / parameter_servers)
            row.comm_s = link / machine.bandwidth
        # compute
        bubble = (m + n - 1) / m if kind == "pipeline" else 1.0
        if mfu and strategy.framework in mfu and machine.flops:
            row.mfu, row.mfu_source = mfu[strategy.framework]
            row.compute_s = training_flops(shape, batch, recompute) / (n * machine.flops * row.mfu) * bubble
        if (cal := applied.get(strategy.framework)) is not None:
            row.calibrated_total = (row.weights + row.copy + row.optimizer
                                    + cal.memory(row.gradients + row.activations))
            flops = training_flops(shape, batch / n, recompute)
            elements = attention_elements(shape, batch / n, recompute)
            table = (rates or {}).get((strategy.framework, precision))
            gemm_s = (gemm_seconds(gemms(shape, batch / n, recompute), table)
                      if cal.rated and table is not None else None)
            if gemm_s is not None:
                row.calibrated_compute_s = cal.rated_step(gemm_s, elements,
                                                          activation_elements(shape, batch / n, recompute)) * bubble
            else:
                row.calibrated_compute_s = cal.step(flops, elements) * bubble
            if cal.rated and gemm_s is None:
                row.notes.append(f"calibrated step ({strategy.framework}): FLOPs at one rate, as no rate table of "
                                 "this plan's GEMM shapes was measured on that machine")
            if gemm_s is None and cal.largest_flops and flops > EXTRAPOLATED * cal.largest_flops:
                row.notes.append(f"calibrated step: an extrapolation, {flops / cal.largest_flops:.0f}× the FLOPs "
                                 "of the largest step the calibration measured; larger matrices usually run at a "
                                 "higher FLOP rate, so it is likely too long (bench/plan_accuracy.py --beyond "
                                 "measures by how much)")
            comm = row.comm_s if n > 1 else 0.0  # None: no bandwidth given, so no step time
            row.calibrated_step_s = None if comm is None else row.calibrated_compute_s + comm
            row.calibration = cal.source
        if row.compute_s is not None and row.comm_s is not None:
            row.step_s = row.compute_s + row.comm_s
            row.step_overlapped_s = max(row.compute_s, row.comm_s)
            if tokens:
                row.budget_s = tokens / (batch * shape.seq) * row.step_s
    used = {fw: value for fw, value in (mfu or {}).items()}
    lacking = {fw: "no MFU given" for fw in dict.fromkeys(s.framework for s in STRATEGIES) if fw not in used}
    return Plan(shape, machine, batch, precision, recompute, fused, tokens, rows, list(LEFT_OUT), applied,
                recipe=chosen.name if chosen else "", mfu=used, mfu_missing=lacking)


def check_recipe(name: str | None, precision: str) -> recipes.Recipe | None:
    """The recipe ``name`` (None: each framework's own), or a :class:`PlanError` naming the recipes accepted, or
    saying which precision it needs."""
    if name is None or name == "":
        return None
    held = recipes.RECIPES.get(name)
    if held is None:
        raise PlanError(f"recipe={name!r}: give one of {', '.join(recipes.RECIPES)} (bakeoff plan --help says what "
                        "each holds)")
    if held.mixed != (precision != "fp32"):
        wanted = ("fp32" if held.name == "fp32" else
                  "a mixed precision (bf16 or fp16); at fp32 the recipe is fp32")
        raise PlanError(f"recipe={name!r} with precision={precision!r}: recipe {name} needs {wanted}")
    return held


FIELDS: dict[str, tuple[type, str]] = {
    "preset": (str, "text_classifier's preset (tiny, small, paper)"),
    "params": (float, "a parameter count, shaped by GPT-3's rule"),
    "layers": (int, "blocks"), "width": (int, "the model width"), "heads": (int, "attention heads [width / 128]"),
    "ffn": (int, "feed-forward width [4 × width]"), "seq": (int, "sequence length [2048; a preset's own]"),
    "vocab": (int, "vocabulary [50257; a preset's own]"),
    "batch": (int, "global batch, in sequences"), "precision": (str, "fp32, bf16 or fp16 [bf16]"),
    "recompute": (bool, "full activation recomputation [false]"),
    "recipe": (str, f"how the model states are held: {', '.join(recipes.RECIPES)} [each framework's own]"),
    "fused_attention": (bool, "attention that keeps no a·s² scores [true]"),
    "microbatches": (int, "pipeline micro-batches [4 × devices, at most batch]"),
    "tokens": (float, "a token budget: the time to train on it"),
    "devices": (int, "accelerators [1]"), "memory": (str, "memory per device with its unit: 80GB, 80GiB"),
    "flops": (float, "a device's peak FLOP/s at this precision"),
    "bandwidth": (str, "what each device moves to the others, e.g. 450GB/s"),
    "device_kind": (str, "gpu or cpu [gpu]: the kind of device flops states; the MFU used is one measured on it"),
    "parameter_servers": (int, "parameter servers for the PS rows [1]"),
}
"""A plan's fields, as ``bakeoff plan``'s flags, a claim's ``[claim.plan]`` and a report's ``--plan`` file name
them: (type, what it is)."""


def _field(fields: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """``fields[name]`` as :data:`FIELDS` types it, or ``default``; a wrong type is a :class:`PlanError`."""
    if fields.get(name) is None:
        return default
    kind, what = FIELDS[name]
    value = fields[name]
    try:
        if kind is bool:
            if not isinstance(value, bool):
                raise ValueError
            return value
        if kind is int and (isinstance(value, bool) or float(value) != int(float(value))):
            raise ValueError
        return kind(float(value)) if kind is int else kind(value)
    except (TypeError, ValueError, OverflowError):
        wanted = "true or false" if kind is bool else "a text" if kind is str else "a number"
        raise PlanError(f"{name}={value!r}: give {wanted} ({what})") from None


def shape_from(fields: Mapping[str, Any]) -> Shape:
    """The :class:`Shape` a plan's fields describe, one way: ``preset``, ``params``, or ``layers`` with ``width``."""
    given = [name for name in ("preset", "params", "layers") if fields.get(name) is not None]
    if len(given) != 1:
        raise PlanError("describe the model one way: preset, params, or layers with width (given: "
                        f"{', '.join(given) or 'none'})")
    seq, vocab, ffn = _field(fields, "seq"), _field(fields, "vocab"), _field(fields, "ffn")
    if given == ["preset"]:
        from bakeoff.core import registry

        preset, workload = _field(fields, "preset"), registry.workload(CALIBRATED_WORKLOAD)
        if preset not in workload.presets:
            raise PlanError(f"preset={preset!r}: give one of {', '.join(workload.presets)}")
        c = workload.preset_configs[preset]
        return Shape(c["num_layers"], c["d_model"], c["num_heads"], seq or c["seq_len"], vocab or c["vocab_size"],
                     ffn or c["d_ff"], lm_head=False)
    seq, vocab = seq or 2048, vocab or 50257
    if given == ["params"]:
        return Shape.from_params(_field(fields, "params"), seq, vocab)
    width = _field(fields, "width")
    if width is None:
        raise PlanError("layers needs width (and optionally heads, ffn, seq, vocab)")
    return Shape(_field(fields, "layers"), width, _field(fields, "heads", max(1, width // 128)), seq, vocab,
                 ffn or 4 * width)


def plan_from(fields: Mapping[str, Any], mfu: Mapping[str, tuple[float, str]] | None = None,
              calibrations: Iterable[Calibration] = (), devices: int | None = None, *,
              measured: Mapping[str, Mapping[str, tuple[float, str]]] | None = None,
              rates: Mapping[tuple[str, str], RateTable] | None = None, require_mfu: bool = False,
              in_file: bool = False) -> Plan:
    """:func:`plan` for a plan's :data:`FIELDS` (on ``devices`` instead of its own when given): an unknown field, a
    wrong type or a missing batch or memory is a :class:`PlanError` naming it. A calibration is of the machine its
    trials ran on, so a plan for stated devices (``flops`` given) does not apply one, and says so.

    ``mfu``: stated MFUs (the user's, for the plan's devices); ``measured``: MFUs measured per kind of device
    (:func:`measured_mfu`), of which only those of the plan's ``device_kind`` are used (:func:`choose_mfu`).
    ``require_mfu``: the compute time was asked for, so a plan with ``flops`` for which no framework has an MFU of
    its kind of device is a :class:`PlanError` naming what to give (``bakeoff plan --flops``); otherwise such a
    framework's compute time is not computed and the plan says why (``in_file``: in a plan file's words)."""
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise PlanError(f"{unknown[0]}: unknown field; accepted: {', '.join(FIELDS)}")
    for needed in ("batch", "memory"):
        if fields.get(needed) is None:
            raise PlanError(f"{needed}: required ({FIELDS[needed][1]})")
    bandwidth = _field(fields, "bandwidth")
    machine = Machine(devices or _field(fields, "devices", 1), parse_size(_field(fields, "memory")),
                      _field(fields, "flops"),
                      parse_size(bandwidth, "bandwidth", per_second=True) if bandwidth else None)
    kind = str(_field(fields, "device_kind", "gpu")).upper()
    if kind not in ("GPU", "CPU"):
        raise PlanError(f"device_kind={fields['device_kind']!r}: give gpu or cpu ({FIELDS['device_kind'][1]})")
    chosen, lacking = choose_mfu(kind, measured, mfu)
    if require_mfu and machine.flops and not chosen:
        reasons = "; ".join(f"{', '.join(fws)}: {why}" for why, fws in _grouped(lacking).items())
        raise PlanError(f"flops={machine.flops:g}: compute time on a {kind} needs an MFU measured on a {kind} or "
                        f"stated, and no framework has one ({reasons}). Give --mfu FRAMEWORK=VALUE (for scale: "
                        "Narayanan et al. 2021 report 140 of an A100's 312 TFLOP/s, 45%, training GPT-3 175B with "
                        f"Megatron-LM), a --store with trials run on a {kind}, --device-kind if flops is not a "
                        f"{kind}'s, or leave --flops out for memory only")
    ask = (f"the report's trials include none run on a {kind}" if in_file else
           f"give --mfu FRAMEWORK=VALUE, or a --store with trials run on a {kind}")
    lacking = {fw: f"{why}: {ask}" for fw, why in lacking.items()}
    calibrations = list(calibrations)
    stated = machine.flops is not None and bool(calibrations)
    result = plan(shape_from(fields), machine, _field(fields, "batch"), _field(fields, "precision", "bf16"),
                  _field(fields, "recompute", False), _field(fields, "fused_attention", True),
                  _field(fields, "tokens"), chosen, _field(fields, "microbatches"),
                  _field(fields, "parameter_servers", 1), () if stated else calibrations,
                  recipe=_field(fields, "recipe"), rates=rates)
    result.device_kind, result.mfu_missing = kind, lacking
    if stated:
        result.uncalibrated = (f"flops states other devices; the calibrations are of "
                               f"{', '.join(sorted({c.device for c in calibrations}))} (leave flops out to plan for "
                               "that machine)")
    elif calibrations and not result.calibrations:
        result.uncalibrated = (f"no calibration at {result.precision}: the stored trials calibrate "
                               f"{', '.join(sorted({f'{c.framework} {c.precision}' for c in calibrations}))}")
    return result


def load_plans(path: Path | str) -> list[tuple[str, dict[str, Any]]]:
    """A plan file: one ``[[plan]]`` table a plan, each a ``name`` and :data:`FIELDS` (``examples/plans.toml``);
    every plan is made once here, so a bad one is refused (naming the plan and the field) before anything else."""
    import tomllib

    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise PlanError(f"{path}: cannot read the plan file ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"{path}: not TOML ({exc})") from None
    extra = sorted(set(raw) - {"plan"})
    tables = raw.get("plan")
    if extra or not isinstance(tables, list) or not tables or not all(isinstance(x, dict) for x in tables):
        raise PlanError(f"{path}: give one [[plan]] table a plan (a name and bakeoff plan's fields)"
                        + (f"; unknown: {', '.join(extra)}" if extra else ""))
    out = []
    for i, table in enumerate(tables, 1):
        fields = {k: v for k, v in table.items() if k != "name"}
        name = str(table.get("name") or f"plan {i}")
        try:
            plan_from(fields)
        except PlanError as exc:
            raise PlanError(f"{path}: plan {name!r}: {exc}") from None
        out.append((name, fields))
    return out


def _grouped(lacking: Mapping[str, str]) -> dict[str, list[str]]:
    """Frameworks by the reason they share (one line for three frameworks lacking an MFU for one reason)."""
    out: dict[str, list[str]] = {}
    for framework, why in lacking.items():
        out.setdefault(why, []).append(framework)
    return out


def gemm_rates_for(results: Iterable[Any], calibrations: Iterable[Any], shape: Shape, per_device_batch: float,
                   recompute: bool = False, measure: bool = True) -> dict[tuple[str, str], RateTable]:
    """The GEMM rates a calibrated plan on this machine needs: for each calibration fitted on this machine's CPU
    (:class:`bakeoff.predict.capacity.Calibration`), every shape of its trials' steps (``results``: the stored
    trials) and of the plan's own step on a device (``shape`` at ``per_device_batch``); ``measure=False``: only
    what is kept (a report measures nothing)."""
    from bakeoff.measure import gemm_rates
    from bakeoff.measure.environment import cpu_model

    results = list(results)
    planned = {g.key for g in gemms(shape, per_device_batch, recompute)}
    out = {}
    for cal in calibrations:
        if not cal.device.startswith(f"{cpu_model()},"):
            continue
        keys = set(planned)
        for r in results:
            if (r.spec.get("framework"), r.spec.get("precision", "fp32")) == (cal.framework, cal.precision) and (
                    trial := trial_shape(r)) is not None:
                keys.update(g.key for g in gemms(trial, int(r.spec["batch_size"])))
        out[cal.framework, cal.precision] = gemm_rates.rates(cal.framework, cal.precision, sorted(keys),
                                                             measure=measure)
    return out


def describe_missing_times(result: Plan, *, in_file: bool = False, compute: bool = True) -> list[str]:
    """Why a plan's times are missing, in words (nothing when they are all there): what to give, as ``bakeoff
    plan``'s flags name it, or, ``in_file``, as a plan file's fields do (a report's ``--plan``, whose MFU is only the
    one its trials measured). ``compute=False``: only the communication time is asked for (every compute time is
    there another way: calibrated, or not wanted)."""
    machine = result.machine
    flops, bandwidth = ("`flops`", '`bandwidth = "450GB/s"`') if in_file else ("--flops", "--bandwidth 450GB/s")
    out = []
    if compute and not machine.flops:
        out.append(f"compute time: give the devices' peak FLOP/s ({flops}) at the plan's precision")
    if compute:
        out += [f"compute time ({', '.join(fws)}): {why}" for why, fws in _grouped(result.mfu_missing).items()]
    if not machine.bandwidth:
        out.append(f"communication time: give the bandwidth each device moves ({bandwidth})")
    return out


def trial_device_kind(result: TrialResult) -> str:
    """"GPU" or "CPU": the kind of device a stored trial ran on (its MFU's record, else the engine's device)."""
    if result.mfu is not None and result.mfu.device_kind:
        return result.mfu.device_kind.upper()
    resolved = str((result.environment or {}).get("device") or result.spec.get("device", "cpu")).lower()
    return "GPU" if "cuda" in resolved or "gpu" in resolved else "CPU"


def measured_mfu(results: Iterable[TrialResult]) -> dict[str, dict[str, tuple[float, str]]]:
    """Each framework's median MFU over stored successful trials that have one, per kind of device they ran on:
    ``{framework: {"CPU" or "GPU": (value, where it comes from)}}``."""
    by: dict[tuple[str, str], list[float]] = {}
    for r in results:
        mfu = r.mfu
        if r.status.value != "ok" or mfu is None or mfu.value is None:
            continue
        by.setdefault((r.run_spec.framework.value, trial_device_kind(r)), []).append(float(mfu.value))
    out: dict[str, dict[str, tuple[float, str]]] = {}
    for (fw, kind), values in sorted(by.items()):
        out.setdefault(fw, {})[kind] = (_median(values), f"median of {len(values)} stored trials on a {kind}")
    return out


def choose_mfu(kind: str, measured: Mapping[str, Mapping[str, tuple[float, str]]] | None,
               stated: Mapping[str, tuple[float, str]] | None = None
               ) -> tuple[dict[str, tuple[float, str]], dict[str, str]]:
    """The MFU each framework's compute time uses on devices of ``kind`` ("GPU", "CPU"), and why each framework
    without one has none. A stated MFU (the user's, for these devices) first, else one measured on the same kind
    of device: utilisation does not transfer across kinds (a CPU's MFU, against its own matmul ceiling, over an
    H100's datasheet peak once planned 771 days for a 100B ZeRO-3 run, #49)."""
    chosen: dict[str, tuple[float, str]] = {}
    lacking: dict[str, str] = {}
    for framework in dict.fromkeys(s.framework for s in STRATEGIES):
        by_kind = (measured or {}).get(framework, {})
        if stated and framework in stated:
            chosen[framework] = stated[framework]
        elif kind in by_kind:
            chosen[framework] = by_kind[kind]
        else:
            other = ", ".join(f"{v:.1%} on a {k}" for k, (v, _) in sorted(by_kind.items()))
            lacking[framework] = f"no MFU measured on a {kind}" + (
                f" (the one measured, {other}, does not transfer to another kind of device)" if other else "")
    return chosen, lacking


def human_bytes(value: float) -> str:
    """Bytes in GB (10⁹), the unit device memory is sold in."""
    if value >= 1e9 or value == 0:
        return f"{value / 1e9:,.1f} GB"
    return f"{value / 1e6:,.1f} MB"


def human_seconds(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "—"
    if value >= 86400:
        return f"{value / 86400:,.1f} d"
    if value >= 3600:
        return f"{value / 3600:,.1f} h"
    if value >= 1:
        return f"{value:,.2f} s"
    return f"{value * 1e3:,.1f} ms"
