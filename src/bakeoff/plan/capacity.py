"""The capacity plan: will a Transformer fit, and how long will a step take, under each framework's own strategies —
for sizes no machine here can try (``bakeoff plan``, issue #29).

Everything is a stated formula over the model's shape, the batch, the precision and a machine description; each
term says where it comes from, and the plan says what it leaves out. Sources:

* **Model states** (Rajbhandari et al. 2020, "ZeRO", §3.1 and §5): Adam keeps ``m`` and ``v`` in fp32 (8 bytes a
  parameter), the weights are fp32 (4), the gradients fp32 (4: PyTorch's autocast, Keras' ``mixed_bfloat16`` and
  JAX's usual mixed precision keep fp32 parameters, so their gradients are fp32 too), and mixed precision adds the
  16-bit copy of the weights the compute reads (2). ZeRO-1 shards the optimizer state over the data-parallel
  devices, ZeRO-2 the gradients too, ZeRO-3 (FSDP) the weights too, holding one layer gathered at a time.
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
  the parameters matmuls use (embeddings are lookups: :attr:`Shape.compute_params`), at the
  MFU bakeoff *measured* for the framework (``bakeoff run`` stores it with every trial) or one stated, over the
  stated peak FLOP/s of each device. Attention's own ``s²`` FLOPs are left out (small while ``s`` is well below ``6h``).

Strategies are pure: each uses every device in one way (data, sharded states, tensor, pipeline, parameter servers).
The framework names are the APIs a user would call; where a framework ships no such strategy, the row says so.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from bakeoff.core.spec import SpecError

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

_NO_TF = ("tf.distribute's strategies replicate the model (Mirrored, MultiWorkerMirrored) or place variables on "
          "parameter servers; none shards states or layers for Keras training")
STRATEGIES: tuple[Strategy, ...] = (
    Strategy("torch", "data", "torch.nn.parallel.DistributedDataParallel"),
    Strategy("torch", "zero1", "torch.distributed.optim.ZeroRedundancyOptimizer"),
    Strategy("torch", "zero2", "FullyShardedDataParallel(sharding_strategy=SHARD_GRAD_OP)"),
    Strategy("torch", "zero3", "torch.distributed.fsdp.fully_shard (FSDP2)"),
    Strategy("torch", "tensor", "torch.distributed.tensor.parallel.parallelize_module"),
    Strategy("torch", "pipeline", "torch.distributed.pipelining (Schedule1F1B)"),
    Strategy("torch", "parameter_server", "", "PyTorch ships RPC (torch.distributed.rpc), no parameter-server "
                                              "strategy"),
    Strategy("tensorflow", "data", "tf.distribute.MirroredStrategy / MultiWorkerMirroredStrategy"),
    Strategy("tensorflow", "zero1", "", _NO_TF),
    Strategy("tensorflow", "zero2", "", _NO_TF),
    Strategy("tensorflow", "zero3", "", _NO_TF),
    Strategy("tensorflow", "tensor", "", _NO_TF),
    Strategy("tensorflow", "pipeline", "", _NO_TF),
    Strategy("tensorflow", "parameter_server", "tf.distribute.ParameterServerStrategy"),
    Strategy("jax", "data", "jax.jit, batch sharded, weights replicated (NamedSharding)"),
    Strategy("jax", "zero1", "jax.jit, optimizer state sharded over the data axis (NamedSharding)"),
    Strategy("jax", "zero2", "jax.jit, gradients and optimizer state sharded over the data axis"),
    Strategy("jax", "zero3", "jax.jit, weights and states sharded over the data axis (FSDP by NamedSharding)"),
    Strategy("jax", "tensor", "jax.jit, layers sharded over a model axis (NamedSharding)"),
    Strategy("jax", "pipeline", "", "JAX ships no pipeline schedule (one is written by hand over shard_map)"),
    Strategy("jax", "parameter_server", "", "JAX has no parameter servers"),
)


REPLICATED = ("data", "zero1", "zero2", "zero3", "parameter_server")
"""The strategies whose devices each take a share of the batch (every one a whole model's step)."""


def layer_activations(shape: Shape, batch: float, e: int, tensor: int = 1, fused: bool = False,
                      dropout: bool = True) -> float:
    """Bytes one layer keeps for its backward pass, for ``batch`` sequences (Korthikanti et al. eq. 1-2, per element
    size ``e``): replicated under tensor parallelism, the two LayerNorms' inputs (2e), the attention's and the
    feed-forward's inputs (e each) and two dropout masks (1 each); split ``tensor`` ways, Q and K (2e), V (e), the
    output projection's input (e), the feed-forward's two ``f``-wide tensors (2e·f/h) and, unless the attention is
    fused, the scores: softmax output and dropout output (e each) and their mask (1) over ``a·s²``."""
    s, h, a = shape.seq, shape.width, shape.heads
    masks = 1 if dropout else 0
    replicated = s * batch * h * (4 * e + 2 * masks)
    split = s * batch * h * 4 * e + 2 * e * s * batch * shape.ffn
    if not fused:
        split += a * s * s * batch * (2 * e + masks)
    return replicated + split / tensor


@dataclasses.dataclass
class Row:
    """One framework × strategy: memory per device by part, whether it fits, communication, times."""

    framework: str
    kind: str
    api: str
    missing: str = ""
    weights: float = 0.0
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

    def to_dict(self) -> dict[str, Any]:
        return {"shape": {**dataclasses.asdict(self.shape), "params": self.shape.params},
                "machine": dataclasses.asdict(self.machine), "batch": self.batch, "precision": self.precision,
                "recompute": self.recompute, "fused_attention": self.fused, "tokens": self.tokens,
                "rows": [r.to_dict() for r in self.rows], "left_out": self.left_out}


LEFT_OUT = [
    "framework and allocator overheads (CUDA context, workspace, fragmentation): leave headroom of several GB",
    "attention's own s² FLOPs and the optimizer's FLOPs (compute counts 6·P·tokens)",
    "embedding-gradient sparsity, and activations outside the blocks but the output logits",
    "mixed strategies (data × tensor × pipeline): each row uses every device one way",
]


def plan(shape: Shape, machine: Machine, batch: int, precision: str = "bf16", recompute: bool = False,
         fused: bool = True, tokens: float | None = None, mfu: Mapping[str, tuple[float, str]] | None = None,
         microbatches: int | None = None, parameter_servers: int = 1) -> Plan:
    """Every framework × strategy for ``shape`` at global ``batch`` sequences on ``machine``; ``mfu`` maps a
    framework to (its model-FLOPs utilisation, where that figure comes from)."""
    if precision not in BYTES:
        raise PlanError(f"precision={precision!r}: give one of {', '.join(BYTES)}")
    if not isinstance(batch, int) or batch < 1:
        raise PlanError(f"batch={batch!r}: give a positive integer (the global batch, in sequences)")
    n, p = machine.devices, shape.params
    e = BYTES[precision]
    mixed = precision != "fp32"
    weights_full = p * (4 + (2 if mixed else 0))
    grads_full, optimizer_full = p * 4, p * 8
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
        # model states
        shard = {"data": (1, 1, 1), "zero1": (1, 1, n), "zero2": (1, n, n), "zero3": (n, n, n),
                 "tensor": (n, n, n), "pipeline": (n, n, n), "parameter_server": (1, 1, None)}[kind]
        row.weights = weights_full / shard[0]
        row.gradients = grads_full / shard[1]
        row.optimizer = 0.0 if shard[2] is None else optimizer_full / shard[2]
        if kind == "zero3":
            row.weights += shape.layer_params * e * 2  # a layer gathered, the next one prefetched
            row.notes.append("weights: this device's shard plus two layers gathered (the one computing, the next)")
        if kind == "parameter_server":
            row.notes.append(f"optimizer state on {parameter_servers} parameter server(s): "
                             f"{optimizer_full / parameter_servers:.3g} bytes each, with the weights")
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
        row.total = row.weights + row.gradients + row.optimizer + row.activations
        row.fits = row.total <= machine.memory
        row.headroom = machine.memory - row.total
        # communication per step, bytes through each device
        ring = (n - 1) / n if n > 1 else 0.0
        if kind in ("data", "zero1", "zero2"):
            row.comm_bytes = 2 * ring * p * 4
        elif kind == "zero3":
            row.comm_bytes = ring * p * (2 * e + 4)  # gather the weights twice (forward, backward), scatter grads
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
        if mfu and strategy.framework in mfu and machine.flops:
            row.mfu, row.mfu_source = mfu[strategy.framework]
            flops = (8 if recompute else 6) * shape.compute_params * batch * shape.seq
            row.compute_s = flops / (n * machine.flops * row.mfu)
            if kind == "pipeline":
                row.compute_s *= (m + n - 1) / m
        if row.compute_s is not None and row.comm_s is not None:
            row.step_s = row.compute_s + row.comm_s
            row.step_overlapped_s = max(row.compute_s, row.comm_s)
            if tokens:
                row.budget_s = tokens / (batch * shape.seq) * row.step_s
    return Plan(shape, machine, batch, precision, recompute, fused, tokens, rows, list(LEFT_OUT))


def describe_missing_times(machine: Machine, mfu: Mapping[str, Any] | None) -> list[str]:
    """Why a plan's times are missing, in words (nothing when they are all there)."""
    out = []
    if not machine.flops:
        out.append("compute time: give the devices' peak FLOP/s (--flops) at the plan's precision")
    if not mfu:
        out.append("compute time: no MFU, measured (--store: the trials bakeoff run stored) or stated "
                   "(--mfu FRAMEWORK=0.4)")
    if not machine.bandwidth:
        out.append("communication time: give the bandwidth each device moves (--bandwidth 450GB/s)")
    return out


def measured_mfu(results: Iterable[TrialResult]) -> dict[str, tuple[float, str]]:
    """Each framework's median MFU over stored successful trials that have one: (value, where it comes from)."""
    by: dict[str, list[float]] = {}
    kinds: dict[str, set[str]] = {}
    for r in results:
        mfu = r.mfu
        if r.status.value != "ok" or mfu is None or mfu.value is None:
            continue
        fw = r.run_spec.framework.value
        by.setdefault(fw, []).append(float(mfu.value))
        kinds.setdefault(fw, set()).add(mfu.device_kind or "?")
    out = {}
    for fw, values in by.items():
        values.sort()
        mid = len(values) // 2
        median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
        out[fw] = (median, f"median of {len(values)} stored trials ({', '.join(sorted(kinds[fw]))})")
    return out


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
