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

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bakeoff.predict import recipes
from bakeoff.predict.plan_strategies import KINDS, REPLICATED, STRATEGIES, Strategy, planned
from bakeoff.predict.step_calibration import (
    CALIBRATED_WORKLOAD,
    EXTRAPOLATED,
    MIN_SIZES,
    Calibration,
    Point,
    _median,
    calibrate,
    fit,
    fit_rated,
    leave_one_out,
    point,
    trial_shape,
)
from bakeoff.predict.strategy_rows import LEFT_OUT, Plan, Row, check_recipe, plan
from bakeoff.predict.transformer_costs import (
    BYTES,
    GPT3_WIDTH_PER_LAYER,
    Gemm,
    Machine,
    PlanError,
    RateTable,
    Shape,
    activation_elements,
    attention_elements,
    gemm_seconds,
    gemms,
    layer_activations,
    parse_size,
    training_flops,
)

if TYPE_CHECKING:
    from bakeoff.core.result import TrialResult

__all__ = ["BYTES", "CALIBRATED_WORKLOAD", "EXTRAPOLATED", "FIELDS", "GPT3_WIDTH_PER_LAYER", "KINDS", "LEFT_OUT",
           "MIN_SIZES", "REPLICATED", "STRATEGIES", "Calibration", "Gemm", "Machine", "Plan", "PlanError", "Point",
           "RateTable", "Row", "Shape", "Strategy", "activation_elements", "attention_elements", "calibrate",
           "check_recipe", "choose_mfu", "describe_missing_times", "fit", "fit_rated", "gemm_rates_for",
           "gemm_seconds", "gemms", "human_bytes", "human_seconds", "layer_activations", "leave_one_out",
           "load_plans", "measured_mfu", "parse_size", "plan", "plan_from", "planned", "point", "shape_from",
           "trial_device_kind", "trial_shape", "training_flops"]
"""The plan's names, wherever they are defined: the model's counts (:mod:`bakeoff.predict.transformer_costs`), the
strategies (:mod:`bakeoff.predict.plan_strategies`), the calibration (:mod:`bakeoff.predict.step_calibration`) and
the rows (:mod:`bakeoff.predict.strategy_rows`); this module turns a plan's fields into a plan and holds the MFUs."""


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
