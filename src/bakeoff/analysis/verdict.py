"""The words of a verdict: every number with its unit, every ratio with its interval, nothing equal or unsettled given
as a reason for a win.

A winner's verdict names what the leader is better on (most weighty first, at most three), what the runner-up is
better on (at most two), its robustness (never robust on runs measured on a busy machine: it names them, § and
``bakeoff run --retry-busy``), the weighted criteria it had to leave out and why, and the caveats of
:mod:`bakeoff.analysis.conditions`. Below :data:`MIN_RUNS` runs per side it opens with "provisional (n = ...)" and
says "leads", never "wins" or "robust". A verdict with every interval inside ±5% says "equal on ..."; one with no
winner otherwise says "unsettled on ...", cites the unsettled differences, what the runner-up is clearly better on,
and names (without numbers) the criteria on which the two are equal. Each comparison's own words are
:attr:`~bakeoff.analysis.bootstrap.Difference.outcome` (better, worse, equal, unsettled), never "tie". When the two
compared configurations differ in data, bakeoff version or a setting that should be equal, the workload is
followed by what differs: "text_classifier/tiny (compares different data sets: train 1a2b3c4d vs 9f8e7d6c)".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from bakeoff.analysis.bootstrap import RESAMPLES, SETTLE_RUNS_MAX, TIE_BAND, Difference
from bakeoff.analysis.conditions import FRAMEWORK_NAMES, busy_clause, busy_note, display_name
from bakeoff.analysis.decision import Decision, Qualitative
from bakeoff.analysis.quantities import Quantity, fmt, quantity
from bakeoff.analysis.stats import ConfigSummary

MIN_RUNS = 3
"""Runs per side below which a verdict is provisional."""

ONE_RUN_NULL_LEADS = ("two equal frameworks measured once each show a lead like this in about 1 of 5 simulated "
                      "bake-offs at 5% run-to-run noise, 2 of 3 at 25%")
"""What a one-run lead is worth, measured by :mod:`bakeoff.analysis.calibration` (``tests/test_calibration.py``
checks the figures)."""

ROBUST_SHARE = 0.95
"""The share of joint resamples the leader must lead in for the verdict to be called robust."""


def ratio_text(ratio: float | None, unit: str = "x") -> str:
    """``"1.83x"``, ``"12.8x"``, ``"0.088x"``, ``"∞x"``; "—" for none."""
    if ratio is None or math.isnan(ratio):
        return "—"
    if math.isinf(ratio) or ratio >= 10 or ratio < 0.1:
        return fmt(ratio, 2 if ratio < 0.1 else 3) + unit
    return f"{ratio:.2f}{unit}"


def interval_text(low: float | None, high: float | None, confidence: float = 0.95) -> str:
    """``"95% CI 1.76–1.89x"`` (``"98.8% CI …"`` for a wider one)."""
    return f"{confidence * 100:.3g}% CI {ratio_text(low, '')}–{ratio_text(high)}"


def outcome_text(d: Difference) -> str:
    """A comparison in its outcome's words, ``a``'s side: ``"better 1.83x (1.76–1.89x)"``, ``"equal 1.01x
    (0.98–1.03x)"``, ``"unsettled 1.50x (1.02–2.24x)"``; ``"unsettled 1.50x (one run a side: no interval)"``;
    ``"—"`` when a side was not measured. Never "tie": equal is shown, unsettled is not known."""
    if d.ratio is None:
        return "—"
    if d.low is None or d.high is None:
        return f"{d.outcome} {ratio_text(d.ratio)} (one run a side: no interval)"
    return f"{d.outcome} {ratio_text(d.ratio)} ({ratio_text(d.low, '')}–{ratio_text(d.high)})"


def _shown(q: Quantity, v: float | None) -> str:
    if v is None:
        return "—"
    return "never" if math.isinf(v) else fmt(v * q.scale)


def _pair(q: Quantity, a: float | None, b: float | None) -> str:
    """``"950 vs 520 examples/s"``; ``"2.1 s vs never"`` when one side never got there."""
    unit = f" {q.display_unit}" if q.display_unit else ""
    if a is not None and b is not None and math.isfinite(a) and math.isfinite(b):
        return f"{_shown(q, a)} vs {_shown(q, b)}{unit}"

    def one(v: float | None) -> str:
        return _shown(q, v) + (unit if v is not None and math.isfinite(v) else "")

    return f"{one(a)} vs {one(b)}"


def difference_phrase(d: Difference, a: ConfigSummary, b: ConfigSummary) -> str:
    """``"steady throughput: 950 vs 520 examples/s (1.83x, 95% CI 1.76–1.89x)"``, a's side first; for a censored
    quantity, the runs that got there (and no ratio when a side never did: its interval still shows)."""
    q = quantity(d.quantity)
    reach = (f"reached in {a.reached}/{_counted(a)} vs {b.reached}/{_counted(b)} runs" if q.censored else "")
    ci = (interval_text(d.low, d.high, d.confidence) if d.low is not None and d.high is not None
          else "one run a side: no interval")
    if d.a is not None and d.b is not None and (math.isinf(d.a) or math.isinf(d.b)):
        return f"{a.title(q.name)}: {_pair(q, d.a, d.b)} ({reach}; ratio {ci})"
    return f"{a.title(q.name)}: {_pair(q, d.a, d.b)} ({ratio_text(d.ratio)}, {ci}{', ' + reach if reach else ''})"


def _counted(c: ConfigSummary) -> int:
    """The runs a censored quantity counts: the successful ones and those that did not finish (never)."""
    return c.n_ok + (len(c.unfinished) if c.target is not None else 0)


def unfinished_note(c: ConfigSummary) -> str | None:
    """``"TensorFlow (graph): 7 of 10 runs timed out"``, or ``None`` when every run finished."""
    counts: dict[str, int] = {}
    for r in c.unfinished:
        word = {"timeout": "timed out", "out_of_memory": "ran out of memory"}.get(r.status.value, r.status.value)
        counts[word] = counts.get(word, 0) + 1
    if not counts:
        return None
    return f"{display_name(c.label)}: " + ", ".join(f"{k} of {c.n_total} runs {w}" for w, k in counts.items())


def percent(share: float) -> str:
    pct = 100 * share
    if 99 < pct < 100:  # never rounded up to a certainty it is not
        return f"{math.floor(pct * 10) / 10:.1f}%"
    return f"{max(pct, 0.1):.1f}%" if 0 < pct < 1 else f"{pct:.0f}%"


def _runs(runs: tuple[int, int]) -> str:
    return f"n = {runs[0]} per side" if runs[0] == runs[1] else f"n = {runs[0]} vs {runs[1]}"


def _robust_clause(decision: Decision, leader: str, busy: str | None = None) -> str:
    """Whether the win is robust, and why not; ``busy``: :func:`~bakeoff.analysis.conditions.busy_clause` of the
    compared sides (a win resting on a busy run is never robust, whatever its draws)."""
    share = decision.win_share.get(leader, 0.0)
    others = [f"{FRAMEWORK_NAMES.get(fw, fw)} {percent(s)}" for fw, s in decision.win_share.items()
              if fw != leader and s > 0]
    joint = (f"it leads in {percent(share)}" + (f" ({', '.join(others)})" if others else "")
             + f" of {RESAMPLES:,} draws of measurements and weights, each weight ×½–2")
    flip = ""
    for row in sorted(decision.sensitivity, key=lambda r: abs(math.log(r.flips_at)) if r.flips_at else math.inf):
        for word, who in (("halved", row.winner_if_halved), ("doubled", row.winner_if_doubled)):
            if who != leader and not flip:
                flip = f"{FRAMEWORK_NAMES.get(who or '', who)} wins if the {row.criterion} weight is {word}"
    if decision.provisional:
        assert decision.runs is not None
        if min(decision.runs) < 2:  # one run: no spread, so no share of resamples worth a number
            return (f"not robust with {_runs(decision.runs)} ({MIN_RUNS} runs per side needed; one run has no "
                    f"spread, and {ONE_RUN_NULL_LEADS})")
        return f"not robust with {_runs(decision.runs)} ({MIN_RUNS} runs per side needed): {joint}"
    if busy:
        return f"not robust: {busy}; {joint}" + (f"; {flip}" if flip else "")
    if decision.robust:
        return f"robust: {joint}, and under every single weight halved or doubled"
    return f"not robust: {joint}" + (f"; {flip}" if flip else "")


def resolution_text(d: Difference) -> str:
    """What an unsettled comparison's runs could tell apart and what would settle it: ``"3 runs a side at 9%
    run-to-run noise tell apart, 4 times in 5, only differences beyond 1.37x either way; about 17 runs a side would
    settle the 0.87x measured, if it is real"``; ``""`` without a :class:`~bakeoff.analysis.bootstrap.Resolution`."""
    r = d.resolution
    if r is None:
        return ""
    runs = f"{r.runs[0]} runs a side" if r.runs[0] == r.runs[1] else f"{r.runs[0]} and {r.runs[1]} runs"
    runs += ", in pairs," if r.paired else ""
    noise = "run-to-run noise beyond what a repeat shares" if r.paired else "run-to-run noise"
    could = (f"{runs} at {r.noise:.0%} {noise} tell apart, 4 times in 5, only differences beyond "
             f"{ratio_text(r.detectable)} either way")
    what = (f"settle the {ratio_text(r.settles)} measured, if it is real" if r.aim == "better" else
            f"show the two equal within ±{TIE_BAND:.0%}, if they are as close as the {ratio_text(r.settles)} measured")
    more = (f"about {r.settle_runs} runs a side would {what}" if r.settle_runs is not None else
            f"more than {SETTLE_RUNS_MAX} runs a side would be needed to {what}")
    return f"{could}; {more}"


def settle_sentence(d: Decision, w: ConfigSummary) -> str:
    """`` What would settle it: steady throughput — 3 runs a side at 9% …; first step — ….`` for every weighted
    measured criterion the leader and the runner-up are not shown better, worse or equal on; ``""`` when none is."""
    parts = [f"{w.title(x.quantity)} — {text}" for x in d.head_to_head.values()
             if x.outcome == "unsettled" and (text := resolution_text(x))]
    return f" What would settle it: {'; '.join(parts)}." if parts else ""


MFU_GAP = 1.25
"""How far apart two configurations' MFU must be (the larger over the smaller, and outside the tie test) for the
verdict to say so."""


def _ceiling_text(c: ConfigSummary) -> tuple[str, str]:
    """(``"fp32"``, ``"156 GFLOP/s"``): the precision and median ceiling ``c``'s trials were measured against."""
    kept = [r.mfu for r in c.ok if r.mfu is not None and r.mfu.value is not None]
    peak = sorted(m.ceiling_flops_per_s for m in kept)[len(kept) // 2]
    return kept[0].precision, f"{fmt(peak / 1e9)} GFLOP/s"


def mfu_sentence(d: Difference | None, w: ConfigSummary, r: ConfigSummary) -> str:
    """`` MFU: PyTorch (eager) runs at 31% of this CPU's fp32 matmul ceiling, TensorFlow (graph) at 48% (...).``
    when the two differ by :data:`MFU_GAP` or more, outside the tie test; else ``""``."""
    a, b = w.value("mfu"), r.value("mfu")
    if d is None or a is None or b is None or d.tie or max(a, b) < MFU_GAP * min(a, b):
        return ""
    kinds = {t.mfu.device_kind or "CPU" for c in (w, r) for t in c.ok if t.mfu is not None and t.mfu.value is not None}
    device = kinds.pop() if len(kinds) == 1 else "the device"
    (pw, cw), (pr, cr) = _ceiling_text(w), _ceiling_text(r)
    precision = pw if pw == pr else f"{pw} / {pr}"
    return (f" MFU: {display_name(w.label)} runs at {percent(a)} of this {device}'s {precision} matmul ceiling, "
            f"{display_name(r.label)} at {percent(b)} ({ratio_text(d.ratio)}, "
            f"{interval_text(d.low, d.high, d.confidence)}; "
            f"ceilings {cw} and {cr}, each framework's own on this machine, as `bakeoff env` shows).")


DEPLOY_PREFIX = "deploy_"
"""Criteria scored from measured deployments (:data:`bakeoff.report.deployment.CRITERIA`), passed to the decision
beside the qualitative scores."""

DECLARED = {"deploy_targets": "your needed targets, 5 = every one met"}
"""Criteria a team file declares (:mod:`bakeoff.predict.team`) whose figures a verdict would otherwise misname:
``deploy_targets`` is not a measured deployment figure (a team file's ``team_familiarity`` is "your score", as a
suite's bare one is)."""


def _lead_phrases(d: Decision, w: ConfigSummary, r: ConfigSummary, w_parts: Mapping[str, float | None],
                  r_parts: Mapping[str, float | None], qualitative: Qualitative) -> tuple[list[str], list[str]]:
    """What the leader is better on, and what the runner-up is better on, most weighty first (never an equal or
    unsettled criterion)."""
    def gain(c: str) -> float:
        return d.weights[c] * abs((w_parts.get(c) or 0.0) - (r_parts.get(c) or 0.0))

    ours, theirs = [], []
    for c in sorted(d.weights, key=gain, reverse=True):
        if c in d.head_to_head:
            diff = d.head_to_head[c]
            if diff.better == "a":
                ours.append(difference_phrase(diff, w, r))
            elif diff.better == "b":
                theirs.append(difference_phrase(diff.swapped(), r, w))
        elif c in qualitative:
            sw, sr = qualitative[c][w.framework], qualitative[c][r.framework]
            whose = DECLARED.get(c) or ("measured, 5 = the best" if c.startswith(DEPLOY_PREFIX) else "your score")
            if sw != sr:
                (ours if sw > sr else theirs).append(f"{c}: {sw:.2g} vs {sr:.2g} ({whose})" if sw > sr
                                                     else f"{c}: {sr:.2g} vs {sw:.2g} ({whose})")
    return ours, theirs


def _equal_list(d: Decision, w: ConfigSummary, r: ConfigSummary) -> str:
    return "; ".join(difference_phrase(diff, w, r) for diff in d.head_to_head.values() if diff.outcome == "equal")


def _not_better(d: Decision, w: ConfigSummary) -> str:
    """``"; equal within ±5% on memory; unsettled on first step"``: the weighted criteria neither side is better on,
    by name."""
    equal = [w.title(x.quantity) for x in d.head_to_head.values() if x.outcome == "equal"]
    unsettled = [w.title(x.quantity) for x in d.head_to_head.values() if x.tie and x.outcome == "unsettled"]
    return ((f"; equal within ±{TIE_BAND:.0%} on {', '.join(equal)}" if equal else "")
            + (f"; unsettled on {', '.join(unsettled)}" if unsettled else ""))


def _excluded(d: Decision) -> str:
    """``"; without throughput (no steady steps: ...)"``: the weighted criteria the decision had to leave out."""
    left_out = [f"{c} ({why})" for c, why in d.excluded.items() if d.given.get(c, 0) > 0]
    return f"; without {', '.join(left_out)}" if left_out else ""


def _inside_band(ratio: float | None) -> bool:
    return ratio is not None and 1 / (1 + TIE_BAND) <= ratio <= 1 + TIE_BAND


def _unsettled(d: Decision, w: ConfigSummary, r: ConfigSummary, where: str, n: str, caveats: str) -> str:
    """No winner and not equal: cites the unsettled differences whose medians differ by more than the tie band, and
    what the runner-up is clearly better on; names without numbers the criteria whose medians are within the band
    (equal, or unsettled: an interval too wide to tell), so that "0.0465 vs 0.0463" is never given as a reason."""
    lead, runner = display_name(w.label), display_name(r.label)
    diffs = d.head_to_head.values()
    unsettled = [x for x in diffs if x.tie and x.outcome == "unsettled"]
    noisy = [x for x in unsettled if not _inside_band(x.ratio)]
    ours = [difference_phrase(x, w, r) for x in noisy if ((x.ratio or 0) > 1) == w.higher(x.quantity)]
    theirs = [difference_phrase(x.swapped(), r, w) for x in noisy if ((x.ratio or 0) > 1) != w.higher(x.quantity)]
    mine = [difference_phrase(x, w, r) for x in diffs if x.better == "a"]
    clear = [difference_phrase(x.swapped(), r, w) for x in diffs if x.better == "b"]
    equal = [w.title(x.quantity) for x in diffs if x.outcome == "equal"]
    unclear = [w.title(x.quantity) for x in unsettled if _inside_band(x.ratio)]
    by = "unsettled differences" if noisy else f"differences within ±{TIE_BAND:.0%}"
    if mine:  # better on some criteria, which weigh no more than those still unsettled
        by = "criteria weighing no more than those still unsettled"
        ours = [f"better on {'; '.join(mine)}", *(["unsettled on " + "; ".join(ours)] if ours else [])]
    parts = ours + ([f"{runner} is better on {'; '.join(clear)}"] if clear else [])
    parts += [f"{runner} ahead, unsettled, on {'; '.join(theirs)}"] if theirs else []
    parts += [f"equal within ±{TIE_BAND:.0%} on {', '.join(equal)}"] if equal else []
    parts += [f"unsettled on {', '.join(unclear)}"] if unclear else []
    return (f"unsettled on {where}{n}: {lead} leads {runner} ({d.ranking[0].score:.2f} vs "
            f"{d.ranking[1].score:.2f}) only by {by} — {'; '.join(parts)}{_excluded(d)}{caveats}.")


def compose(d: Decision, w: ConfigSummary, r: ConfigSummary, w_parts: Mapping[str, float | None],
            r_parts: Mapping[str, float | None], qualitative: Qualitative) -> str:
    """The verdict of a decision between the leader's configuration ``w`` and the runner-up's ``r``."""
    where = f"{d.workload}/{d.preset}" + (f" ({d.mix_note})" if d.mix_note else "")
    lead, runner = display_name(w.label), display_name(r.label)
    caveats = "".join(f"; {c}" for c in d.caveats)
    n = f" ({_runs(d.runs)})" if d.provisional and d.runs else ""
    if d.winner is None:
        if d.tie:  # every interval wholly inside the band: shown equal
            return (f"equal on {where}{n}: {lead} and {runner} are within ±{TIE_BAND:.0%} of each other on every "
                    f"weighted criterion — {_equal_list(d, w, r)}{_excluded(d)}{caveats}.")
        return _unsettled(d, w, r, where, n, caveats)
    busy = None if d.provisional else busy_clause((w, r))
    if busy:  # named once, in the robust clause
        caveats = "".join(f"; {c}" for c in d.caveats if c not in (busy_note(w), busy_note(r)))
    ours, theirs = _lead_phrases(d, w, r, w_parts, r_parts, qualitative)
    reason = "; ".join(ours[:3]) or f"scores {d.ranking[0].score:.2f} vs {d.ranking[1].score:.2f}"
    on = "only on" if d.settled_weight < 0.5 * sum(d.weights.values()) else "on"  # it rests on less than half
    reason += _not_better(d, w)
    against = f"; {runner} is better on {'; '.join(theirs[:2])}" if theirs else ""
    opening = f"provisional{n}: {lead} leads" if d.provisional else f"{lead} wins"
    return (f"{opening} {where} over {runner} {on} {reason}{against}; {_robust_clause(d, w.framework, busy)}"
            f"{_excluded(d)}{caveats}.")


def no_comparison(d: Decision, scored: Sequence[ConfigSummary], frameworks: Sequence[str]) -> str:
    """The verdict when fewer than two frameworks have a score."""
    where = f"{d.workload}/{d.preset}"
    caveats = "".join(f"; {c}" for c in d.caveats)
    missing = [f"{FRAMEWORK_NAMES.get(fw, fw)} had no successful trial ({why})" for fw, why in d.unscored.items()]
    if not d.ranking and not missing:
        return f"no verdict on {where}: none of the weighted criteria was measured"
    if not d.ranking:
        return f"no verdict on {where}: no trial succeeded; " + "; ".join(missing)
    if missing:
        return f"no comparison possible on {where}: " + "; ".join(missing) + caveats
    best = next(s for s in scored if s.label == d.ranking[0].label)
    eps = best.value("examples_per_s")
    rate = f" ({fmt(eps)} examples/s)" if eps is not None else ""
    return (f"no comparison possible on {where}: only {FRAMEWORK_NAMES.get(frameworks[0])} was run; its best mode "
            f"is {best.execution}{rate}{caveats}")
