"""The capacity plan as tables (:mod:`bakeoff.predict.capacity`): the report's "Capacity plan" section, and the same
tables ``bakeoff plan`` prints, so the terminal and the page can never say different things.

A report's plans come from a plan file (``bakeoff report --plan PLANS.toml``: one ``[[plan]]`` table a plan, each
a ``name`` and ``bakeoff plan``'s fields), made with the MFU and the calibrations of the trials the report is of.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bakeoff.core import frameworks
from bakeoff.core.result import TrialResult
from bakeoff.predict.capacity import (
    KINDS,
    Plan,
    PlanError,
    Row,
    calibrate,
    describe_missing_times,
    human_bytes,
    human_seconds,
    measured_mfu,
    plan_from,
    shape_from,
)
from bakeoff.predict.recipes import RECIPES
from bakeoff.report.templates import Block, Facts, Heading, Para, Table

SHORT = {"data": "data parallel", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3/FSDP", "tensor": "tensor",
         "pipeline": "pipeline", "parameter_server": "param. servers"}
TAG = {name: info.capacity.tag for name, info in frameworks.FRAMEWORKS.items() if info.capacity is not None}
NONE = "—"


def summary(result: Plan) -> str:
    s, m = result.shape, result.machine
    return (f"{s.params / 1e9:,.2f}B parameters ({s.layers} layers × {s.width} wide, {s.heads} heads, ffn {s.ffn}, "
            f"seq {s.seq}, vocabulary {s.vocab}), global batch {result.batch}, {result.precision}"
            f"{f' (recipe {result.recipe} in every row)' if result.recipe else ''}"
            f"{', full recomputation' if result.recompute else ''}{'' if result.fused else ', attention unfused'}; "
            f"{m.devices} device(s) of {human_bytes(m.memory)}")


def memory_table(result: Plan) -> Table:
    """Memory per device by strategy and recipe (the same formulas whichever framework offers them), whether it
    fits and by how much, what each device moves a step, and who offers the strategy with that recipe."""
    offered: dict[tuple[str, tuple[float, ...]], list[Row]] = {}  # rows whose recipes hold the same bytes: one line
    for r in result.rows:
        if not r.missing:
            offered.setdefault((r.kind, (r.weights, r.copy, r.gradients, r.optimizer, r.activations)), []).append(r)
    scale, unit = (1e9, "GB") if max(r.total for r in result.rows) >= 1e9 else (1e6, "MB")
    rows = []
    for (kind, _), rows_of_kind in sorted(offered.items(), key=lambda item: list(KINDS).index(item[0][0])):
        r = rows_of_kind[0]
        fits = f"yes (-{r.headroom / scale:,.0f})" if r.fits else f"no (+{-r.headroom / scale:,.0f})"
        names = list(dict.fromkeys(x.recipe for x in rows_of_kind))
        rows.append([SHORT[kind], f"{', '.join(names)} {RECIPES[r.recipe].bytes_text}",
                     *(f"{v / scale:,.1f}" for v in (r.weights + r.copy, r.gradients, r.optimizer, r.activations,
                                                     r.total)),
                     fits, human_bytes(r.comm_bytes), " ".join(TAG[x.framework] for x in rows_of_kind)])
    return Table(["strategy", "recipe", "weights", "grads", "Adam", "activ.", "total", "fits", "comm", "offered by"],
                 rows, align="llrrrrrlrl",
                 notes=[f"memory per device in {unit}; recipe: how the states are held, in bytes a parameter before "
                        "sharding: weights (+ the 16-bit copy the compute reads) / gradients / Adam (with an fp32 "
                        "master where the weights are 16-bit); weights: the parameters and that copy; fits: by how "
                        "much under (-) or over (+) the device's memory; comm: what each device moves a step"])


def recipes(result: Plan) -> list[tuple[str, str]]:
    """(recipe, what the framework's API holds and who uses it in this plan), a line each recipe the rows use."""
    users: dict[str, list[str]] = {}
    for r in result.rows:
        if r.recipe:
            users.setdefault(r.recipe, []).append(f"{TAG[r.framework]} {SHORT[r.kind]}")
    how = "chosen (--recipe / recipe)" if result.recipe else "each framework's own"
    return [(f"recipe {name}", f"{RECIPES[name].bytes_text} a parameter; {RECIPES[name].api}; {how}: "
                               f"{', '.join(who)}") for name, who in users.items()]


def step_table(result: Plan) -> Table | None:
    """Per strategy and framework (their MFUs differ): compute + communication (perfect overlap), and the time to
    the token budget; None when no row has a compute time."""
    if not any(r.compute_s is not None for r in result.rows):
        return None
    frameworks = list(dict.fromkeys(r.framework for r in result.rows))
    rows = []
    for kind in dict.fromkeys(r.kind for r in result.rows):
        cells = []
        for framework in frameworks:
            r = next(x for x in result.rows if x.kind == kind and x.framework == framework)
            if r.missing:
                cells.append(NONE)
            elif r.step_s is not None:
                budget = f"; {human_seconds(r.budget_s)}" if r.budget_s is not None else ""
                cells.append(f"{human_seconds(r.step_s)} ({human_seconds(r.step_overlapped_s)}){budget}")
            elif r.compute_s is not None:
                cells.append(f"{human_seconds(r.compute_s)} + comm ?")
            else:
                cells.append("no MFU")
        rows.append([SHORT[kind], *cells])
    budget = "; then the time to the token budget" if result.tokens else ""
    return Table(["strategy", *frameworks], rows,
                 notes=[f"step: compute + communication, and in brackets with perfect overlap{budget}"])


def calibrated_table(result: Plan) -> Table | None:
    """Per strategy and framework, on the machine the calibrations were fitted on: memory per device (and whether it
    fits) and the step; None when no calibration was applied."""
    if not result.calibrations:
        return None
    frameworks = list(result.calibrations)
    rows = []
    for kind in dict.fromkeys(r.kind for r in result.rows):
        cells = []
        for framework in frameworks:
            r = next(x for x in result.rows if x.kind == kind and x.framework == framework)
            if r.missing or r.calibrated_total is None:
                cells.append(NONE)
                continue
            fits = "" if r.calibrated_total <= result.machine.memory else " (does not fit)"
            step = (human_seconds(r.calibrated_step_s) if r.calibrated_step_s is not None
                    else f"{human_seconds(r.calibrated_compute_s)} + comm ?")
            cells.append(f"{human_bytes(r.calibrated_total)}{fits}; {step}")
        if any(cell != NONE for cell in cells):
            rows.append([SHORT[kind], *cells])
    return Table(["strategy", *frameworks], rows,
                 notes=["calibrated on the machine the trials ran on: memory per device; step",
                        *(f"{fw}: {c.source}" for fw, c in result.calibrations.items())])


def apis(result: Plan) -> list[tuple[str, str]]:
    """(framework and strategy, what the user calls — or why there is none), a line each."""
    out = [(f"{r.framework}, {KINDS[r.kind]}", r.api) for r in result.rows if not r.missing]
    lacking: dict[tuple[str, str], list[str]] = {}
    for r in result.rows:
        if r.missing:
            lacking.setdefault((r.framework, r.missing), []).append(SHORT[r.kind])
    out += [(f"{framework}, {', '.join(which)}", f"none: {why}") for (framework, why), which in lacking.items()]
    return out


def remarks(result: Plan, *, in_file: bool = False) -> list[tuple[str, str]]:
    """The plan's notes, the MFU each framework's times use (one of the plan's kind of device, or stated), why a
    figure is missing (naming ``bakeoff plan``'s flags, or a plan file's fields:
    :func:`~bakeoff.predict.capacity.describe_missing_times`), and what is left out."""
    out = [("note", note) for note in dict.fromkeys(n for r in result.rows for n in r.notes)]
    if result.machine.flops:
        out += [(f"MFU {framework}", f"{value:.1%}, {source}")
                for framework, (value, source) in sorted(result.mfu.items())]
    if result.uncalibrated:
        out.append(("not calibrated", result.uncalibrated))
    calibrated = bool(result.calibrations) and {r.framework for r in result.rows} <= set(result.calibrations)
    out += [("not computed", line)
            for line in describe_missing_times(result, in_file=in_file, compute=not calibrated)]
    out.append(("left out", "; ".join(result.left_out)))
    return out


def made(requests: Sequence[tuple[str, Mapping[str, Any]]], results: Sequence[TrialResult]) -> list[tuple[str, Plan]]:
    """Each requested plan (name, fields) made with the MFU ``results`` measured on the plan's kind of device and
    their calibrations."""
    measured, calibrations = measured_mfu(results), calibrate(results)
    out = []
    for name, fields in requests:
        rated, rates = calibrations, kept_rates(fields, results, calibrations)
        if rates:
            rated = calibrate(results, rates)
        out.append((name, plan_from(fields, None, rated, measured=measured, rates=rates, in_file=True)))
    return out


def kept_rates(fields: Mapping[str, Any], results: Sequence[TrialResult],
               calibrations: Sequence[Any]) -> dict[tuple[str, str], dict] | None:
    """The GEMM rates by shape kept for this machine (:mod:`bakeoff.measure.gemm_rates`; a report measures none)
    that a plan for the machine its calibrations were fitted on needs; None for a plan of stated devices."""
    from bakeoff.predict.capacity import gemm_rates_for

    if fields.get("flops") is not None or not calibrations:
        return None
    try:
        shape = shape_from(fields)
    except PlanError:
        return None
    devices = int(fields.get("devices") or 1)
    return gemm_rates_for(results, calibrations, shape, int(fields["batch"]) / devices,
                               bool(fields.get("recompute")), measure=False) or None


def blocks(requests: Sequence[tuple[str, Mapping[str, Any]]], results: Sequence[TrialResult]) -> list[Block]:
    """The "Capacity plan" section: each requested plan made with the MFU and calibrations of ``results``."""
    if not requests:
        return []
    plans = made(requests, results)
    out: list[Block] = [Heading(2, "Capacity plan"),
                        Para("Will the model fit, and how long will a step take, under each framework's own "
                             "strategies: stated formulas (bakeoff.predict.capacity names their sources), timed at the "
                             "MFU these trials measured on the plan's kind of device, and calibrated by them on the "
                             "machine they ran on when the plan states no other devices.")]
    for name, result in plans:
        out += [Heading(3, name), Para(summary(result)), memory_table(result)]
        out += [t for t in (step_table(result), calibrated_table(result)) if t is not None]
        out += [Facts(apis(result)), Facts(recipes(result)), Facts(remarks(result, in_file=True))]
    return out
