"""From configuration summaries to a decision: criteria, weights, scores, a verdict in numbers, and its robustness.

Scoring, per (workload, preset):

* each measured criterion (:data:`~bakeoff.analysis.quantities.CRITERIA`) reads one quantity, normalised to [0, 1]
  against the best configuration (higher-is-better: ``v / best``; lower-is-better: ``best / v``, so a never-reached
  target scores 0);
* a qualitative criterion (team familiarity, ecosystem, ...) is the user's 0..5 score per framework, divided by 5;
* a configuration's score is the weighted mean of its criteria (weights normalised to sum 1);
* a framework is judged by its best configuration — the report still shows every mode.

The verdict, leader against runner-up:

* every measured criterion is a :class:`~bakeoff.analysis.bootstrap.Difference` — a ratio with a 95% interval —
  whose outcome is better or worse (the whole interval beyond ±5%), equal (wholly inside) or unsettled (neither, or
  one run a side); the verdict never gives an equal or unsettled criterion as a reason for a win, and says of each
  unsettled one what its runs could tell apart and what would settle it (:func:`resolved`);
* a winner is declared only when its lead survives with every criterion neither side is better on counted as no
  difference; otherwise "equal" (every interval inside ±5%: :attr:`Decision.tie`) or "unsettled";
* runs made with adaptive repeats (``--repeats auto``) read every interval at the level a group-sequential design
  allows at the look reached (:func:`look_confidence`), so stopping once a verdict looked settled does not make a
  false "wins" likelier;
* fewer than :data:`MIN_RUNS` runs on either side make it "provisional (n = ...)", never robust;
* robustness covers noise and weights together: :data:`~bakeoff.analysis.bootstrap.RESAMPLES` joint resamples of
  the measurements (the bootstrap replicates) and of the weights (each scaled by a log-uniform factor in [½, 2])
  give how often each framework leads; robust means ≥ :data:`ROBUST_SHARE` of them, no single weight halved or
  doubled flipping the leader (the sensitivity table), enough runs, and none of the compared runs measured on a busy
  machine (:func:`bakeoff.analysis.conditions.busy_runs`: their timings are suspect, so no share of draws over them
  is evidence; the verdict names them and ``bakeoff run --retry-busy``);
* the verdict names what was not like with like (:mod:`bakeoff.analysis.conditions`), what the compared trials
  differ in that should be equal — data, versions, settings (:mod:`bakeoff.analysis.mixing`) — and why a weighted
  criterion was left out; its wording is :mod:`bakeoff.analysis.verdict`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from bakeoff.analysis import intervals, verdict
from bakeoff.analysis.bootstrap import RESAMPLES, Difference, rng_for
from bakeoff.analysis.conditions import (
    FRAMEWORK_NAMES,
    busy_note,
    busy_runs,
    cores,
    declared_target_note,
    display_name,
    load_gap,
    mode_notes,
)
from bakeoff.analysis.decision import ConfigScore, Decision, FrameworkScore, Qualitative, SensitivityRow
from bakeoff.analysis.mixing import pair_note, section_mixes
from bakeoff.analysis.quantities import CRITERIA, Quantity, quantity
from bakeoff.analysis.stats import ConfigSummary, sections
from bakeoff.analysis.verdict import MIN_RUNS, ROBUST_SHARE, interval_text, ratio_text

__all__ = ["FRAMEWORK_NAMES", "MIN_RUNS", "ROBUST_SHARE", "Decision", "against", "decide", "decide_each",
           "default_weights", "display_name", "interval_text", "look_confidence", "ratio_text", "resolve_weights"]


def default_weights() -> dict[str, float]:
    """Every measured criterion's own weight (:attr:`~bakeoff.analysis.quantities.Criterion.weight`): energy weighs
    0 until the user sets it, and qualitative criteria weigh 0 until the user sets them."""
    return {c.name: c.weight for c in CRITERIA.values()}


MAX_UNFINISHED = 1 / 3
"""A configuration with more than this share of its runs failed, timed out or out of memory is never robust."""

MULTIPLIERS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0)
"""The grid on which sensitivity looks for the multiplier of one weight that changes the winner."""


def resolve_weights(weights: Mapping[str, float] | None, qualitative: Qualitative | None) -> dict[str, float]:
    """The user's weights merged over :func:`default_weights` (set a criterion to 0 to drop it); not normalised.

    Raises:
        ValueError: naming an unknown criterion and the accepted ones, a negative or non-finite weight, or all 0.
    """
    qualitative = qualitative or {}
    merged = {**default_weights(), **{c: 0.0 for c in qualitative}, **dict(weights or {})}
    accepted = [*CRITERIA, *qualitative]
    for name, w in merged.items():
        if name not in accepted:
            raise ValueError(f"unknown criterion {name!r} in weights; accepted: {', '.join(accepted)} "
                             "(qualitative criteria need scores per framework)")
        if not (isinstance(w, int | float) and math.isfinite(w) and w >= 0):
            raise ValueError(f"weight of {name!r} must be a finite number >= 0, got {w!r}")
    if sum(merged.values()) <= 0:
        raise ValueError("all weights are 0; give at least one criterion a positive weight")
    return merged


def normalise(values: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """Scale values (configurations along axis 0) to [0, 1] against the best; NaN scores 0, +inf (never) too."""
    v = np.asarray(values, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        if higher_is_better:
            best = np.nanmax(np.where(np.isnan(v), -np.inf, v), axis=0)
            out = np.where(best > 0, v / best, (v == best).astype(float))
        else:
            best = np.nanmin(np.where(np.isnan(v), np.inf, v), axis=0)
            out = np.where(v > 0, best / v, 1.0)
    return np.nan_to_num(np.where(np.isnan(v), 0.0, out), nan=0.0, posinf=1.0)


def _measured_parts(scored: Sequence[ConfigSummary]) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """Normalised part of every measured criterion for every configuration, and the criteria excluded (why)."""
    parts: dict[str, dict[str, float]] = {s.label: {} for s in scored}
    excluded: dict[str, str] = {}
    for c in CRITERIA.values():
        values = {s.label: s.value(c.quantity.name) for s in scored}
        lacking = [label for label, v in values.items() if v is None]
        why = {s.label: s.missing.get(c.quantity.name, "") for s in scored if s.label in lacking}
        if len(lacking) == len(values):
            reasons = set(why.values())
            excluded[c.name] = (next(iter(reasons)) if len(reasons) == 1 else
                                "not measured by any configuration: " + "; ".join(f"{k}: {v}" for k, v in why.items()))
            continue
        if lacking:
            excluded[c.name] = "not measured for " + "; ".join(f"{k}: {v}" if v else k for k, v in why.items())
            continue
        if c.quantity.censored and all(math.isinf(v) for v in values.values()):
            excluded[c.name] = "no configuration reached the target in more than half its runs"
            continue
        normed = normalise(c.quantity.floored(np.array(list(values.values()))), scored[0].higher(c.quantity.name))
        for label, p in zip(values, normed, strict=True):
            parts[label][c.name] = float(p)
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


def compare_runs(q: Quantity, a: tuple[float | None, tuple[np.ndarray, np.ndarray]],
                 b: tuple[float | None, tuple[np.ndarray, np.ndarray]], higher_is_better: bool,
                 confidence: float = intervals.CONFIDENCE, paired: bool = False) -> Difference:
    """``a`` against ``b`` on ``q``, each side its value and its runs with their bounds (:meth:`ConfigSummary.runs`,
    :func:`~bakeoff.analysis.stats.run_values`): :func:`bakeoff.analysis.intervals.compare` with values below the
    quantity's resolution counted as it, showing the measured values; ``paired`` when the runs are aligned by the
    repeat they were made in (:func:`aligned`)."""
    (va, (ra, ba)), (vb, (rb, bb)) = a, b
    d = intervals.compare(q.name, None if va is None else float(q.floored(va)),
                          None if vb is None else float(q.floored(vb)), q.floored(ra), q.floored(rb), ba, bb,
                          higher_is_better, confidence, paired=paired)
    return dataclasses.replace(d, a=va, b=vb)


Runs = tuple[np.ndarray, np.ndarray]


def aligned(q: Quantity, a: ConfigSummary, b: ConfigSummary) -> tuple[Runs, Runs, bool]:
    """``a``'s and ``b``'s runs on ``q`` (:meth:`ConfigSummary.runs`), and whether they pair up: when both sides
    have a run in the same repeats (each once, :data:`~bakeoff.analysis.intervals.MIN_PAIRS` at least), their runs
    in repeat order and ``True``, so that the comparison is over the pairs (what a repeat's load did to both sides
    cancels); else as they are and ``False`` (Welch's interval, unpaired: a failed run on one side, say)."""
    (ra, ba, ka), (rb, bb, kb) = a.runs_by_repeat(q.name), b.runs_by_repeat(q.name)
    if len(ka) < intervals.MIN_PAIRS or len(set(ka)) != len(ka) or set(ka) != set(kb) or len(kb) != len(ka):
        return (ra, ba), (rb, bb), False
    ia, ib = sorted(range(len(ka)), key=ka.__getitem__), sorted(range(len(kb)), key=kb.__getitem__)
    return (ra[ia], ba[ia]), (rb[ib], bb[ib]), True


def head_to_head(q: Quantity, a: ConfigSummary, b: ConfigSummary,
                  confidence: float = intervals.CONFIDENCE) -> Difference:
    """``a`` against ``b`` on ``q`` (:func:`compare_runs`, paired by repeat where the runs pair up:
    :func:`aligned`): the comparison every verdict rests on (the decision's head to head, a claim's, the card's,
    the mode table's)."""
    runs_a, runs_b, paired = aligned(q, a, b)
    return compare_runs(q, (a.value(q.name), runs_a), (b.value(q.name), runs_b), a.higher(q.name), confidence,
                        paired)


def look_confidence(level: float, a: ConfigSummary, b: ConfigSummary) -> float:
    """The confidence of an interval between ``a`` and ``b`` that must hold at ``level`` over every look their
    runs' adaptive run could take: the group-sequential level at the look reached (the most runs either side ran,
    :func:`bakeoff.analysis.intervals.sequential_confidence`), Bonferroni over the looks for runs recorded without
    their plan (:func:`~bakeoff.analysis.intervals.for_looks`), ``level`` for fixed repeats."""
    plans = [p for p in (a.plan, b.plan) if p is not None]
    if plans:
        first, most = max(plans, key=lambda p: (p[1], -p[0]))
        return intervals.sequential_confidence(level, first, most, max(a.n_total, b.n_total))
    return intervals.for_looks(level, max(a.looks, b.looks))


def resolved(d: Difference, q: Quantity, a: ConfigSummary, b: ConfigSummary) -> Difference:
    """``d`` (``a`` against ``b`` on ``q``) with what its runs could tell apart and what would settle it
    (:func:`bakeoff.analysis.intervals.resolution`) when it is unsettled with an interval; else ``d`` itself."""
    if d.outcome != "unsettled" or d.low is None or d.ratio is None:
        return d
    (ra, _), (rb, _), _ = aligned(q, a, b)
    return dataclasses.replace(d, resolution=intervals.resolution(q.floored(ra), q.floored(rb), observed=d.ratio,
                                                                  paired=d.pairs > 0))


def against(criterion: str, a: ConfigSummary, b: ConfigSummary) -> Difference:
    """``a`` against ``b`` on the measured ``criterion``, as a decision compares its leader with its runner-up (its
    interval at :func:`look_confidence`)."""
    return head_to_head(CRITERIA[criterion].quantity, a, b, look_confidence(intervals.CONFIDENCE, a, b))


def _ceiling_spread(c: ConfigSummary) -> tuple[float, float]:
    """(kept ceiling / the highest sample, kept ceiling / the lowest): how far the ceiling ``c``'s MFU was divided
    by may be from the true one, as its probe's own samples spread."""
    kept = [r.mfu for r in c.ok if r.mfu is not None and r.mfu.value is not None]
    peak = float(np.median([m.ceiling_flops_per_s for m in kept]))
    low = min(min(m.ceiling_range or [peak]) for m in kept)
    high = max(max(m.ceiling_range or [peak]) for m in kept)
    return peak / high, peak / low


def _mfu_difference(a: ConfigSummary, b: ConfigSummary) -> Difference:
    """``a`` against ``b`` on MFU, the interval widened by both ceilings' uncertainty: MFU is model FLOP/s over a
    ceiling measured with a spread (one probe's median ranged 118–190 GFLOP/s here), so the true ratio
    (ach_a / C_a) / (ach_b / C_b) lies anywhere the runs and the ceilings' sample ranges allow."""
    d = head_to_head(quantity("mfu"), a, b)
    if d.low is None or d.high is None:
        return d
    (a_low, a_high), (b_low, b_high) = _ceiling_spread(a), _ceiling_spread(b)
    low, high = d.low * a_low / b_high, d.high * a_high / b_low
    lo_band, hi_band = 1 / (1 + intervals.TIE_BAND), 1 + intervals.TIE_BAND
    larger = "a" if low > hi_band else "b" if high < lo_band else None
    return dataclasses.replace(d, low=low, high=high, better=larger,
                               equivalent=bool(lo_band <= low and high <= hi_band))


def _win_shares(scored: Sequence[ConfigSummary], weights: Mapping[str, float], qualitative: Qualitative,
                rng: np.random.Generator) -> dict[str, float]:
    """How often each framework leads when measurements and weights are redrawn together.

    Draw r takes a plausible value of every configuration on every measured criterion
    (:func:`bakeoff.analysis.intervals.draws`: its runs' geometric mean with Student-t noise of its standard
    error), scales each weight by its own log-uniform factor in [½, 2], renormalises, scores, and judges each
    framework by its best configuration, exactly as the point decision does. Frameworks level in a draw share it.
    """
    criteria = list(weights)
    parts = np.empty((len(criteria), len(scored), RESAMPLES))
    for k, c in enumerate(criteria):
        if c in CRITERIA:
            q = CRITERIA[c].quantity
            drawn = [intervals.draws(q.floored(runs), bounds, s.value(q.name), RESAMPLES, rng)
                     for s in scored for runs, bounds in [s.runs(q.name)]]
            parts[k] = normalise(q.floored(np.stack(drawn)), scored[0].higher(q.name))
        else:
            parts[k] = np.array([qualitative[c][s.framework] / 5 for s in scored])[:, None]
    factors = np.exp(rng.uniform(-math.log(2), math.log(2), size=(len(criteria), RESAMPLES)))
    w = np.array([weights[c] for c in criteria])[:, None] * factors  # (criteria, resamples)
    scores = np.einsum("kr,kcr->cr", w, parts) / w.sum(axis=0)  # (configurations, resamples)
    frameworks = sorted({s.framework for s in scored})
    best = np.stack([scores[[i for i, s in enumerate(scored) if s.framework == fw]].max(axis=0) for fw in frameworks])
    top = np.isclose(best, best.max(axis=0), rtol=0, atol=1e-12)  # (frameworks, resamples): level at the top
    shares = (top / top.sum(axis=0)).sum(axis=1) / RESAMPLES
    return {fw: float(v) for fw, v in zip(frameworks, shares, strict=True)}


def _clean_lead(weights: Mapping[str, float], h2h: Mapping[str, Difference], w_parts: Mapping[str, float | None],
                r_parts: Mapping[str, float | None]) -> float:
    """The leader's lead counting only differences outside the tie band (qualitative scores are the user's)."""
    return sum(w * ((w_parts[c] or 0.0) - (r_parts[c] or 0.0)) for c, w in weights.items()
               if c not in h2h or not h2h[c].tie)


def _weights_behind(weights: Mapping[str, float], h2h: Mapping[str, Difference], w: ConfigSummary,
                    r: ConfigSummary, qualitative: Qualitative) -> tuple[float, float]:
    """(the weight of the criteria the leader is surely better on, the weight of those not settled either way).

    Surely better: a measured difference outside the tie band in its favour, or a higher qualitative score. Not
    settled: a measured tie whose interval reaches outside the band (it could still go either way); a tie shown
    equal (its whole interval inside the band) is settled and weighs on neither side.
    """
    settled = unsettled = 0.0
    for c, weight in weights.items():
        if c in h2h:
            settled += weight * (h2h[c].better == "a")
            unsettled += weight * (h2h[c].tie and not h2h[c].equivalent)
        elif c in qualitative:
            settled += weight * (qualitative[c][w.framework] > qualitative[c][r.framework])
    return settled, unsettled


def _leads(weights: Mapping[str, float], h2h: Mapping[str, Difference], w_cfg: ConfigSummary,
           r_cfg: ConfigSummary, w_parts: Mapping[str, float | None], r_parts: Mapping[str, float | None],
           qualitative: Qualitative) -> bool:
    """Whether the leader wins on these differences: a lead outside the tie band, and the criteria it is surely
    better on weighing more than those not settled (with two criteria weighed alike, one shown better by chance
    cannot carry the verdict while the other is unsettled: measured, 6.7% false wins at 3 runs with one side at 1%
    noise and the other at 25%, against none of 300 with the strict rule)."""
    settled, unsettled = _weights_behind(weights, h2h, w_cfg, r_cfg, qualitative)
    return _clean_lead(weights, h2h, w_parts, r_parts) > 1e-9 and settled > unsettled


def _check_qualitative(qualitative: Qualitative, frameworks: Sequence[str]) -> None:
    """Every scored framework has a score 0..5 for each qualitative criterion; a :class:`ValueError` otherwise."""
    for criterion, scores in qualitative.items():
        for fw in frameworks:
            value = scores.get(fw)
            if value is None or not 0 <= value <= 5:
                raise ValueError(f"qualitative criterion {criterion!r} needs a score 0..5 for {fw!r}, got {value!r}")


def _score_configs(scored: Sequence[ConfigSummary], given: Mapping[str, float], qualitative: Qualitative
                   ) -> tuple[dict[str, str], dict[str, float], list[ConfigScore]]:
    """(criteria left out with why, the weights used normalised to sum 1, each configuration's score)."""
    measured, excluded = _measured_parts(scored)
    # a criterion given no weight is not left out of anything (energy, 0 by default, on a machine with no counters)
    excluded = {c: why for c, why in excluded.items() if given.get(c, 0) > 0}
    active = {c: w for c, w in given.items() if c not in excluded and w > 0}
    total = sum(active.values())
    norm = {c: w / total for c, w in active.items()} if total > 0 else {}
    configs = []
    for s in scored:
        parts: dict[str, float | None] = {c: measured[s.label].get(c) for c in CRITERIA}
        parts.update({c: qualitative[c][s.framework] / 5 for c in qualitative})
        score = sum(w * (parts[c] or 0.0) for c, w in norm.items())
        configs.append(ConfigScore(s.label, s.framework, score, parts))
    return excluded, norm, configs


def _judge_pair(decision: Decision, scored: Sequence[ConfigSummary], qualitative: Qualitative,
                key: tuple[str, str]) -> None:
    """The leader against the runner-up, into ``decision``: caveats, margin, the head-to-head at this look's level,
    the joint resampling's shares, the winner and whether it is robust (else inconclusive, or a tie), the verdict."""
    configs, norm, sensitivity = decision.configs, decision.weights, decision.sensitivity
    lead, runner = decision.ranking[0], decision.ranking[1]
    w_cfg = next(s for s in scored if s.label == lead.label)
    r_cfg = next(s for s in scored if s.label == runner.label)
    w_parts = next(c.parts for c in configs if c.label == lead.label)
    r_parts = next(c.parts for c in configs if c.label == runner.label)
    decision.mix_note = pair_note(w_cfg, r_cfg, decision.mixes)
    if (gap := load_gap(w_cfg, r_cfg, cores(scored))) is not None:
        decision.caveats.append(gap)
    decision.caveats += [note for c in (w_cfg, r_cfg) if (note := busy_note(c))]
    decision.caveats += [note for c in (w_cfg, r_cfg) if (note := verdict.unfinished_note(c))]
    if "time_to_target" in norm and (note := declared_target_note(w_cfg, r_cfg)):
        decision.caveats.append(note)
    decision.margin = lead.score - runner.score
    decision.runs = (w_cfg.n_ok, r_cfg.n_ok)
    decision.busy = (len(busy_runs(w_cfg)), len(busy_runs(r_cfg)))
    decision.provisional = min(decision.runs) < MIN_RUNS
    compared = [c for c in norm if c in CRITERIA]
    decision.looks = max(w_cfg.looks, r_cfg.looks)
    confidence = look_confidence(intervals.CONFIDENCE, w_cfg, r_cfg)
    if decision.looks > 1:
        decision.caveats.append(f"adaptive repeats (runs added while a verdict is unsettled, up to {decision.looks} "
                                f"looks): each interval is at {confidence * 100:.3g}%, not 95%"
                                + (", the level this look of a group-sequential design allows" if
                                   w_cfg.plan or r_cfg.plan else ""))
    decision.head_to_head = {c: resolved(head_to_head(CRITERIA[c].quantity, w_cfg, r_cfg, confidence),
                                         CRITERIA[c].quantity, w_cfg, r_cfg) for c in compared}
    decision.win_share = _win_shares(scored, norm, qualitative, rng_for(*key, "weights"))
    decision.resamples = RESAMPLES
    decision.settled_weight, decision.unsettled_weight = _weights_behind(norm, decision.head_to_head, w_cfg, r_cfg,
                                                                         qualitative)
    if _leads(norm, decision.head_to_head, w_cfg, r_cfg, w_parts, r_parts, qualitative):
        decision.winner = lead.framework
        robust_confidence = look_confidence(intervals.ROBUST_CONFIDENCE, w_cfg, r_cfg)
        strict = {c: head_to_head(CRITERIA[c].quantity, w_cfg, r_cfg, robust_confidence) for c in compared}
        decision.robust = (not decision.provisional and not any(decision.busy)
                           and decision.win_share[lead.framework] >= ROBUST_SHARE
                           and _leads(norm, strict, w_cfg, r_cfg, w_parts, r_parts, qualitative)
                           and all(len(c.unfinished) <= MAX_UNFINISHED * c.n_total for c in (w_cfg, r_cfg))
                           and all(r.winner_if_halved == lead.framework == r.winner_if_doubled for r in sensitivity))
    else:
        decision.inconclusive = True
        qualitative_differs = any(qualitative[c][w_cfg.framework] != qualitative[c][r_cfg.framework]
                                  for c in norm if c in qualitative)
        decision.tie = (bool(decision.head_to_head) and not qualitative_differs
                        and all(d.equivalent for d in decision.head_to_head.values()))
    decision.verdict = verdict.compose(decision, w_cfg, r_cfg, w_parts, r_parts, qualitative)
    decision.verdict += verdict.settle_sentence(decision, w_cfg)
    if not decision.provisional and w_cfg.value("mfu") is not None and r_cfg.value("mfu") is not None:
        decision.verdict += verdict.mfu_sentence(_mfu_difference(w_cfg, r_cfg), w_cfg, r_cfg)


def decide(summaries: Sequence[ConfigSummary], weights: Mapping[str, float] | None = None,
           qualitative: Qualitative | None = None) -> Decision:
    """Rank frameworks on one (workload, preset) and say why, in numbers with intervals.

    Args:
        summaries: :func:`bakeoff.analysis.stats.summarise_groups` output for a single (workload, preset).
        weights: criterion -> weight, merged over :func:`default_weights`; normalised to sum 1 over the criteria
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
    _check_qualitative(qualitative, frameworks)
    unscored = {fw: "; ".join(r for s in summaries if s.framework == fw for r in s.reasons) or "no trials"
                for fw in sorted({s.framework for s in summaries} - set(frameworks))}
    excluded, norm, configs = _score_configs(scored, given, qualitative)
    ranking = _framework_scores(configs, norm) if norm else []
    sensitivity = _sensitivity(configs, norm) if len(ranking) > 1 else []
    decision = Decision(
        workload=keys[0][0], preset=keys[0][1], given=given, weights=norm, excluded=excluded, configs=configs,
        ranking=ranking, unscored=unscored, winner=None, margin=None, inconclusive=False, tie=False,
        head_to_head={}, verdict="", sensitivity=sensitivity, robust=False,
        caveats=mode_notes(summaries, frameworks), budget_examples=next((s.budget_examples for s in scored), None),
        mixes=section_mixes(summaries))
    if len(ranking) < 2:
        decision.verdict = verdict.no_comparison(decision, scored, frameworks)
        return decision
    _judge_pair(decision, scored, qualitative, keys[0])
    return decision


def decide_each(summaries: Sequence[ConfigSummary], weights: Mapping[str, float] | None = None,
                qualitative: Qualitative | None = None) -> dict[tuple[str, str], Decision]:
    """:func:`decide` for every (workload, preset) section present, in reading order
    (:func:`~bakeoff.analysis.stats.section_order`)."""
    return {k: decide([s for s in summaries if (s.workload, s.preset) == k], weights, qualitative)
            for k in sections(summaries)}
