"""Robust summaries of repeated measurements, honest pairwise comparisons, and per-configuration summaries.

Every statistic here is order-based (median, quartiles, Mann-Whitney U), because timing samples are skewed by
stragglers and a handful of repeats cannot support a normal model.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bakeoff.spec import RunSpec, Status, TrialResult

NOISY_THRESHOLD = 0.10
"""A sample whose relative spread exceeds this is flagged noisy."""

ALPHA = 0.05
"""Significance level of the Mann-Whitney test, used only when the sample sizes can reach it."""


@dataclasses.dataclass(frozen=True)
class Summary:
    """Order statistics of one quantity over repeated trials. ``values`` keeps every sample, sorted."""

    n: int
    median: float
    q1: float
    q3: float
    min: float
    max: float
    rel_spread: float  # IQR / median, or (max - min) / median when n < 4; 0 for n == 1
    noisy: bool  # rel_spread > NOISY_THRESHOLD
    values: tuple[float, ...]

    @property
    def interval(self) -> tuple[float, float]:
        """The range a comparison treats as "where the truth may be": q1–q3, or min–max when n < 4."""
        return (self.q1, self.q3) if self.n >= 4 else (self.min, self.max)


def _clean(values: Sequence[float | None]) -> list[float]:
    return sorted(float(v) for v in values if v is not None and not math.isnan(float(v)))


def summarise(values: Sequence[float | None]) -> Summary | None:
    """Summarise samples, ignoring ``None`` and NaN; ``None`` when nothing is left.

    Quartiles are numpy's linear interpolation. With fewer than four samples the quartiles say little, so the
    spread is the full range instead.
    """
    xs = _clean(values)
    if not xs:
        return None
    arr = np.asarray(xs)
    median = float(np.median(arr))
    q1, q3 = (float(q) for q in np.percentile(arr, [25, 75]))
    width = (q3 - q1) if len(xs) >= 4 else (xs[-1] - xs[0])
    if len(xs) == 1 or width == 0:
        rel = 0.0
    else:
        rel = width / abs(median) if median != 0 else math.inf
    return Summary(n=len(xs), median=median, q1=q1, q3=q3, min=xs[0], max=xs[-1], rel_spread=rel,
                   noisy=rel > NOISY_THRESHOLD, values=tuple(xs))


def _u_counts(n1: int, n2: int) -> list[int]:
    """Number of orderings of n1 + n2 distinct values giving each U (pairs where an ``a`` exceeds a ``b``)."""
    # prev[j][u]: orderings of (i - 1) a's and j b's with U == u. The largest value is either an a (beating all
    # j b's: U shifts by j) or a b (U unchanged).
    prev = [[1] for _ in range(n2 + 1)]
    for _ in range(n1):
        cur = [[1]]
        for j in range(1, n2 + 1):
            from_a, from_b = [0] * j + prev[j], cur[j - 1]
            size = max(len(from_a), len(from_b))
            from_a, from_b = from_a + [0] * (size - len(from_a)), from_b + [0] * (size - len(from_b))
            cur.append([x + y for x, y in zip(from_a, from_b, strict=True)])
        prev = cur
    return prev[n2]


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test: exact without ties, normal approximation with them."""
    n1, n2 = len(a), len(b)
    pooled = sorted(list(a) + list(b))
    first: dict[float, int] = {}
    for i, v in enumerate(pooled):
        first.setdefault(v, i)
    ties = Counter(pooled)
    rank = {v: first[v] + (ties[v] + 1) / 2 for v in ties}  # mid-rank, 1-based
    u1 = sum(rank[v] for v in a) - n1 * (n1 + 1) / 2
    if max(ties.values()) == 1 and n1 * n2 <= 2500:
        counts = _u_counts(n1, n2)
        tail = sum(counts[: int(math.floor(min(u1, n1 * n2 - u1))) + 1])
        return min(1.0, 2 * tail / math.comb(n1 + n2, n1))
    n = n1 + n2
    tie_term = sum(t**3 - t for t in ties.values()) / (n * (n - 1))
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term))
    if sigma == 0:
        return 1.0
    z = max(0.0, abs(u1 - n1 * n2 / 2) - 0.5) / sigma  # continuity-corrected
    return min(1.0, math.erfc(z / math.sqrt(2)))


@dataclasses.dataclass(frozen=True)
class Comparison:
    """The outcome of :func:`compare`. ``ratio`` is median(a) / median(b)."""

    a: Summary | None
    b: Summary | None
    ratio: float | None
    verdict: str  # "a faster" | "b faster" | "inconclusive"
    p_value: float | None
    reason: str

    @property
    def better(self) -> str | None:
        """``"a"``, ``"b"`` or ``None`` when inconclusive."""
        return {"a faster": "a", "b faster": "b"}.get(self.verdict)


def compare(a: Sequence[float], b: Sequence[float], *, higher_is_better: bool = False) -> Comparison:
    """Compare two samples (times by default; pass ``higher_is_better`` for throughputs), asv-style.

    The verdict is "inconclusive" — never a guess — when any of these holds, checked in order:

    1. either side has no values;
    2. either side is noisy (relative spread > ``NOISY_THRESHOLD``) with fewer than 3 samples;
    3. either side has a single sample (no spread is known) and the medians differ by ``NOISY_THRESHOLD`` or less;
    4. the intervals overlap (q1–q3, or min–max with fewer than 4 samples: see :attr:`Summary.interval`);
    5. the sample sizes let a two-sided Mann-Whitney test reach p < ``ALPHA`` (e.g. 4 vs 4, not 3 vs 3), and it
       does not.

    Otherwise the side with the better median wins: lower for times, higher with ``higher_is_better``.
    """
    sa, sb = summarise(a), summarise(b)
    ratio = None if sa is None or sb is None or sb.median == 0 else sa.median / sb.median

    def result(verdict: str, reason: str, p: float | None = None) -> Comparison:
        return Comparison(a=sa, b=sb, ratio=ratio, verdict=verdict, p_value=p, reason=reason)

    if sa is None or sb is None:
        return result("inconclusive", f"no values for {'a' if sa is None else 'b'}")
    if (sa.noisy and sa.n < 3) or (sb.noisy and sb.n < 3):
        return result("inconclusive", "a side is noisy with fewer than 3 samples")
    rel_diff = abs(sa.median - sb.median) / max(abs(sa.median), abs(sb.median), 1e-300)
    if min(sa.n, sb.n) < 2 and rel_diff <= NOISY_THRESHOLD:
        return result("inconclusive", f"a single sample cannot show a difference of {rel_diff:.0%}")
    (lo_a, hi_a), (lo_b, hi_b) = sa.interval, sb.interval
    if lo_a <= hi_b and lo_b <= hi_a:
        return result("inconclusive", "the ranges overlap")
    p = None
    if 2 / math.comb(sa.n + sb.n, sa.n) < ALPHA:
        p = mann_whitney_p(sa.values, sb.values)
        if p >= ALPHA:
            return result("inconclusive", f"Mann-Whitney p = {p:.3g} >= {ALPHA}", p)
    a_wins = (sa.median > sb.median) == higher_is_better
    return result("a faster" if a_wins else "b faster", "the ranges are disjoint", p)


def fmt(value: float | None, digits: int = 3) -> str:
    """A number for people: ``digits`` significant figures, thousands separated; "—" for missing."""
    if value is None or math.isnan(value):
        return "—"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if abs(value) >= 10**digits:
        return f"{value:,.0f}"
    return "0" if value == 0 else f"{value:.{digits}g}"


# ---------------------------------------------------------------------------------------------------------------
# Per-configuration summaries

QUANTITIES: dict[str, Callable[[TrialResult], Any]] = {
    "examples_per_s": lambda r: r.throughput.get("examples_per_s"),
    "tokens_per_s": lambda r: r.throughput.get("tokens_per_s"),
    "first_step_s": lambda r: r.first_step_s,
    "steady_step_s": lambda r: r.steady_step_s,
    "import_s": lambda r: r.import_s,
    "build_s": lambda r: r.build_s,
    "time_to_target_s": lambda r: r.time_to_target_s,  # only trials that reached the target have one
    "peak_memory_bytes": lambda r: r.peak_memory_bytes,
    "final_metric": lambda r: r.final_metric,
    "best_metric": lambda r: r.best_metric,
}
"""Every quantity a :class:`ConfigSummary` summarises, and how to read it from a trial."""

_STATUS_WORDS = {Status.FAILED: "failed", Status.TIMEOUT: "timed out", Status.OUT_OF_MEMORY: "ran out of memory",
                 Status.UNSUPPORTED: "unsupported"}


def short_reason(reason: str, limit: int = 160) -> str:
    """The informative line of a reason (a traceback's last line), capped at ``limit`` characters."""
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()]
    text = lines[-1] if lines else "no reason given"
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclasses.dataclass
class ConfigSummary:
    """Every repeat and seed of one configuration (workload, preset, :meth:`RunSpec.label`), summarised.

    A quantity is ``None`` when no successful trial measured it; :attr:`missing` then says why.
    """

    workload: str
    preset: str
    label: str
    framework: str
    execution: str
    n_ok: int
    n_total: int
    statuses: dict[str, int]
    reasons: list[str]  # "2 trials failed: <reason>", one line per distinct (status, reason)
    examples_per_s: Summary | None
    tokens_per_s: Summary | None
    first_step_s: Summary | None
    steady_step_s: Summary | None
    import_s: Summary | None
    build_s: Summary | None
    time_to_target_s: Summary | None  # over the trials that reached the target
    reached: int  # successful trials that reached the target
    peak_memory_bytes: Summary | None
    final_metric: Summary | None
    best_metric: Summary | None
    metric_name: str
    target: float | None
    higher_is_better: bool  # of the quality metric
    memory_kind: str
    missing: dict[str, str]  # quantity -> why it has no value
    trials: list[TrialResult]

    def get(self, quantity: str) -> Summary | None:
        if quantity not in QUANTITIES:
            raise KeyError(f"unknown quantity {quantity!r}; accepted: {', '.join(QUANTITIES)}")
        return getattr(self, quantity)


def _identity(spec: RunSpec) -> str:
    """What makes a configuration: the whole spec but its seed and repeat."""
    return json.dumps({k: v for k, v in spec.to_dict().items() if k not in ("seed", "repeat")}, sort_keys=True)


def _distinct_labels(specs: Sequence[RunSpec]) -> list[str]:
    """:meth:`RunSpec.label` of each spec, extended with ``field=value`` for the fields (and data options) that
    tell apart configurations sharing a label: ``torch/graph/batching=bucket``, ``torch/eager/batch_size=16``."""
    dicts = [{k: v for k, v in s.to_dict().items() if k not in ("seed", "repeat", "data")} for s in specs]
    data = [dict(s.data) for s in specs]
    fields = [k for k in dicts[0] if len({json.dumps(d[k]) for d in dicts}) > 1]
    options = sorted({k for d in data for k in d if len({d.get(k) for d in data}) > 1})
    labels = []
    for spec, d, opts in zip(specs, dicts, data, strict=True):
        extra = [f"{k}={d[k]}" for k in fields] + [f"{k}={opts.get(k, '(default)')}" for k in options]
        labels.append("/".join([spec.label(), *extra]))
    return labels


def group_results(results: Sequence[TrialResult]) -> dict[tuple[str, str, str], list[TrialResult]]:
    """Results keyed by (workload, preset, configuration label), so repeats and seeds share a group; sorted.

    A configuration is everything in the spec but seed and repeat; configurations that :meth:`RunSpec.label`
    alone cannot tell apart (two batch sizes, padded against bucketed batches) get the differences in the label.
    """
    by_identity: dict[str, list[TrialResult]] = {}
    for r in results:
        by_identity.setdefault(_identity(r.run_spec), []).append(r)
    by_label: dict[tuple[str, str, str], list[list[TrialResult]]] = {}
    for trials in by_identity.values():
        spec = trials[0].run_spec
        by_label.setdefault((spec.workload, spec.preset, spec.label()), []).append(trials)
    groups: dict[tuple[str, str, str], list[TrialResult]] = {}
    for (workload, preset, label), clashing in by_label.items():
        labels = _distinct_labels([t[0].run_spec for t in clashing]) if len(clashing) > 1 else [label]
        for name, trials in zip(labels, clashing, strict=True):
            groups[(workload, preset, name)] = trials
    return dict(sorted(groups.items()))


def _failure_lines(trials: Sequence[TrialResult]) -> list[str]:
    counts = Counter((r.status, short_reason(r.reason)) for r in trials if r.status is not Status.OK)
    return [f"{k} trial{'s' if k > 1 else ''} {_STATUS_WORDS.get(status, status.value)}: {reason}"
            for (status, reason), k in counts.items()]


def _summarise_group(key: tuple[str, str, str], trials: list[TrialResult]) -> ConfigSummary:
    ok = [r for r in trials if r.status is Status.OK]
    reasons = _failure_lines(trials)
    summaries = {q: summarise([get(r) for r in ok]) for q, get in QUANTITIES.items()}
    reached = sum(r.time_to_target_s is not None for r in ok)
    first = (ok or trials)[0]
    target = next((r.target for r in ok if r.target is not None), None)
    missing: dict[str, str] = {}
    for q, s in summaries.items():
        if s is not None:
            continue
        if not ok:
            missing[q] = "not measured: " + "; ".join(reasons)
        elif q == "time_to_target_s":
            missing[q] = "no target set" if target is None else f"target not reached in {len(ok)}/{len(ok)} trials"
        else:
            missing[q] = f"not recorded by the {len(ok)} successful trial{'s' if len(ok) > 1 else ''}"
    spec = first.run_spec
    return ConfigSummary(
        workload=key[0], preset=key[1], label=key[2], framework=spec.framework.value,
        execution=spec.execution.value, n_ok=len(ok), n_total=len(trials),
        statuses=dict(Counter(r.status.value for r in trials)), reasons=reasons, reached=reached,
        metric_name=first.metric_name, target=target,
        higher_is_better=first.higher_is_better,
        memory_kind=first.memory_kind, missing=missing, trials=list(trials), **summaries)


def summarise_groups(results: Sequence[TrialResult]) -> list[ConfigSummary]:
    """One :class:`ConfigSummary` per (workload, preset, configuration), in :func:`group_results` order."""
    return [_summarise_group(key, trials) for key, trials in group_results(results).items()]
