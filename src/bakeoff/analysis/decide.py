"""From configuration summaries to a decision: criteria, weights, scores, a verdict in numbers, and sensitivity.

Scoring, per (workload, preset):

* each measured criterion is normalised to [0, 1] against the best configuration (higher-is-better: ``v / best``;
  lower-is-better: ``best / v``); a configuration that never reached the target scores 0 on time to target;
* a qualitative criterion (team familiarity, ecosystem, ...) is the user's 0..5 score per framework, divided by 5;
* a configuration's score is the weighted mean of its criteria (weights normalised to sum 1);
* a framework is judged by its best configuration — the report still shows every mode.

The winner is declared only when its lead survives with every criterion whose difference is within run-to-run noise
(:func:`bakeoff.analysis.stats.compare` says "inconclusive") counted as a tie; otherwise the verdict is
"inconclusive".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from bakeoff.analysis.stats import ConfigSummary, compare, fmt

Qualitative = Mapping[str, Mapping[str, float]]
"""``{criterion: {framework: score 0..5}}``, e.g. ``{"team_familiarity": {"torch": 4, "tensorflow": 2}}``."""


@dataclasses.dataclass(frozen=True)
class Criterion:
    """A measured criterion: which :class:`ConfigSummary` quantity it reads and which direction is better."""

    name: str
    quantity: str
    higher_is_better: bool
    description: str


MEASURED: dict[str, Criterion] = {c.name: c for c in (
    Criterion("throughput", "examples_per_s", True, "steady examples/s (median)"),
    Criterion("time_to_target", "time_to_target_s", False, "training seconds to reach the target (median)"),
    Criterion("first_step", "first_step_s", False, "first step seconds: graph build / compile (median)"),
    Criterion("peak_memory", "peak_memory_bytes", False, "peak memory (median)"),
    Criterion("quality", "final_metric", True, "final metric (median; direction from the workload)"),
)}

DEFAULT_WEIGHTS: dict[str, float] = {
    "throughput": 0.3, "time_to_target": 0.3, "first_step": 0.1, "peak_memory": 0.1, "quality": 0.2}
"""Weights of the measured criteria. Qualitative criteria weigh 0 until the user sets them."""

MULTIPLIERS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0)
"""The grid on which sensitivity looks for the multiplier of one weight that changes the winner."""

FRAMEWORK_NAMES = {"torch": "PyTorch", "tensorflow": "TensorFlow", "jax": "JAX"}


def display_name(label: str) -> str:
    """``"torch/graph/bf16"`` -> ``"PyTorch (graph, bf16)"``."""
    framework, *modes = label.split("/")
    name = FRAMEWORK_NAMES.get(framework, framework)
    return f"{name} ({', '.join(modes)})" if modes else name


@dataclasses.dataclass
class ConfigScore:
    """One configuration's normalised score per criterion (``None``: criterion excluded) and weighted total."""

    label: str
    framework: str
    score: float
    parts: dict[str, float | None]


@dataclasses.dataclass
class FrameworkScore:
    """A framework's score: that of its best configuration, ``label``."""

    framework: str
    score: float
    label: str


@dataclasses.dataclass
class SensitivityRow:
    """What happens to the winner when one criterion's weight is scaled, the others fixed."""

    criterion: str
    weight: float  # normalised
    flips_at: float | None  # the multiplier nearest 1 on MULTIPLIERS that changes the leader; None: none does
    flips_to: str | None
    winner_if_zero: str | None
    winner_if_halved: str | None
    winner_if_doubled: str | None


@dataclasses.dataclass
class Decision:
    """The decision for one (workload, preset)."""

    workload: str
    preset: str
    given: dict[str, float]  # the weights as resolved from the user's, before exclusion and normalisation
    weights: dict[str, float]  # normalised, over the criteria that count
    excluded: dict[str, str]  # criterion -> why it does not count
    configs: list[ConfigScore]
    ranking: list[FrameworkScore]  # best first; judged by each framework's best configuration
    unscored: dict[str, str]  # framework -> why it has no score
    winner: str | None  # None when no comparison is possible or the lead is within noise
    margin: float | None  # score of the leader minus the runner-up
    inconclusive: bool
    head_to_head: dict[str, str]  # criterion -> compare() verdict, leader's config as "a"
    verdict: str
    sensitivity: list[SensitivityRow]
    robust: bool  # the leader survives every single weight halved or doubled


def resolve_weights(weights: Mapping[str, float] | None, qualitative: Qualitative | None) -> dict[str, float]:
    """The user's weights merged over :data:`DEFAULT_WEIGHTS` (set a criterion to 0 to drop it); not normalised."""
    qualitative = qualitative or {}
    merged = {**DEFAULT_WEIGHTS, **{c: 0.0 for c in qualitative}, **dict(weights or {})}
    accepted = [*MEASURED, *qualitative]
    for name, w in merged.items():
        if name not in accepted:
            raise ValueError(f"unknown criterion {name!r} in weights; accepted: {', '.join(accepted)} "
                             "(qualitative criteria need scores per framework)")
        if not (isinstance(w, int | float) and math.isfinite(w) and w >= 0):
            raise ValueError(f"weight of {name!r} must be a finite number >= 0, got {w!r}")
    if sum(merged.values()) <= 0:
        raise ValueError("all weights are 0; give at least one criterion a positive weight")
    return merged


def _normalised(value: float | None, best: float, higher_is_better: bool) -> float:
    if value is None:
        return 0.0
    if higher_is_better:
        return value / best if best > 0 else float(value == best)
    return best / value if value > 0 else 1.0


def _measured_parts(scored: Sequence[ConfigSummary]) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """Normalised part of every measured criterion for every configuration, and the criteria excluded (why)."""
    parts: dict[str, dict[str, float]] = {s.label: {} for s in scored}
    excluded: dict[str, str] = {}
    for c in MEASURED.values():
        values = {s.label: (q.median if (q := s.get(c.quantity)) is not None else None) for s in scored}
        present = [v for v in values.values() if v is not None]
        lacking = [label for label, v in values.items() if v is None]
        if not present:
            excluded[c.name] = ("no configuration reached the target" if c.name == "time_to_target"
                                else "not measured by any configuration")
            continue
        if lacking and c.name != "time_to_target":  # not reaching the target is a result; a missing probe is not
            excluded[c.name] = f"not measured for {', '.join(lacking)}"
            continue
        higher = c.higher_is_better if c.name != "quality" else scored[0].higher_is_better
        best = max(present) if higher else min(present)
        for label, v in values.items():
            parts[label][c.name] = _normalised(v, best, higher)
    return parts, excluded


def _framework_scores(configs: Sequence[ConfigScore], weights: Mapping[str, float]) -> list[FrameworkScore]:
    total = sum(weights.values())
    best: dict[str, FrameworkScore] = {}
    for cs in configs:
        score = sum(w * (cs.parts.get(c) or 0.0) for c, w in weights.items()) / total if total > 0 else 0.0
        if cs.framework not in best or score > best[cs.framework].score:
            best[cs.framework] = FrameworkScore(cs.framework, score, cs.label)
    return sorted(best.values(), key=lambda f: (-f.score, f.framework))


def _leader(configs: Sequence[ConfigScore], weights: Mapping[str, float]) -> str | None:
    ranking = _framework_scores(configs, weights) if sum(weights.values()) > 0 else []
    return ranking[0].framework if ranking else None


def _sensitivity(configs: Sequence[ConfigScore], weights: Mapping[str, float]) -> list[SensitivityRow]:
    base = _leader(configs, weights)
    rows = []
    for c, w in weights.items():
        if w <= 0:
            continue
        leaders = {m: _leader(configs, {**weights, c: w * m}) for m in MULTIPLIERS}
        flips = sorted((m for m, f in leaders.items() if f != base), key=lambda m: (abs(math.log(m)) if m else 1e9, m))
        rows.append(SensitivityRow(
            criterion=c, weight=w, flips_at=flips[0] if flips else None, flips_to=leaders[flips[0]] if flips else None,
            winner_if_zero=leaders[0.0], winner_if_halved=leaders[0.5], winner_if_doubled=leaders[2.0]))
    return rows


def _conclusive(criterion: str, a: ConfigSummary, b: ConfigSummary) -> str:
    """compare()'s verdict of config ``a`` against ``b`` on one measured criterion."""
    c = MEASURED[criterion]
    if criterion == "time_to_target" and (a.reached == 0) != (b.reached == 0):
        # One never reached the target: conclusive only if the other reached it in most of its trials.
        reacher = a if a.reached else b
        if 2 * reacher.reached > reacher.n_ok:
            return "a faster" if reacher is a else "b faster"
        return "inconclusive"
    sa, sb = a.get(c.quantity), b.get(c.quantity)
    higher = c.higher_is_better if criterion != "quality" else a.higher_is_better
    return compare(sa.values if sa else (), sb.values if sb else (), higher_is_better=higher).verdict


def _win_phrases(w: ConfigSummary, r: ConfigSummary, weights: Mapping[str, float]) -> list[str]:
    """The numbers behind a win, for the criteria that carry weight."""
    phrases = []
    we, re_ = w.examples_per_s, r.examples_per_s
    if weights.get("throughput", 0) > 0 and we and re_:
        n = f"median of {we.n}" if we.n == re_.n else f"medians of {we.n} and {re_.n}"
        ratio = we.median / re_.median
        phrases.append(f"{ratio:.1f}x the steady throughput of {display_name(r.label)} "
                       f"({fmt(we.median)} vs {fmt(re_.median)} examples/s, {n})")
    if weights.get("time_to_target", 0) > 0:
        goal = f"{w.metric_name or 'the target'} {fmt(w.target)}".strip()
        wt, rt = w.time_to_target_s, r.time_to_target_s

        def reach(s: ConfigSummary) -> str:
            return "" if s.reached == s.n_ok else f" ({s.reached}/{s.n_ok} trials)"

        if wt and rt:
            phrases.append(f"reaches {goal} in {fmt(wt.median)} s{reach(w)} vs {fmt(rt.median)} s{reach(r)}")
        elif wt:
            phrases.append(f"reaches {goal} in {fmt(wt.median)} s{reach(w)} while {display_name(r.label)} "
                           f"never did (0/{r.n_ok} trials)")
        elif rt:
            phrases.append(f"never reaches {goal} ({display_name(r.label)}: {fmt(rt.median)} s)")
    if not phrases and w.final_metric and r.final_metric:
        phrases.append(f"final {w.metric_name or 'metric'} {fmt(w.final_metric.median)} "
                       f"vs {fmt(r.final_metric.median)}")
    return phrases


def _robust_clause(rows: Sequence[SensitivityRow], winner: str) -> str:
    """Robust, or the most fragile weight: the one whose flip lies nearest to its current value."""
    for row in sorted(rows, key=lambda r: abs(math.log(r.flips_at)) if r.flips_at else math.inf):
        for word, who in (("halved", row.winner_if_halved), ("doubled", row.winner_if_doubled)):
            if who != winner:
                return f"but {FRAMEWORK_NAMES.get(who or '', who)} wins if the {row.criterion} weight is {word}"
    return "the verdict holds under every single weight halved or doubled"


def decide(summaries: Sequence[ConfigSummary], weights: Mapping[str, float] | None = None,
           qualitative: Qualitative | None = None) -> Decision:
    """Rank frameworks on one (workload, preset) and say why, in numbers.

    Args:
        summaries: :func:`bakeoff.analysis.stats.summarise_groups` output for a single (workload, preset).
        weights: criterion -> weight, merged over :data:`DEFAULT_WEIGHTS`; normalised to sum 1 over the criteria
            that could be measured.
        qualitative: ``{criterion: {framework: 0..5}}``; every scored framework needs a score for each criterion.

    Raises:
        ValueError: for mixed workloads, an unknown criterion, a bad weight, or a missing or out-of-range score.
    """
    keys = sorted({(s.workload, s.preset) for s in summaries})
    if len(keys) != 1:
        raise ValueError(f"decide() needs the summaries of exactly one (workload, preset), got {keys or 'none'}; "
                         "use decide_each() for several")
    qualitative = qualitative or {}
    given = resolve_weights(weights, qualitative)
    scored = [s for s in summaries if s.n_ok > 0]
    frameworks = sorted({s.framework for s in scored})
    for criterion, scores in qualitative.items():
        for fw in frameworks:
            value = scores.get(fw)
            if value is None or not 0 <= value <= 5:
                raise ValueError(f"qualitative criterion {criterion!r} needs a score 0..5 for {fw!r}, got {value!r}")
    unscored = {fw: "; ".join(r for s in summaries if s.framework == fw for r in s.reasons) or "no trials"
                for fw in sorted({s.framework for s in summaries} - set(frameworks))}

    measured, excluded = _measured_parts(scored)
    active = {c: w for c, w in given.items() if c not in excluded and w > 0}
    total = sum(active.values())
    norm = {c: w / total for c, w in active.items()} if total > 0 else {}
    configs = []
    for s in scored:
        parts: dict[str, float | None] = {c: measured[s.label].get(c) for c in MEASURED}
        parts.update({c: qualitative[c][s.framework] / 5 for c in qualitative})
        score = sum(w * (parts[c] or 0.0) for c, w in norm.items())
        configs.append(ConfigScore(s.label, s.framework, score, parts))
    ranking = _framework_scores(configs, norm) if norm else []
    sensitivity = _sensitivity(configs, norm) if len(ranking) > 1 else []
    robust = all(r.winner_if_halved == ranking[0].framework == r.winner_if_doubled for r in sensitivity)
    where = f"{keys[0][0]}/{keys[0][1]}"
    decision = Decision(workload=keys[0][0], preset=keys[0][1], given=given, weights=norm, excluded=excluded,
                        configs=configs, ranking=ranking, unscored=unscored, winner=None, margin=None,
                        inconclusive=False, head_to_head={}, verdict="", sensitivity=sensitivity, robust=robust)

    if len(ranking) < 2:
        missing = [f"{FRAMEWORK_NAMES.get(fw, fw)} had no successful trial ({why})" for fw, why in unscored.items()]
        if not ranking and not missing:
            decision.verdict = f"no verdict on {where}: none of the weighted criteria was measured"
        elif not ranking:
            decision.verdict = f"no verdict on {where}: no trial succeeded; " + "; ".join(missing)
        elif missing:
            decision.verdict = f"no comparison possible on {where}: " + "; ".join(missing)
        else:
            best = next(s for s in scored if s.label == ranking[0].label)
            eps = f" ({fmt(best.examples_per_s.median)} examples/s)" if best.examples_per_s else ""
            decision.verdict = (f"no comparison possible on {where}: only {FRAMEWORK_NAMES.get(frameworks[0])} "
                                f"was run; its best mode is {best.execution}{eps}")
        return decision

    lead, runner = ranking[0], ranking[1]
    w_cfg = next(s for s in scored if s.label == lead.label)
    r_cfg = next(s for s in scored if s.label == runner.label)
    w_parts = next(c.parts for c in configs if c.label == lead.label)
    r_parts = next(c.parts for c in configs if c.label == runner.label)
    decision.margin = lead.score - runner.score
    decision.head_to_head = {c: _conclusive(c, w_cfg, r_cfg) for c in norm if c in MEASURED}
    # The lead counting only differences that are outside the noise (qualitative scores are the user's, not noisy).
    clean_lead = sum(w * ((w_parts[c] or 0.0) - (r_parts[c] or 0.0)) for c, w in norm.items()
                     if decision.head_to_head.get(c, "") != "inconclusive")
    if clean_lead <= 1e-9:
        decision.inconclusive = True
        noisy = "; ".join(f"{c} {fmt(q.median)} vs {fmt(r.median)}" if (q := w_cfg.get(MEASURED[c].quantity))
                          and (r := r_cfg.get(MEASURED[c].quantity)) else c
                          for c, v in decision.head_to_head.items() if v == "inconclusive")
        decision.verdict = (f"inconclusive on {where}: {display_name(lead.label)} leads {display_name(runner.label)} "
                            f"({lead.score:.2f} vs {runner.score:.2f}) only by differences within run-to-run noise "
                            f"({noisy})")
        return decision
    decision.winner = lead.framework
    phrases = _win_phrases(w_cfg, r_cfg, norm) or [f"scores {lead.score:.2f} vs {runner.score:.2f} for "
                                                   f"{display_name(runner.label)}"]
    decision.verdict = (f"{display_name(lead.label)} wins {where}: {' and '.join(phrases)}; "
                        f"{_robust_clause(sensitivity, lead.framework)}.")
    return decision


def decide_each(summaries: Sequence[ConfigSummary], weights: Mapping[str, float] | None = None,
                qualitative: Qualitative | None = None) -> dict[tuple[str, str], Decision]:
    """:func:`decide` for every (workload, preset) present, in sorted order."""
    keys = sorted({(s.workload, s.preset) for s in summaries})
    return {k: decide([s for s in summaries if (s.workload, s.preset) == k], weights, qualitative) for k in keys}
