"""The ratio between two configurations, from their runs: a Welch t interval on log values, simultaneous over the
criteria a decision weighs.

Why this and not the bootstrap of :mod:`bakeoff.analysis.bootstrap`: a verdict rests on 3 to 5 runs a side. The
bootstrap median of 3 runs can only take the 3 observed values, so its "95%" interval is close to the range of the
runs and, measured by simulation (:mod:`bakeoff.analysis.calibration`), called 8–10% of equal pairs a win at 10%
noise, 21% when one side was much noisier than the other. Run-to-run timings are close to log-normal (a rate is
a product of many small slowdowns), so the log of each run's value is close to normal and Welch's t interval on
the difference of the two sides' mean logs, exponentiated, is an interval on the ratio of their geometric means
that is exact for normal logs at any n ≥ 2 and keeps its coverage when the two sides are unequally noisy. One
value per run is what enters: a run's steady throughput is its own median step, so steps that drift within a run
(AR(1) noise) move that run's value and show as run-to-run spread, instead of being resampled as independent.

**Several criteria.** A decision weighs several criteria, each of which could "win" by chance. The intervals are not
widened for that (a Bonferroni correction over 5 criteria cost half the power to see a 1.3x difference at 5%
noise); instead "wins" needs the criteria the leader is surely better on to weigh more than those not
settled either way (:func:`bakeoff.analysis.decide.decide`), so one criterion out of five landing outside the
band by chance cannot carry a verdict while a heavier one is unsettled, and "robust" needs the same at
:data:`ROBUST_CONFIDENCE`. The error rates this gives are measured, not assumed (``tests/test_calibration.py``).

**Adaptive repeats** (``--repeats auto``) look at the verdict after every added repeat and stop once it is
settled; stopping when a result looks good makes chance wins likelier (measured: false wins 3.0% -> 6.5% with up
to 10 runs at 25% noise). Runs made so record their plan (first and most runs a side), and a verdict over them
reads each interval at the confidence of a **group-sequential design** (:func:`sequential_confidence`): the error
rate is spent over the looks by Lan and DeMets' O'Brien–Fleming-type spending function, so the early looks, on
few runs, are strict and the last one is close to a fixed design's 95% (2.03 standard errors instead of 1.96 over
five equally spaced looks). Bonferroni over the looks (:func:`for_looks`, what older runs without a plan get)
spends the error rate evenly, so its last look, where most of the power is, paid as much as its first: a true
1.15x at 5% noise was called 31% of the time from 3 to 6 runs, against 61% for a fixed 6.

**Runs made in pairs.** Within each repeat the frameworks take turns (:mod:`bakeoff.plan.order`), so two
configurations' runs of one repeat were made minutes apart, on the machine as it was then. Where the load of a
shared machine drifts from repeat to repeat, that drift is noise to Welch's interval (which sees each side's runs
spread by it) but cancels in each pair's ratio. The verdict compares the pairs (:func:`paired_interval`: Student's
t on the pairs' log ratios, n - 1 degrees of freedom) where both sides have a run in the same repeats (3 at least,
none censored) and the repeats shared a slowdown beyond chance (:func:`blocked`: the pairs' log sums vary more than
their log differences, an F test at 1%); otherwise Welch's. Measured (``tests/test_calibration.py``): a true 1.15x
under 3% noise and 10% load drift, adaptive repeats, was called 68.5% of the time in 8.6 runs a side by Welch's
interval alone and 99.5% in 7.1 with pairs; on a quiet machine nothing changes (1.15x at 5%: 95.0%, 7.8 runs,
either way), because the test rarely picks the pairs there (1% of draws), where their fewer degrees of freedom
would cost power (paired always, from 4 pairs: 90.5%, 8.3 runs). Chosen by the test, at a true ratio on the band's
edge each interval is wholly beyond it at most the 2.5% it may be, at every load simulated.

**Censored runs** (time to target: a run that never reached the target, or did not finish): its value is at least
its training time (:attr:`~bakeoff.analysis.quantities.Quantity.bound`), or, with nothing recorded, at least the
slowest time either side reached. The interval computed from these bounds only holds one way: a side with
censored runs can be shown slower, never faster; the other end of the interval is open (0 or ∞). With censored
runs on both sides nothing is claimed: the interval is 0–∞.

Below 2 runs on either side there is no interval (``low`` and ``high`` are ``None``); the point ratio alone says
which side is ahead, for a verdict that can only be provisional.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from bakeoff.analysis.bootstrap import SETTLE_RUNS_MAX, TIE_BAND, Difference, Resolution, ratio

CONFIDENCE = 0.95
ROBUST_CONFIDENCE = 0.99
"""A robust verdict's lead must also hold with every interval at this confidence."""


def for_looks(confidence: float, looks: int) -> float:
    """The confidence of each look's intervals when a verdict may be read after any of ``looks`` looks at growing
    data (adaptive repeats: a run stops adding repeats once its verdict is settled) and still be wrong at most
    ``1 - confidence`` of the time: Bonferroni over the looks, which holds whatever the looks' dependence."""
    return 1 - (1 - confidence) / max(1, looks)


def spending_boundaries(alpha: float, fractions: Sequence[float], grid: int = 801) -> list[float]:
    """Two-sided z boundaries of a group-sequential test at information ``fractions`` (increasing, the last 1):
    Lan–DeMets' O'Brien–Fleming-type spending, ``alpha / 2`` a side spent as ``2 - 2 Φ(z_{1 - alpha/4} / √t)``.

    Look k's boundary b_k is such that a path of the standardised statistic that stayed inside every earlier
    boundary leaves through ±b_k with the probability spent between looks k - 1 and k. The paths' density is
    carried from look to look by numerical integration on a grid of the score (Armitage, McPherson and Rowe's
    recursion, as Jennison and Turnbull give it, chapter 19), the exit probability is in closed form given the
    previous look's score, and b_k is found by bisection.
    """
    from scipy.optimize import brentq
    from scipy.stats import norm

    t = np.asarray(fractions, dtype=float)
    if t.size == 0 or np.any(np.diff(t) <= 0) or t[0] <= 0 or not math.isclose(t[-1], 1.0):
        raise ValueError(f"information fractions must increase from above 0 to 1, got {list(fractions)}")
    z = float(norm.ppf(1 - alpha / 4))
    spent = 4 - 4 * norm.cdf(z / np.sqrt(t))  # cumulative, both sides
    spend = np.diff(np.concatenate([[0.0], spent]))
    bounds = [float(norm.isf(spend[0] / 2))]
    # density of the score S_1 = Z_1 √t_1 on the continuation region, on a grid
    c = bounds[0] * math.sqrt(t[0])
    x = np.linspace(-c, c, grid)
    f = norm.pdf(x, scale=math.sqrt(t[0]))
    for k in range(1, len(t)):
        sd = math.sqrt(t[k] - t[k - 1])
        w = np.full(grid, (x[1] - x[0]))
        w[[0, -1]] /= 2  # trapezoid weights
        mass = f * w

        def excess(b: float, k: int = k, sd: float = sd, mass: np.ndarray = mass, x: np.ndarray = x) -> float:
            """The probability of leaving through ±b at look k, less what look k may spend."""
            edge = b * math.sqrt(t[k])
            return float(np.sum(mass * (norm.sf((edge - x) / sd) + norm.cdf((-edge - x) / sd)))) - spend[k]

        b = brentq(excess, 0.1, 40.0, xtol=1e-7)
        bounds.append(float(b))
        edge = b * math.sqrt(t[k])
        new_x = np.linspace(-edge, edge, grid)
        f = (mass[None, :] * norm.pdf((new_x[:, None] - x[None, :]) / sd) / sd).sum(axis=1)
        x = new_x
    return bounds


def sequential_confidence(confidence: float, first: int, most: int, runs: int) -> float:
    """The confidence of each interval of a verdict read at ``runs`` runs a side of an adaptive run that started
    with ``first`` and may go to ``most`` (a look after every added run): the nominal level of the look's
    :func:`spending_boundaries`, information counted in runs. Below ``first`` (runs that failed) the first
    look's; beyond ``most`` (runs added by hand) the last one's. ``confidence`` when there is one look only."""
    if most <= first:
        return confidence
    from scipy.stats import norm

    bounds = _boundaries(round(1 - confidence, 12), first, most)
    b = bounds[min(max(runs, first), most) - first]
    return float(1 - 2 * norm.sf(b))


@functools.lru_cache(maxsize=64)
def _boundaries(alpha: float, first: int, most: int) -> tuple[float, ...]:
    return tuple(spending_boundaries(alpha, [n / most for n in range(first, most + 1)]))


def bounded(values: np.ndarray, bounds: np.ndarray, fallback: float) -> np.ndarray:
    """``values`` with each +∞ (censored) replaced by its lower bound (``bounds``, NaN: unknown) or ``fallback``."""
    v = np.asarray(values, dtype=float).copy()
    b = np.asarray(bounds, dtype=float)
    censored = np.isinf(v)
    v[censored] = np.where(np.isnan(b[censored]), fallback, b[censored])
    return v


def _log_stats(x: np.ndarray) -> tuple[float, float, int]:
    """Mean of the logs, their variance divided by n (the squared standard error), n."""
    logs = np.log(x)
    return float(logs.mean()), float(logs.var(ddof=1) / len(logs)), len(logs)


def welch(a: np.ndarray, b: np.ndarray, confidence: float) -> tuple[float, float]:
    """The ``confidence`` interval of the ratio of geometric means a / b (positive, finite values, ≥ 2 each)."""
    from scipy.stats import t as student_t  # scipy.stats takes a while to import; only a report needs it

    (ma, va, na), (mb, vb, nb) = _log_stats(a), _log_stats(b)
    centre, var = ma - mb, va + vb
    if var == 0:
        return math.exp(centre), math.exp(centre)
    df = var**2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    half = float(student_t.ppf(1 - (1 - confidence) / 2, df)) * math.sqrt(var)
    return math.exp(centre - half), math.exp(centre + half)


MIN_PAIRS = 3
"""Pairs a paired interval needs (:func:`paired_interval`): with 2, its t has one degree of freedom (12.7 standard
errors)."""


BLOCK_LEVEL = 0.01
"""The level of the test that a repeat's runs share a slowdown (:func:`blocked`)."""


def blocked(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether runs made in pairs (``a[i]`` and ``b[i]`` in the same repeat; :data:`MIN_PAIRS` pairs at least)
    share what slowed their repeat, beyond chance: the pairs' log sums vary more than their log differences, past
    the 99th percentile of F(n - 1, n - 1) (a block effect, tested at :data:`BLOCK_LEVEL`). Without a shared
    part both vary alike (each is the two runs' noise); a load that slows both runs of a repeat moves the sum and
    cancels in the difference. Only then is the comparison over the pairs (:func:`paired_interval`): where the
    repeats share nothing, Welch's interval over the runs is as valid and narrower (more degrees of freedom), and a
    choice made on which interval is narrower would not be valid (2.5% one-sided became 3.3%, simulated); this test,
    at 1%, kept both within 2.5% at every load simulated (``tests/test_calibration.py``)."""
    from scipy.stats import f as f_dist

    la, lb = np.log(a), np.log(b)
    n = len(la)
    if n < MIN_PAIRS or n != len(lb):
        return False
    between, within = float((la + lb).var(ddof=1)), float((la - lb).var(ddof=1))
    if between == 0:
        return False
    return within == 0 or between / within > float(f_dist.ppf(1 - BLOCK_LEVEL, n - 1, n - 1))


def paired_interval(a: np.ndarray, b: np.ndarray, confidence: float) -> tuple[float, float]:
    """The ``confidence`` interval of the ratio of geometric means a / b from runs made in pairs (``a[i]`` and
    ``b[i]`` in the same repeat; positive, finite values, :data:`MIN_PAIRS` pairs at least): Student's t on the
    pairs' log differences, n - 1 degrees of freedom. What slows the machine for a whole repeat (load, heat)
    slows both runs of the pair and cancels in their difference."""
    from scipy.stats import t as student_t

    d = np.log(a) - np.log(b)
    centre, n = float(d.mean()), len(d)
    se = float(d.std(ddof=1)) / math.sqrt(n)
    half = float(student_t.ppf(1 - (1 - confidence) / 2, n - 1)) * se
    return math.exp(centre - half), math.exp(centre + half)


POWER = 0.80
"""What "can tell apart" means in a :class:`~bakeoff.analysis.bootstrap.Resolution`: 4 times in 5."""


def _needed(sd2: tuple[float, float], runs: tuple[int, int], confidence: float) -> float:
    """The log distance from the near edge of the band a true ratio needs for an interval over ``runs`` runs a side
    (log variances ``sd2``) to clear it :data:`POWER` of the time: the standard error times the noncentrality at
    which a noncentral t exceeds the interval's critical value that often. Its degrees of freedom are Welch's less
    one: Welch's are themselves estimated, and smaller than 2n - 2 on most draws, so with them the power promised
    for 3 runs a side was 69% simulated; less one it is 79-80% from 3 to 12 runs (t + z standard errors, the normal
    shortcut, gave 67%; ``tests/test_calibration.py`` simulates it)."""
    va, vb = sd2[0] / runs[0], sd2[1] / runs[1]
    if va + vb == 0:
        return 0.0
    df = max(1.0, (va + vb) ** 2 / (va**2 / (runs[0] - 1) + vb**2 / (runs[1] - 1)) - 1)
    return _noncentrality(round(df, 1), confidence) * math.sqrt(va + vb)


def _needed_paired(sd2: float, pairs: int, confidence: float) -> float:
    """:func:`_needed` for ``pairs`` pairs whose log differences have variance ``sd2``: exact, n - 1 degrees of
    freedom."""
    return _noncentrality(float(pairs - 1), confidence) * math.sqrt(sd2 / pairs) if sd2 > 0 else 0.0


@functools.lru_cache(maxsize=4096)
def _noncentrality(df: float, confidence: float) -> float:
    """The noncentrality at which a noncentral t with ``df`` degrees of freedom exceeds the two-sided
    ``confidence`` critical value :data:`POWER` of the time (cached: degrees of freedom to a tenth)."""
    from scipy.optimize import brentq
    from scipy.stats import nct
    from scipy.stats import t as student_t

    critical = float(student_t.ppf(1 - (1 - confidence) / 2, df))

    def short(delta: float) -> float:
        return float(nct.sf(critical, df, delta)) - POWER

    # Bracketed from the critical value up (where the power is about one half, short of POWER): half the
    # evaluations of a search over [0, 100], the same root to xtol.
    high = critical + 1.0
    while short(high) < 0:
        high += high - critical
    return float(brentq(short, critical, high, xtol=1e-6))


def resolution(a_runs: np.ndarray, b_runs: np.ndarray, confidence: float = CONFIDENCE, band: float = TIE_BAND,
               observed: float | None = None, centre: float = 1.0, paired: bool = False) -> Resolution | None:
    """What ``a_runs`` against ``b_runs`` (one finite value per run, 2 a side at least; else ``None``) could tell
    apart at ``confidence``, and about how many runs a side would settle the ratio ``observed`` (the one shown: of
    the medians; by default of the geometric means) if it were the true one (more runs than either side has): as
    better when it lies beyond the band around ``centre`` (1, or a claim's threshold with no band), as equal when
    inside it. A power calculation on the runs' own log spread (:func:`_needed`), or, ``paired`` (``a_runs[i]``
    and ``b_runs[i]`` made in the same repeat, as :func:`paired_interval` compares them), on the spread of the
    pairs' log differences (:func:`_needed_paired`); the spread is itself estimated from few runs, so the run
    counts are "about"."""
    a, b = np.asarray(a_runs, dtype=float), np.asarray(b_runs, dtype=float)
    if len(a) < 2 or len(b) < 2 or not (np.isfinite(a).all() and np.isfinite(b).all()) or (a <= 0).any() \
            or (b <= 0).any():
        return None
    if paired and len(a) == len(b) >= MIN_PAIRS:
        var_d = float((np.log(a) - np.log(b)).var(ddof=1))
        noise = math.sqrt(var_d / 2)  # each side's, net of what a repeat shares

        def need(n: int) -> float:
            return _needed_paired(var_d, n, confidence)
    else:
        paired = False
        sd2 = (float(np.log(a).var(ddof=1)), float(np.log(b).var(ddof=1)))
        noise = math.sqrt(sum(sd2) / 2)

        def need(n: int) -> float:
            return _needed(sd2, (n, n) if n else (len(a), len(b)), confidence)
    edge = math.log(1 + band)
    measured = observed if observed else math.exp(float(np.log(a).mean() - np.log(b).mean()))
    distance = abs(math.log(measured) - math.log(centre))
    detectable = math.exp(edge + need(len(a) if paired else 0))
    aim = "better" if distance > edge else "equal"
    room = distance - edge if aim == "better" else edge - distance
    low, high = max(len(a), len(b)) + 1, SETTLE_RUNS_MAX  # what more runs would settle: bisect, fewer is less
    if low > high or need(high) > room:
        settle_runs = None
    else:
        while low < high:
            mid = (low + high) // 2
            low, high = (low, mid) if need(mid) <= room else (mid + 1, high)
        settle_runs = low
    return Resolution(runs=(len(a), len(b)), noise=noise, detectable=detectable, settles=measured, aim=aim,
                      settle_runs=settle_runs, paired=paired)


def compare(name: str, a: float | None, b: float | None, a_runs: np.ndarray, b_runs: np.ndarray,
            a_bounds: np.ndarray, b_bounds: np.ndarray, higher_is_better: bool, confidence: float = CONFIDENCE,
            band: float = TIE_BAND, paired: bool = False) -> Difference:
    """Configuration ``a`` against ``b`` on one quantity (see the module docstring).

    Args:
        name: the quantity.
        a, b: the values shown (each side's median over its runs; +∞ never).
        a_runs, b_runs: one value per run, +∞ for a censored run, as comparisons see them (floored).
        a_bounds, b_bounds: each run's lower bound where censored (NaN: unknown).
        higher_is_better: the quantity's direction.
        confidence: of the interval.
        band: the tie band.
        paired: ``a_runs[i]`` and ``b_runs[i]`` were made in the same repeat: with :data:`MIN_PAIRS` pairs or more,
            none censored, and the repeats' shared slowdown shown (:func:`blocked`), the interval is
            :func:`paired_interval` (else Welch's, as without).
    """
    if a is None or b is None:
        return Difference(name, a, b, None, None, None, None, False, confidence)
    point = float(ratio(a, b))
    a_runs, b_runs = np.asarray(a_runs, dtype=float), np.asarray(b_runs, dtype=float)
    lo_band, hi_band = 1 / (1 + band), 1 + band
    if len(a_runs) < 2 or len(b_runs) < 2:  # no interval: a provisional verdict reads the point ratio alone
        larger = "a" if point > hi_band else "b" if point < lo_band else None
        better = larger if higher_is_better or larger is None else {"a": "b", "b": "a"}[larger]
        return Difference(name, a, b, point, None, None, better, False, confidence)
    cens_a, cens_b = bool(np.isinf(a_runs).any()), bool(np.isinf(b_runs).any())
    pairs = len(a_runs) if paired and not (cens_a or cens_b) and blocked(a_runs, b_runs) else 0
    if pairs:
        low, high = paired_interval(a_runs, b_runs, confidence)
    elif cens_a and cens_b:
        low, high = 0.0, math.inf
    else:
        finite = np.concatenate([a_runs[np.isfinite(a_runs)], b_runs[np.isfinite(b_runs)]])
        fallback = float(finite.max()) if finite.size else 1.0
        low, high = welch(bounded(a_runs, a_bounds, fallback), bounded(b_runs, b_bounds, fallback), confidence)
        low, high = (low, math.inf) if cens_a else (0.0, high) if cens_b else (low, high)
    larger = "a" if low > hi_band else "b" if high < lo_band else None
    better = larger if higher_is_better or larger is None else {"a": "b", "b": "a"}[larger]
    return Difference(name, a, b, point, low, high, better, equivalent=bool(lo_band <= low and high <= hi_band),
                      confidence=confidence, pairs=pairs)


def draws(runs: np.ndarray, bounds: np.ndarray, value: float | None, size: int,
          rng: np.random.Generator) -> np.ndarray:
    """``size`` plausible values of one configuration, consistent with :func:`welch`: its geometric mean with
    Student-t noise of its standard error (n - 1 degrees of freedom). Censored runs enter at their bounds; a
    configuration whose value is never (+∞) stays never; below 2 runs the value itself, without spread."""
    runs = np.asarray(runs, dtype=float)
    if value is None:
        return np.full(size, np.nan)
    if math.isinf(value) or len(runs) < 2:
        return np.full(size, value)
    finite = runs[np.isfinite(runs)]
    x = bounded(runs, bounds, float(finite.max()) if finite.size else 1.0)
    mean, var, n = _log_stats(x)
    with np.errstate(over="ignore"):  # a far tail of t with 1 or 2 degrees of freedom: +∞, scored as such
        return np.exp(mean + math.sqrt(var) * rng.standard_t(n - 1, size))
