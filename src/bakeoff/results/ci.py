"""Machine-readable decisions and an opt-in exit code for continuous integration.

:func:`decisions_json` is what ``bakeoff report --format json`` writes: per (workload, preset), the verdict, the
winner, the framework ranking with scores, each configuration's criterion scores and the median with its 95%
bootstrap interval of every measured criterion, and the head-to-head ratios (leader against runner-up) with their
intervals and ``outcome`` (:attr:`~bakeoff.analysis.bootstrap.Difference.outcome`, the leader's side: better, worse,
equal or unsettled; ``resolution``, for an unsettled one, what its runs could tell apart and what would settle it).
The decision's own ``outcome`` is ``"winner"``, ``"equal"`` (every interval inside ±5%), ``"unsettled"`` or ``"no
comparison"``; the older ``tie`` keys stay for readers of earlier output (``tie`` on a criterion: neither better, so
equal *or* unsettled). ``runs`` and ``busy_runs`` are the leader's and the runner-up's successful runs and, of
those, the ones measured on a busy machine (:func:`bakeoff.analysis.conditions.busy_runs`; a decision with any is
never robust); each configuration carries its own ``runs_busy``. Strict JSON: a number that is not finite (a target
never reached, an unbounded interval) is ``null``.

:func:`slower_than` is ``--fail-if-slower-than NAME=RATIO``: NAME is a framework (judged by its fastest
configuration) or a configuration label (``torch/graph``). It fails when NAME's steady throughput is *surely* below
RATIO times that of the fastest configuration of the same workload and preset — the whole 95% interval of the ratio
NAME / fastest (the verdict's: Welch's over one value per run, :func:`bakeoff.analysis.decide.against`; none
with one run a side) lies below RATIO. A ratio whose interval reaches RATIO or above passes, and says so: noise alone
never fails a build. (The fastest configuration itself has ratio 1 and always passes.)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from bakeoff.analysis.conditions import busy_runs
from bakeoff.analysis.decide import Decision, against
from bakeoff.analysis.quantities import CRITERIA
from bakeoff.analysis.stats import ConfigSummary, sections
from bakeoff.core.spec import SpecError

FORMAT = "bakeoff.decisions/1"
THROUGHPUT = "examples_per_s"


def _clean(value: Any) -> Any:
    """JSON-ready: non-finite floats as None, tuples as lists, nested."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _configuration(s: ConfigSummary, decision: Decision) -> dict[str, Any]:
    score = next((c for c in decision.configs if c.label == s.label), None)
    quantities = {}
    for c in CRITERIA.values():
        value = s.value(c.quantity.name)
        low, high = s.interval(c.quantity.name) or (None, None)
        quantities[c.quantity.name] = {"median": value, "low": low, "high": high, "unit": c.quantity.unit}
    return {"label": s.label, "framework": s.framework, "execution": s.execution, "runs_ok": s.n_ok,
            "runs": s.n_total, "runs_busy": len(busy_runs(s)), "statuses": s.statuses, "reasons": s.reasons,
            "score": score.score if score else None, "criteria": score.parts if score else {},
            "quantities": quantities}


def decision_outcome(decision: Decision) -> str:
    """What a decision shows: ``"winner"`` (a winner, provisional or not), ``"equal"`` (every weighted interval wholly
    inside the tie band), ``"unsettled"`` (neither) or ``"no comparison"`` (fewer than two frameworks scored)."""
    if decision.winner is not None:
        return "winner"
    if len(decision.ranking) < 2:
        return "no comparison"
    return "equal" if decision.tie else "unsettled"


def decision_dict(decision: Decision, summaries: Sequence[ConfigSummary]) -> dict[str, Any]:
    """One (workload, preset)'s decision as JSON-ready data (see the module docstring)."""
    mine = [s for s in summaries if (s.workload, s.preset) == (decision.workload, decision.preset)]
    return _clean({
        "workload": decision.workload, "preset": decision.preset, "verdict": decision.verdict,
        "outcome": decision_outcome(decision), "winner": decision.winner, "tie": decision.tie,
        "inconclusive": decision.inconclusive,
        "provisional": decision.provisional, "robust": decision.robust, "margin": decision.margin,
        "runs": decision.runs, "busy_runs": decision.busy, "weights": decision.weights, "excluded": decision.excluded,
        "ranking": [dataclasses.asdict(r) for r in decision.ranking], "unscored": decision.unscored,
        "win_share": decision.win_share, "caveats": decision.caveats,
        "head_to_head": {c: {**dataclasses.asdict(d), "tie": d.tie, "outcome": d.outcome}
                         for c, d in decision.head_to_head.items()},
        "configurations": [_configuration(s, decision) for s in mine]})


def decisions_json(decisions: Mapping[tuple[str, str], Decision], summaries: Sequence[ConfigSummary],
                   **context: Any) -> dict[str, Any]:
    """Every decision, plus ``context`` (store, suite, bakeoff version) at the top level."""
    return {"format": FORMAT, **_clean(context),
            "decisions": [decision_dict(d, summaries) for d in decisions.values()]}


@dataclasses.dataclass(frozen=True)
class Check:
    """One ``--fail-if-slower-than`` check in one (workload, preset)."""

    workload: str
    preset: str
    name: str  # as given
    label: str  # the configuration checked
    fastest: str  # the fastest configuration's label
    threshold: float
    ratio: float | None
    low: float | None
    high: float | None

    @property
    def failed(self) -> bool:
        return self.high is not None and self.high < self.threshold

    def line(self) -> str:
        if self.ratio is None:
            return (f"{self.workload}/{self.preset}: {self.label} has no throughput to compare; "
                    f"not checked against {self.threshold:g}")
        ci = (f"95% CI {self.low:.2f}–{self.high:.2f}" if self.low is not None and self.high is not None
              else "one run a side: no interval")
        outcome = (f"FAIL: surely below {self.threshold:g}" if self.failed
                   else f"pass: not surely below {self.threshold:g}")
        return (f"{self.workload}/{self.preset}: {self.label} throughput is {self.ratio:.2f}x the fastest "
                f"({self.fastest}; {ci}) — {outcome}")


def parse_thresholds(items: Sequence[str]) -> dict[str, float]:
    """``["torch=0.9", "tensorflow/graph=0.8"]`` -> ``{"torch": 0.9, ...}``; raises :class:`SpecError`."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            ratio = float(value)
        except ValueError:
            ratio = math.nan
        if not sep or not name.strip() or not (math.isfinite(ratio) and ratio > 0):
            raise SpecError(f"--fail-if-slower-than must look like NAME=RATIO with NAME a framework or a "
                            f"configuration label and RATIO a number > 0 (e.g. torch=0.9), got {item!r}")
        out[name.strip()] = ratio
    return out


def slower_than(summaries: Sequence[ConfigSummary], thresholds: Mapping[str, float]) -> list[Check]:
    """Every check of ``thresholds`` (see the module docstring) in every (workload, preset) where NAME ran.

    Raises:
        SpecError: a NAME that matches no framework or configuration label, naming the ones there are.
    """
    checks = []
    known = sorted({s.framework for s in summaries} | {s.label for s in summaries})
    for name, threshold in thresholds.items():
        found = False
        for section in sections(summaries):
            measured = [s for s in summaries if (s.workload, s.preset) == section and s.value(THROUGHPUT) is not None]
            subjects = [s for s in measured if name in (s.label, s.framework)]
            if not subjects:
                continue
            found = True
            subject = max(subjects, key=lambda s: s.value(THROUGHPUT))
            fastest = max(measured, key=lambda s: s.value(THROUGHPUT))
            if subject is fastest:
                checks.append(Check(*section, name, subject.label, fastest.label, threshold, 1.0, 1.0, 1.0))
                continue
            d = against("throughput", subject, fastest)
            checks.append(Check(*section, name, subject.label, fastest.label, threshold, d.ratio, d.low, d.high))
        if not found:
            raise SpecError(f"--fail-if-slower-than {name}={threshold:g}: no configuration of {name!r} measured "
                            f"throughput; frameworks and configurations: {', '.join(known) or 'none'}")
    return checks
