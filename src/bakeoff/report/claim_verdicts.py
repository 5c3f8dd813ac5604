"""Claims judged on stored results (``bakeoff claims``), and the report's "Claims" section.

A ratio claim (:mod:`bakeoff.predict.hypotheses`) is judged per comparison with the comparison every verdict rests on
(:func:`bakeoff.analysis.decide.head_to_head`: a Welch interval on the log values of one figure per run, at 95%, or
wider after adaptive repeats' looks), against the claim's threshold instead of the tie band:

* **supported** when the whole interval lies on the claim's side of the threshold (``at_least 3``: low ≥ 3);
* **refuted** when the whole interval lies on the other side (high < 3);
* **unsettled** otherwise (saying about how many runs a side would settle it, if the ratio measured is the true
  one), and whenever a side has fewer than
  :data:`~bakeoff.analysis.verdict.MIN_RUNS` runs (a verdict below that is provisional everywhere in bakeoff, so a
  claim is not called on it), a figure is missing, or a trial did not succeed — always with n and why.

A finding judged on runs measured on a busy machine keeps its verdict but never silently: its why names them, its
verdict cell carries § (:data:`~bakeoff.analysis.conditions.BUSY_MARK`) and its JSON counts them (``busy``).

Every finding names the scale it was judged at (:func:`scale`): the workload and preset, the model's parameters
(as its trials counted them) and training FLOPs per example, the examples an optimizer step trains on, and the
devices — a verdict holds at that scale, not necessarily at the one a claim was told of.

A comparison whose trials need more GPUs than this machine has, and that the store has no results of, says so
("needs 8 GPUs") with the capacity plan's answer when the claim has a plan. A deployment claim reads what
``bakeoff deploy`` stored; a claim with no measurable form is reported as such, without a number.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from bakeoff.analysis import intervals
from bakeoff.analysis.bootstrap import SETTLE_RUNS_MAX
from bakeoff.analysis.conditions import BUSY_MARK, busy_note, busy_runs
from bakeoff.analysis.decide import aligned, head_to_head, look_confidence
from bakeoff.analysis.quantities import Quantity, fmt, quantity
from bakeoff.analysis.stats import ConfigSummary, distinct_labels, summarise_groups
from bakeoff.analysis.verdict import MIN_RUNS, interval_text, ratio_text
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec, SpecError, Status
from bakeoff.predict.hypotheses import Claim, Comparison, capacity_plan, configuration, load_claims
from bakeoff.report import deployment as deployed
from bakeoff.report.templates import Block, Heading, Para, Table

SUPPORTED, REFUTED, UNSETTLED = "supported", "refuted", "unsettled"
NEEDS_HARDWARE, NOT_TESTABLE = "needs hardware", "not testable"
KIND = {"data_parallel": "data", "multi_worker": "data", "parameter_server": "parameter_server"}
"""The capacity plan's strategy for a claim's parallelism (:data:`bakeoff.predict.capacity.KINDS`)."""


@dataclasses.dataclass
class Finding:
    """One comparison of a claim, judged: its verdict, why, and the figures (a's value, b's, the ratio a / b and
    its interval, runs a side)."""

    label: str  # the ``each`` entry ('' for a claim with one comparison)
    verdict: str
    why: str
    a_label: str = ""
    b_label: str = ""
    a: float | None = None
    b: float | None = None
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    confidence: float = intervals.CONFIDENCE
    n: tuple[int, int] = (0, 0)
    busy: tuple[int, int] = (0, 0)  # of a's and b's runs, those measured on a busy machine (its verdict marked §)
    scale: dict[str, Any] = dataclasses.field(default_factory=dict)  # what it was judged at (:func:`scale`)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: a never-reached target's +∞ as the string "inf" (JSON has no infinity)."""
        out = dataclasses.asdict(self) | {"n": list(self.n), "busy": list(self.busy)}
        return {k: "inf" if isinstance(v, float) and math.isinf(v) else v for k, v in out.items()}


@dataclasses.dataclass
class ClaimVerdict:
    """A claim, its verdict (the findings' when they agree, else "mixed"), its findings, and notes (the plan's
    answer, what a deployment claim read)."""

    claim: Claim
    verdict: str
    findings: list[Finding]
    notes: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**self.claim.to_dict(), "verdict": self.verdict, "findings": [f.to_dict() for f in self.findings],
                "notes": self.notes}


def judge(claims: Sequence[Claim], results: Sequence[TrialResult], deployments: Sequence[Mapping[str, Any]] = (),
          gpus: int = 0, mfu: Mapping[str, Mapping[str, tuple[float, str]]] | None = None) -> list[ClaimVerdict]:
    """Each claim judged on ``results`` (matched to a claim's configurations by spec, seeds aside) and the stored
    ``deployments``; ``gpus``: this machine's; ``mfu``: each framework's measured MFU per kind of device
    (:func:`~bakeoff.predict.capacity.measured_mfu`), for a plan's step times (only the plan's kind is used)."""
    by_config: dict[str, list[TrialResult]] = {}
    for r in results:
        by_config.setdefault(configuration(r.run_spec), []).append(r)
    out = []
    for claim in claims:
        if claim.form == "untestable":
            out.append(ClaimVerdict(claim, NOT_TESTABLE, [Finding("", NOT_TESTABLE, claim.why, scale={
                "text": "not judged: no measurable form"})]))
        elif claim.form == "deployment":
            out.append(_deployment(claim, deployments))
        else:
            findings = [_finding(claim, c, by_config, gpus) for c in claim.comparisons]
            verdicts = {f.verdict for f in findings}
            notes = _plan_answer(claim, mfu or {}) if claim.plan and NEEDS_HARDWARE in verdicts else []
            out.append(ClaimVerdict(claim, verdicts.pop() if len(verdicts) == 1 else "mixed", findings, notes))
    return out


def _side(summaries: Sequence[ConfigSummary], trials: Sequence[TrialResult]) -> ConfigSummary:
    keys = {t.key for t in trials}
    return max((s for s in summaries if any(t.key in keys for t in s.trials)), key=lambda s: s.n_ok)


def _side_scale(spec: RunSpec, trials: Sequence[TrialResult]) -> dict[str, Any]:
    """One side's scale: its spec's sizes, the parameters its trials counted, the workload's FLOPs per example."""
    from bakeoff.core import registry

    try:
        flops = registry.workload(spec).flops_per_example(registry.workload(spec).config(spec.preset, spec))
    except (KeyError, ValueError, SpecError):  # a workload this bakeoff no longer has: FLOPs unknown, not an error
        flops = None
    counted = sorted({r.num_params for r in trials if r.num_params})
    devices = [_device_kind(str(r.environment["device"])) for r in trials if r.environment.get("device")]
    return {"workload": spec.workload, "preset": spec.preset, "parameters": counted[len(counted) // 2] if counted
            else None, "flops_per_example": flops, "batch": spec.batch_size * spec.grad_accum,
            "micro_batch": spec.batch_size, "grad_accum": spec.grad_accum, "parallelism": spec.parallelism.value,
            "replicas": spec.workers if spec.parallelism.value != "none" else 1,
            "device": max(set(devices), key=devices.count) if devices else spec.device.value}


def _device_kind(device: str) -> str:
    """``cpu`` or ``cuda`` from what a trial's environment names (``CPU:0`` in TensorFlow's, ``cuda:0``, ``gpu``)."""
    name = device.lower()
    return "cpu" if name.startswith("cpu") else "cuda" if name.startswith(("cuda", "gpu")) else name


def _scale_words(side: Mapping[str, Any]) -> dict[str, str]:
    """A side's scale in words, part by part (the parts a and b share are said once)."""
    params, flops = side["parameters"], side["flops_per_example"]
    device = {"cpu": "CPU", "cuda": "GPU"}.get(side["device"], f"device ({side['device']})")
    replicas = side["replicas"]
    return {
        "model": f"{side['workload']}/{side['preset']}",
        "parameters": f"{fmt(params / 1e6)}M parameters" if params else "",  # counted by a stored trial
        "flops": f"{fmt(flops / 1e9)} GFLOP a training example" if flops else "",
        "batch": (f"batch {side['batch']} ({side['grad_accum']} × {side['micro_batch']})" if side["grad_accum"] > 1
                  else f"batch {side['batch']}"),
        "devices": (f"{replicas} replicas ({side['parallelism']}) on {device}" if replicas > 1 else f"1 {device}"),
    }


def scale(c: Comparison, trials: Sequence[Sequence[TrialResult]] = ((), ())) -> dict[str, Any]:
    """What a comparison was judged at: each side's scale (``a``, ``b``: workload, preset, parameters counted by
    its trials, training FLOPs per example, the examples an optimizer step trains on, micro-batch, replicas, device)
    and ``text``, the two in words (``"text_classifier/paper, 108M parameters, 290 GFLOP a training example,
    batch 8, 1 CPU"``; a part that differs as ``a / b``)."""
    a, b = _side_scale(c.a[0], trials[0]), _side_scale(c.b[0], trials[1])
    wa, wb = _scale_words(a), _scale_words(b)
    text = ", ".join(wa[k] if wa[k] == wb[k] else f"{wa[k]} / {wb[k]}" for k in wa if wa[k] or wb[k])
    return {"a": a, "b": b, "text": text}


def _finding(claim: Claim, c: Comparison, by_config: Mapping[str, list[TrialResult]], gpus: int) -> Finding:
    found = _judged(claim, c, by_config, gpus)
    found.scale = scale(c, [[r for r in by_config.get(configuration(side[0]), []) if r.status is Status.OK]
                            for side in (c.a, c.b)])
    return found


def _judged(claim: Claim, c: Comparison, by_config: Mapping[str, list[TrialResult]], gpus: int) -> Finding:
    q = quantity(claim.quantity)
    labels = c.a[0].label(), c.b[0].label()
    if labels[0] == labels[1]:  # told apart by what differs: torch/eager/batch_size=64
        labels = tuple(distinct_labels([c.a[0], c.b[0]]))
    trials = [by_config.get(configuration(side[0]), []) for side in (c.a, c.b)]
    if not all(trials):
        absent = " and ".join(label for label, t in zip(labels, trials, strict=True) if not t)
        if claim.gpus > gpus:
            return Finding(c.label, NEEDS_HARDWARE, f"needs {claim.gpus} GPUs; this machine has {gpus}, and no "
                                                    f"results of {absent} are stored", *labels)
        return Finding(c.label, UNSETTLED, f"no trials of {absent} in the store: run `bakeoff claims` without "
                                              "--no-run", *labels)
    summaries = summarise_groups([*trials[0], *trials[1]])
    a, b = _side(summaries, trials[0]), _side(summaries, trials[1])
    n = (len(a.runs(q.name)[0]), len(b.runs(q.name)[0]))
    confidence = look_confidence(intervals.CONFIDENCE, a, b)
    d = head_to_head(q, a, b, confidence)
    found = Finding(c.label, UNSETTLED, "", *labels, a=d.a, b=d.b, ratio=d.ratio, low=d.low, high=d.high,
                    confidence=confidence, n=n)
    if d.ratio is None:
        missing = [f"{s.label}: {s.missing.get(q.name) or 'not measured'}" for s in (a, b) if s.value(q.name) is None]
        found.why = f"{q.label} not measured — " + "; ".join(missing)
        return found
    if min(n) < 2:
        found.why = f"n = {n[0]} vs {n[1]} runs: no interval (2 runs a side at least, {MIN_RUNS} for a verdict)"
        return found
    assert d.low is not None and d.high is not None
    holds, fails = ((d.low >= claim.at_least, d.high < claim.at_least) if claim.at_least is not None
                    else (d.high <= claim.at_most, d.low > claim.at_most))
    ci = interval_text(d.low, d.high, confidence)
    if min(n) < MIN_RUNS:
        leaning = f"; the interval alone would say {SUPPORTED if holds else REFUTED}" if holds or fails else ""
        found.why = (f"provisional: n = {n[0]} vs {n[1]} runs, {MIN_RUNS} a side needed for a verdict ({ci} against "
                     f"{claim.threshold}{leaning})")
    elif holds or fails:
        found.verdict = SUPPORTED if holds else REFUTED
        side = "clears" if holds else "misses"
        found.why = f"the whole {ci} {side} {claim.threshold}"
    else:
        found.why = f"the {ci} reaches both sides of {claim.threshold}" + _settle(claim, q, a, b, d.ratio, d.pairs > 0)
    caveats = [f"{s.label}: {note}" for s in (a, b) for note in s.reasons]  # runs that did not finish
    caveats += [note.replace("bakeoff run --retry-busy", "bakeoff claims --retry-busy")
                for s in (a, b) if (note := busy_note(s))]
    found.busy = (len(busy_runs(a)), len(busy_runs(b)))
    if caveats:
        found.why += "; " + "; ".join(caveats)
    return found


def _settle(claim: Claim, q: Quantity, a: ConfigSummary, b: ConfigSummary, ratio: float | None,
            paired: bool = False) -> str:
    """``"; about 9 runs a side would settle it, if the 2.5x measured is the true ratio"``: the runs a claim whose
    interval straddles its threshold needs to be supported or refuted (:func:`bakeoff.analysis.intervals.resolution`
    around the threshold, no band); ``""`` when the runs give no spread to tell (a censored run, one run)."""
    threshold = claim.at_least if claim.at_least is not None else claim.at_most
    (ra, _), (rb, _), _ = aligned(q, a, b)  # as the comparison: over the pairs of a repeat when it was
    r = intervals.resolution(q.floored(ra), q.floored(rb), band=0.0, observed=ratio, centre=threshold or 1.0,
                             paired=paired)
    if r is None or ratio is None:
        return ""
    measured = f"if the {ratio_text(ratio)} measured is the true ratio"
    return (f"; about {r.settle_runs} runs a side would settle it, {measured}" if r.settle_runs is not None else
            f"; more than {SETTLE_RUNS_MAX} runs a side would be needed to settle it, {measured}")


def figures(claim: Claim, f: Finding) -> str:
    """``"2.1 vs 0.6 s (3.5x, 95% CI 3.1–3.9x)"``, a's value first; '' when nothing was measured."""
    if f.ratio is None:
        return ""
    q = quantity(claim.quantity)
    unit = f" {q.display_unit}" if q.display_unit else ""

    def shown(v: float | None) -> str:
        return "—" if v is None else "never" if math.isinf(v) else fmt(v * q.scale)

    ci = interval_text(f.low, f.high, f.confidence) if f.low is not None else "no interval"
    return f"{shown(f.a)} vs {shown(f.b)}{unit} ({ratio_text(f.ratio)}, {ci})"


def _deployment(claim: Claim, rows: Sequence[Mapping[str, Any]]) -> ClaimVerdict:
    """Supported when a stored row of the format exported, ran and matched the framework model; refuted when every
    stored row of it that was tried failed (export, run or outputs); unsettled when none is stored or it was not
    tried here (unsupported: not installed, needs a GPU). Other formats reaching the target are named."""
    fw, name, target = (claim.deployment[k] for k in ("framework", "format", "target"))
    rows = deployed.latest(rows)
    mine = [r for r in rows if r["framework"] == fw and r["format"] == name]
    where = ", ".join(sorted({f"{r['workload']}/{r['preset']}" for r in mine}))
    tried = [r for r in mine if r.get("status") != "unsupported"]  # not installed here, or needs a GPU: no evidence
    if not tried:
        said = "; ".join(dict.fromkeys(str(r.get("reason", "")) for r in mine))
        finding = Finding("", UNSETTLED, (f"{name} was not tried here: {said}" if mine else
                                             f"no stored deployment of {fw} {name}") + ": run `bakeoff deploy "
                                            "--workload mnist` (it exports every format it can) and ask again")
    elif any(deployed.usable(r) for r in mine):
        finding = Finding("", SUPPORTED, f"{name} exported, ran in its runtime and matched the {fw} model "
                                         f"({where}); " + "; ".join(deployed.line(r) for r in mine
                                                                      if deployed.usable(r)))
    else:
        finding = Finding("", REFUTED, f"{name} did not export, run or match ({where}): "
                                       + "; ".join(deployed.line(r) for r in tried))
    others = sorted({f"{r['framework']} {r['format']}" for r in rows if deployed.usable(r) and
                     target in r.get("targets", []) and r["format"] != name})
    notes = [f"also reaching {target} here: {', '.join(others)}"] if others else []
    finding.scale = {"deployed": sorted({(r["workload"], r["preset"]) for r in mine}),
                     "text": f"the deployed {where} model" if where else "no deployment stored"}
    return ClaimVerdict(claim, finding.verdict, [finding], notes)


def _plan_answer(claim: Claim, mfu: Mapping[str, Mapping[str, tuple[float, str]]]) -> list[str]:
    """What the capacity plan says of the claim's trials at the scale its ``[claim.plan]`` describes: a prediction,
    never a verdict."""
    from bakeoff.predict.capacity import describe_missing_times, human_bytes, human_seconds
    from bakeoff.predict.recipes import RECIPES

    spec = claim.comparisons[0].a[0]
    framework, kind = spec.framework.value, KIND.get(spec.parallelism.value, "data")
    many = capacity_plan(claim.plan, framework, mfu)
    one = capacity_plan(claim.plan, framework, mfu, devices=1)
    row = next(r for r in many.rows if r.framework == framework and r.kind == kind)
    single = next(r for r in one.rows if r.framework == framework and r.kind == "data")
    s, m = many.shape, many.machine
    head = (f"the plan's answer (a prediction, not a measurement) for {s.params / 1e9:,.2f}B parameters at global "
            f"batch {many.batch}, {many.precision}, on {m.devices} × {human_bytes(m.memory)}")
    if row.missing:
        return [f"{head}: {framework} has no such strategy ({row.missing})"]
    fits = (f"fits, {human_bytes(row.headroom)} spare" if row.fits else f"does not fit, {human_bytes(-row.headroom)} "
                                                                        "over")
    lines = [f"{head}: {row.api} needs {human_bytes(row.total)} a device ({fits}; recipe {row.recipe}: "
             f"{RECIPES[row.recipe].bytes_text} a parameter) and moves "
             f"{human_bytes(row.comm_bytes)} a device each step; one device needs {human_bytes(single.total)}"]
    if row.step_s is not None and single.compute_s is not None:
        lines.append(f"predicted speed-up over one device {ratio_text(single.compute_s / row.step_s)} (step "
                     f"{human_seconds(row.step_s)} against {human_seconds(single.compute_s)}, communication not "
                     f"overlapped; MFU {row.mfu:.1%}, {row.mfu_source}), against the claim's {claim.threshold}")
    else:
        missing = [line for line in describe_missing_times(many, in_file=True) if "MFU" not in line]
        if framework in many.mfu_missing:
            missing.append(f"{framework}: {many.mfu_missing[framework]}")
        lines.append("no speed-up predicted: " + "; ".join(missing))
    return lines


def section(results: Sequence[TrialResult], rows: Sequence[Mapping[str, Any]] = ()) -> list[Block]:
    """The report's "Claims" section: the shipped claims judged on the report's results — nothing when none of
    their trials is among them (a report of other trials says nothing of claims)."""
    from bakeoff.measure.environment import cuda_devices
    from bakeoff.predict.capacity import measured_mfu

    claims = load_claims()
    configs = {configuration(s) for claim in claims for s in claim.specs}
    if not any(configuration(r.run_spec) in configs for r in results):
        return []
    return blocks(judge(claims, results, rows, cuda_devices()[0], measured_mfu(results)))


COLUMNS = ["claim", "comparison", "judged at", "verdict", "measured (a vs b, ratio a / b)", "why"]


def blocks(verdicts: Sequence[ClaimVerdict]) -> list[Block]:
    """A table of every claim's findings, and each claim's measurable form and notes below it."""
    rows = [[v.claim.said if i == 0 else "", _comparison(v.claim, f), f.scale.get("text", ""),
             f.verdict + (f" {BUSY_MARK}" if any(f.busy) else ""), figures(v.claim, f), f.why]
            for v in verdicts for i, f in enumerate(v.findings)]
    notes = [f"{v.claim.name}: {v.claim.meaning}" for v in verdicts if v.claim.meaning]
    if any(any(f.busy) for v in verdicts for f in v.findings):
        notes.append(f"{BUSY_MARK}: judged on runs measured while other processes used more than a quarter of their "
                     "cores (their timings are suspect; its why names them); `bakeoff claims --retry-busy` measures "
                     "them again and keeps the quieter measurement.")
    notes += [f"{v.claim.name}: {note}" for v in verdicts for note in v.notes]
    return [Heading(2, "Claims"),
            Para("Each claim as a measurable hypothesis, judged at the scale its row names (the trials' own "
                 "sizes, on this machine): supported or refuted only when the whole interval of the ratio clears the "
                 f"threshold, with {MIN_RUNS} runs a side or more; unsettled otherwise, with why."),
            Table(COLUMNS, rows, notes=notes, align="llllll")]


def _comparison(claim: Claim, f: Finding) -> str:
    if claim.form != "ratio":
        return claim.form if claim.form == "deployment" else "—"
    return f"{claim.quantity}: {f.a_label} / {f.b_label} {claim.threshold}"
