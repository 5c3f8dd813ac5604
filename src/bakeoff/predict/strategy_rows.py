"""The capacity plan's rows (:mod:`bakeoff.predict.capacity`): for every framework × strategy, memory per device by
part, whether it fits, the communication a step, and its times — stated, and calibrated on the machine stored trials
ran on."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from bakeoff.predict import recipes
from bakeoff.predict.plan_strategies import REPLICATED, STRATEGIES
from bakeoff.predict.step_calibration import EXTRAPOLATED, Calibration
from bakeoff.predict.transformer_costs import (
    BYTES,
    Machine,
    PlanError,
    RateTable,
    Shape,
    activation_elements,
    attention_elements,
    gemm_seconds,
    gemms,
    layer_activations,
    training_flops,
)


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


@dataclasses.dataclass(frozen=True)
class _Ask:
    """What every row of one plan is computed for: :func:`plan`'s arguments, checked, with ``microbatches`` resolved
    and ``chosen`` the recipe every row holds its model states in (None: each framework's own)."""

    shape: Shape
    machine: Machine
    batch: int
    precision: str
    recompute: bool
    fused: bool
    tokens: float | None
    mfu: Mapping[str, tuple[float, str]] | None
    microbatches: int
    parameter_servers: int
    chosen: recipes.Recipe | None
    rates: Mapping[tuple[str, str], RateTable] | None


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
    m = microbatches or min(batch, 4 * machine.devices)  # pipeline micro-batches
    ask = _Ask(shape, machine, batch, precision, recompute, fused, tokens, mfu, m, parameter_servers, chosen, rates)
    rows = []
    for strategy in STRATEGIES:
        row = Row(strategy.framework, strategy.kind, strategy.api, strategy.missing)
        rows.append(row)
        if not strategy.missing:
            _fill(row, ask, applied.get(strategy.framework))
    used = {fw: value for fw, value in (mfu or {}).items()}
    lacking = {fw: "no MFU given" for fw in dict.fromkeys(s.framework for s in STRATEGIES) if fw not in used}
    return Plan(shape, machine, batch, precision, recompute, fused, tokens, rows, list(LEFT_OUT), applied,
                recipe=chosen.name if chosen else "", mfu=used, mfu_missing=lacking)


def _fill(row: Row, ask: _Ask, cal: Calibration | None) -> None:
    """One row of a strategy its framework ships: its memory by part, communication and times (or, where the
    model cannot be split that way, why not, in ``row.missing``)."""
    shape, batch, kind, n = ask.shape, ask.batch, row.kind, ask.machine.devices
    replicas = kind in REPLICATED
    per_device_batch = batch / n if replicas else batch
    if replicas and batch % n:
        row.notes.append(f"a global batch of {batch} does not split evenly over {n} devices")
    if kind == "pipeline" and shape.layers < n:
        row.missing = f"{n} pipeline stages need at least {n} layers; the model has {shape.layers}"
        return
    if kind == "tensor" and (shape.heads % n or shape.ffn % n):
        row.missing = (f"{n}-way tensor parallelism needs heads ({shape.heads}) and ffn ({shape.ffn}) divisible "
                       f"by {n}")
        return
    held = _model_states(row, ask)
    _activations(row, ask, per_device_batch)
    row.total = row.weights + row.copy + row.gradients + row.optimizer + row.activations
    row.fits = row.total <= ask.machine.memory
    row.headroom = ask.machine.memory - row.total
    _communication(row, ask, held)
    # compute
    m = ask.microbatches
    bubble = (m + n - 1) / m if kind == "pipeline" else 1.0
    if ask.mfu and row.framework in ask.mfu and ask.machine.flops:
        row.mfu, row.mfu_source = ask.mfu[row.framework]
        row.compute_s = (training_flops(shape, batch, ask.recompute) / (n * ask.machine.flops * row.mfu)
                         * bubble)
    if cal is not None:
        _calibrated(row, ask, cal, bubble)
    if row.compute_s is not None and row.comm_s is not None:
        row.step_s = row.compute_s + row.comm_s
        row.step_overlapped_s = max(row.compute_s, row.comm_s)
        if ask.tokens:
            row.budget_s = ask.tokens / (batch * shape.seq) * row.step_s


def _model_states(row: Row, ask: _Ask) -> recipes.Recipe:
    """The row's weights, copy, gradients and optimizer state, as its recipe holds them (bakeoff.predict.recipes):
    the one chosen, else its framework's own for the strategy; returns that recipe."""
    kind, n, p = row.kind, ask.machine.devices, ask.shape.params
    held = ask.chosen or recipes.default(row.framework, kind, ask.precision)
    row.recipe = held.name
    row.recipe_bytes = {"weights": held.weights, "copy": held.copy, "gradients": held.gradients,
                        "optimizer": held.optimizer}
    if ask.chosen and row.framework not in held.frameworks:
        row.notes.append(f"recipe {held.name} is not a {row.framework} API: the row is the bytes it would "
                         "take")
    row.weights, row.copy, row.gradients, row.optimizer = recipes.states(held, kind, n, p, ask.shape.layer_params)
    if kind == "zero3":
        row.notes.append("ZeRO-3: this device's shard of the states, plus two layers' weights gathered to "
                         "compute (the one computing, the next)")
    if kind == "parameter_server":
        row.notes.append(f"optimizer state on {ask.parameter_servers} parameter server(s): "
                         f"{p * held.optimizer / ask.parameter_servers:.3g} bytes each, with the weights")
    return held


def _activations(row: Row, ask: _Ask, per_device_batch: float) -> None:
    """The row's activations: a layer's (:func:`layer_activations`) times the layers, or each layer's input and one
    layer recomputed, plus a language model's logits."""
    shape, kind, n, m = ask.shape, row.kind, ask.machine.devices, ask.microbatches
    e = BYTES[ask.precision]
    tensor = n if kind == "tensor" else 1
    if kind == "pipeline":  # 1F1B: the first stage holds p micro-batches of its L/p layers = L layers of one
        micro = ask.batch / m
        act_batch = micro
        row.notes.append(f"{m} micro-batches of {micro:g}; the schedule's bubble is "
                         f"{(n - 1) / (m + n - 1):.0%} of the step")
    else:
        act_batch = per_device_batch
    per_layer = layer_activations(shape, act_batch, e, tensor, ask.fused)
    if ask.recompute:  # each layer's input kept (replicated under tensor parallelism), one layer recomputed at a time
        row.activations = shape.seq * act_batch * shape.width * e * shape.layers + per_layer
    else:
        row.activations = per_layer * shape.layers
    if shape.lm_head and (kind != "pipeline"):  # the last stage's; the first stage's is the larger in 1F1B
        row.activations += shape.seq * act_batch * shape.vocab * (e + 4) / tensor  # logits, fp32 log-softmax


def _communication(row: Row, ask: _Ask, held: recipes.Recipe) -> None:
    """The bytes through each device a step, by the row's strategy, and their time at the stated bandwidth."""
    shape, kind, n, m, p = ask.shape, row.kind, ask.machine.devices, ask.microbatches, ask.shape.params
    e, batch, servers = BYTES[ask.precision], ask.batch, ask.parameter_servers
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
        row.notes.append(f"the parameter servers' links carry {n}× that: {n * 8 * p / servers:.3g} "
                         f"bytes a step each")
    if ask.machine.bandwidth:
        link = row.comm_bytes
        if kind == "parameter_server":
            link = max(link, n * 8 * p / servers)
        row.comm_s = link / ask.machine.bandwidth


def _calibrated(row: Row, ask: _Ask, cal: Calibration, bubble: float) -> None:
    """The row's memory and step on the machine ``cal`` was fitted on: its GEMMs at that machine's rates by shape
    where the calibration and a rate table allow, else its FLOPs at the fitted rate."""
    shape, n, recompute, batch = ask.shape, ask.machine.devices, ask.recompute, ask.batch
    row.calibrated_total = (row.weights + row.copy + row.optimizer
                            + cal.memory(row.gradients + row.activations))
    flops = training_flops(shape, batch / n, recompute)
    elements = attention_elements(shape, batch / n, recompute)
    table = (ask.rates or {}).get((row.framework, ask.precision))
    gemm_s = (gemm_seconds(gemms(shape, batch / n, recompute), table)
              if cal.rated and table is not None else None)
    if gemm_s is not None:
        row.calibrated_compute_s = cal.rated_step(gemm_s, elements,
                                                  activation_elements(shape, batch / n, recompute)) * bubble
    else:
        row.calibrated_compute_s = cal.step(flops, elements) * bubble
    if cal.rated and gemm_s is None:
        row.notes.append(f"calibrated step ({row.framework}): FLOPs at one rate, as no rate table of "
                         "this plan's GEMM shapes was measured on that machine")
    if gemm_s is None and cal.largest_flops and flops > EXTRAPOLATED * cal.largest_flops:
        row.notes.append(f"calibrated step: an extrapolation, {flops / cal.largest_flops:.0f}× the FLOPs "
                         "of the largest step the calibration measured; larger matrices usually run at a "
                         "higher FLOP rate, so it is likely too long (bench/plan_accuracy.py --beyond "
                         "measures by how much)")
    comm = row.comm_s if n > 1 else 0.0  # None: no bandwidth given, so no step time
    row.calibrated_step_s = None if comm is None else row.calibrated_compute_s + comm
    row.calibration = cal.source


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
