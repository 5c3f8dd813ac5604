"""Bootstrap intervals over runs and over steady steps within each run, seeded so every report is reproducible.

The design, for one configuration with runs 1..n:

* its value is the median over its runs of each run's value (a never-reached target counting as +∞);
* one replicate draws n runs with replacement; for a step-based quantity (throughput, step time) it then redraws,
  for each run drawn, that run's steady steps with replacement, and recomputes the run's value from their median
  (a two-level, hierarchical bootstrap: run-to-run and step-to-step noise both show). A per-run quantity (first
  step, memory, time to target, quality) is resampled over runs only;
* the median of a resample of m steps is drawn from its exact distribution (the order statistics of a bootstrap
  sample, :func:`resampled_medians`), not by drawing m steps: O(m) once per run, O(1) per replicate;
* the two sides of a comparison are resampled independently, and the interval of the ratio a / b is the percentile
  interval of the ratio of their replicates (scipy's ``method="percentile"``; it respects the ratio's asymmetry).

A ratio is a **tie** when its interval reaches into the band [1 / (1 + TIE_BAND), 1 + TIE_BAND]: 5% either way
is below what a framework choice turns on, and within the run-to-run drift of a shared machine (thermal state,
other processes, the 1-minute load) — a difference has to be larger than that, and surely so, to count.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
import zlib
from collections.abc import Sequence

import numpy as np

from bakeoff.analysis.quantities import Quantity, steady_steps
from bakeoff.core.result import TrialResult

RESAMPLES = 2000
"""Bootstrap replicates per configuration (and joint resamples of the win probability)."""

CONFIDENCE = 0.95
TIE_BAND = 0.05
"""Ratios within [1/1.05, 1.05] are no practical difference (see the module docstring)."""

SEED = 20240607

OUTCOMES = ("better", "worse", "equal", "unsettled")
"""What a comparison can show (:attr:`Difference.outcome`): the only words a report, card or JSON uses for one."""


def rng_for(*names: str) -> np.random.Generator:
    """A generator seeded from :data:`SEED` and ``names``: the same inputs always draw the same replicates, and one
    configuration's replicates do not change when another configuration is added to the report."""
    return np.random.default_rng([SEED, zlib.crc32("\0".join(names).encode())])


def percentile_interval(replicates: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The central ``confidence`` interval of the replicates (NaN ignored; +∞ allowed: never reached)."""
    x = np.asarray(replicates, dtype=float)
    x = x[~np.isnan(x)]
    if not x.size:
        return math.nan, math.nan
    tail = (1 - confidence) / 2
    out = []
    for q in (tail, 1 - tail):
        with np.errstate(invalid="ignore"):  # ∞ - ∞ between two infinities
            v = float(np.quantile(x, q))
        if math.isnan(v):  # interpolating between two infinities: take the order statistic itself
            v = float(np.quantile(x, q, method="inverted_cdf"))
        out.append(v)
    return out[0], out[1]


def bootstrap_medians(values: Sequence[float], resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of ``resamples`` resamples of ``values`` (each of their size, with replacement): one level."""
    v = np.asarray(values, dtype=float)
    return np.median(v[rng.integers(len(v), size=(resamples, len(v)))], axis=1)


def resampled_medians(samples: Sequence[float], size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` draws of the median of a bootstrap resample of ``samples``, from its exact distribution.

    With the samples sorted, x₁..xₘ, let C(j) be how many of the m draws land at or below xⱼ: Binomial(m, j/m).
    The k-th smallest draw is xⱼ for the first j with C(j) >= k, so P(X*₍ₖ₎ <= xⱼ) = P(Binomial(m, j/m) >= k)
    = I_{j/m}(k, m - k + 1) (the regularised incomplete beta), which one uniform per draw inverts. An odd m's median
    is that order statistic with k = (m + 1) / 2. An even m's averages k = m / 2 and the next: given the k-th is
    xⱼ, the next is xⱼ too unless exactly k draws landed at or below it — probability
    P(C(j) = k) · (1 - ((j - 1) / j)^k) / P(X*₍ₖ₎ = xⱼ) — and then it is the smallest of the other m - k draws,
    uniform over x_{j+1}..xₘ. Sample positions are told apart, so tied values need no care.
    """
    from scipy.special import betainc, gammaln  # scipy.special takes a while to import; only a report needs it

    x = np.sort(np.asarray(samples, dtype=float))
    m = len(x)
    k = (m + 1) // 2
    j = np.arange(1, m + 1)
    cdf = betainc(k, m - k + 1, j / m)  # P(X*_(k) <= x_j)
    lower = np.minimum(np.searchsorted(cdf, rng.random(size), side="left"), m - 1)  # 0-based index of X*_(k)
    if m % 2:
        return x[lower]
    jj = lower + 1.0  # 1-based
    with np.errstate(divide="ignore", invalid="ignore"):
        log_pmf = (gammaln(m + 1) - gammaln(k + 1) - gammaln(m - k + 1) + k * np.log(jj / m)
                   + (m - k) * np.log1p(-jj / m))  # P(C(j) = k); -inf at j = m
        at_j = cdf[lower] - np.where(lower > 0, cdf[np.maximum(lower - 1, 0)], 0.0)  # P(X*_(k) = x_j)
        exactly_k = np.clip(np.exp(log_pmf) * (1 - ((jj - 1) / jj) ** k) / at_j, 0.0, 1.0)
    exactly_k = np.nan_to_num(exactly_k, nan=0.0)
    rest = m - jj  # positions above x_j; the smallest of m - k uniform draws over them
    step = np.floor(rest * (1 - rng.random(size) ** (1 / (m - k)))) + 1
    upper = np.where(rng.random(size) < exactly_k, np.minimum(lower + step, m - 1), lower).astype(int)
    return (x[lower] + x[upper]) / 2


class Resampler:
    """Bootstrap replicates of one configuration's quantities, from its successful runs.

    The runs drawn are shared by every quantity (so a replicate is one consistent re-run of the configuration),
    and so are the resampled step medians of the step-based quantities.
    """

    def __init__(self, trials: Sequence[TrialResult], rng: np.random.Generator, resamples: int = RESAMPLES) -> None:
        self.trials = list(trials)
        self.resamples = resamples
        self._rng = rng
        self._idx = rng.integers(len(self.trials), size=(resamples, len(self.trials))) if self.trials else None
        self._medians: np.ndarray | None = None

    def _step_medians(self) -> np.ndarray:
        """(resamples, n) median steady step of each run drawn (the mean, for a trial whose steady step is the mean:
        asynchronous training); NaN for runs without steady steps."""
        if self._medians is None:
            assert self._idx is not None
            medians = np.full(self._idx.shape, np.nan)
            for i, trial in enumerate(self.trials):
                steps, drawn = steady_steps(trial), self._idx == i
                if not (steps.size and drawn.any()):
                    continue
                if trial.training.steady_statistic == "mean":  # asynchronous: its steady step is the mean
                    picks = self._rng.integers(steps.size, size=(int(drawn.sum()), steps.size))
                    medians[drawn] = steps[picks].mean(axis=1)
                else:
                    medians[drawn] = resampled_medians(steps, int(drawn.sum()), self._rng)
            self._medians = medians
        return self._medians

    def replicates(self, q: Quantity, budget: float | None = None) -> np.ndarray:
        """(resamples,) replicates of the configuration's value of ``q``: NaN where no run drawn measured it."""
        if self._idx is None:
            return np.full(self.resamples, np.nan)
        values = np.array([np.nan if (v := q.value(t, budget)) is None else v for t in self.trials])
        drawn = values[self._idx]  # (resamples, n)
        if q.steps is not None:
            medians = self._step_medians()
            for i, trial in enumerate(self.trials):
                mask = (self._idx == i) & ~np.isnan(medians)
                if math.isfinite(values[i]) and mask.any():
                    drawn[mask] = q.steps(trial, medians[mask])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: nothing measured, NaN it stays
            return np.nanmedian(drawn, axis=1)


def ratio(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    """a / b, elementwise; equal values (both never reached: ∞ / ∞, or 0 / 0) give 1."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a == b, 1.0, a / b)


@dataclasses.dataclass(frozen=True)
class Resolution:
    """What a comparison's runs could tell apart, and what would settle it (:func:`bakeoff.analysis.intervals.
    resolution`): at their run-to-run ``noise`` (the standard deviation of a run's log value, both sides pooled:
    0.09 reads "9%"), ``runs`` a side settle as better, 4 times in 5, a true ratio beyond ``detectable`` (≥ 1,
    either way, its distance from the band's centre); about ``settle_runs`` a side (``None``: more than
    :data:`SETTLE_RUNS_MAX`) would settle the ratio measured, ``settles`` (a / b, as shown) — as a difference when
    it lies beyond the tie band (``aim`` ``"better"``), as equal when inside it (``"equal"``) — if it is the true
    one. ``paired``: computed on the pairs' log differences (runs made in the same repeat), ``noise`` each side's
    net of what a repeat shares."""

    runs: tuple[int, int]
    noise: float
    detectable: float
    settles: float
    aim: str  # "better" | "equal"
    settle_runs: int | None
    paired: bool = False


SETTLE_RUNS_MAX = 100
"""Beyond this many runs a side, what would settle a comparison is given as "more than 100"."""


@dataclasses.dataclass(frozen=True)
class Difference:
    """Configuration ``a`` against ``b`` on one quantity: their values, the ratio a / b and its interval.

    ``better`` is ``"a"`` or ``"b"`` when the whole interval lies beyond the tie band on that side, ``None`` for a
    tie; ``equivalent`` when the whole interval lies inside the band (a tie shown, not just a tie not excluded).
    """

    quantity: str
    a: float | None
    b: float | None
    ratio: float | None
    low: float | None
    high: float | None
    better: str | None
    equivalent: bool
    confidence: float = 0.95  # of the interval
    resolution: Resolution | None = None  # what the runs could tell apart (2 finite runs a side at least)
    pairs: int = 0  # the interval is over this many pairs of runs made in the same repeat; 0: Welch's, unpaired

    @property
    def tie(self) -> bool:
        """Not shown better either way: ``equal`` or ``unsettled`` (:attr:`outcome`)."""
        return self.better is None

    @property
    def outcome(self) -> str:
        """What the comparison shows, from ``a``'s side, in one of :data:`OUTCOMES`: ``"better"`` / ``"worse"`` when
        the whole interval lies beyond the tie band, ``"equal"`` when it lies wholly inside it (an equivalence test),
        ``"unsettled"`` otherwise — and whenever there is no interval (one run a side), whatever the point ratio."""
        if self.low is None or self.high is None:
            return "unsettled"
        if self.equivalent:
            return "equal"
        return {"a": "better", "b": "worse"}.get(self.better or "", "unsettled")

    def swapped(self) -> Difference:
        """The same difference seen from ``b``."""
        def inv(v: float | None) -> float | None:
            return None if v is None else float(ratio(1.0, v))

        resolution = (None if self.resolution is None else
                      dataclasses.replace(self.resolution, runs=self.resolution.runs[::-1]))
        return Difference(self.quantity, self.b, self.a, inv(self.ratio), inv(self.high), inv(self.low),
                          {"a": "b", "b": "a"}.get(self.better or ""), self.equivalent, self.confidence, resolution,
                          self.pairs)


def difference(name: str, a: float | None, b: float | None, a_reps: np.ndarray, b_reps: np.ndarray,
               higher_is_better: bool, band: float = TIE_BAND) -> Difference:
    """Compare two values with their bootstrap replicates: the ratio a / b, its interval, and who is better."""
    if a is None or b is None:
        return Difference(name, a, b, None, None, None, None, False)
    low, high = percentile_interval(ratio(a_reps, b_reps))
    lo_band, hi_band = 1 / (1 + band), 1 + band
    larger = "a" if low > hi_band else "b" if high < lo_band else None
    better = larger if higher_is_better or larger is None else {"a": "b", "b": "a"}[larger]
    return Difference(name, a, b, float(ratio(a, b)), low, high, better,
                      equivalent=bool(lo_band <= low and high <= hi_band))
