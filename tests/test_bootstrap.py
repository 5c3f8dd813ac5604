"""The bootstrap behind every interval: agreement with scipy, the exact resampled median, the two-level design."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bakeoff.analysis.bootstrap import (
    Resampler,
    bootstrap_medians,
    difference,
    percentile_interval,
    ratio,
    resampled_medians,
    rng_for,
)
from bakeoff.analysis.quantities import QUANTITIES
from fake_results import trial

# A known, skewed sample: step times with a straggler, like the ones a CPU trial records.
STEPS = np.array([31.0, 33.5, 32.2, 35.9, 30.8, 34.1, 32.7, 41.3, 33.0, 31.9, 36.4, 32.5, 33.8, 30.2, 34.7,
                  32.9, 39.5, 33.3, 31.4, 35.2, 32.1])


def test_median_interval_agrees_with_scipy():
    ours = percentile_interval(bootstrap_medians(STEPS, 20_000, np.random.default_rng(1)))
    theirs = stats.bootstrap((STEPS,), np.median, n_resamples=20_000, method="percentile",
                             rng=np.random.default_rng(2)).confidence_interval
    assert ours == pytest.approx((theirs.low, theirs.high), rel=0.01)
    assert ours[0] < np.median(STEPS) < ours[1]


def test_ratio_interval_agrees_with_scipy_two_sample_bootstrap():
    a, b = STEPS[:11] * 1.3, STEPS[10:]

    def median_ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(x, axis=axis) / np.median(y, axis=axis)

    theirs = stats.bootstrap((a, b), median_ratio, n_resamples=20_000, method="percentile",
                             rng=np.random.default_rng(3)).confidence_interval
    d = difference("first_step_s", float(np.median(a)), float(np.median(b)),
                   bootstrap_medians(a, 20_000, np.random.default_rng(4)),
                   bootstrap_medians(b, 20_000, np.random.default_rng(5)), higher_is_better=False)
    assert (d.low, d.high) == pytest.approx((theirs.low, theirs.high), rel=0.015)
    assert d.ratio == pytest.approx(median_ratio(a, b)) and d.better == "b"  # 1.3x the time: b is better


@pytest.mark.parametrize("m", [21, 20, 4, 2, 1])
def test_the_exact_resampled_median_matches_brute_force_resampling(m):
    steps = np.round(STEPS[:m])  # rounded: tied values too
    exact = resampled_medians(steps, 40_000, np.random.default_rng(6))
    brute = bootstrap_medians(steps, 40_000, np.random.default_rng(7))
    grid = np.union1d(exact, brute)

    def cdf(x: np.ndarray) -> np.ndarray:
        return np.searchsorted(np.sort(x), grid, side="right") / len(x)

    assert np.abs(cdf(exact) - cdf(brute)).max() < 0.015  # Kolmogorov distance: sampling noise only
    assert exact.std() == pytest.approx(brute.std(), rel=0.02, abs=1e-12)
    possible = set(steps) if m % 2 else {(a + b) / 2 for a in steps for b in steps}
    assert set(np.unique(exact)) <= possible


def test_percentile_interval_handles_never_and_missing():
    assert percentile_interval(np.array([1.0, 2.0, math.inf, math.inf])) == (pytest.approx(1.075), math.inf)
    assert percentile_interval(np.array([math.nan, 3.0])) == (3.0, 3.0)
    assert all(math.isnan(v) for v in percentile_interval(np.array([math.nan])))
    assert ratio(np.array([math.inf, 0.0, 2.0, 1.0]), np.array([math.inf, 0.0, math.inf, 0.0])).tolist() == [
        1.0, 1.0, 0.0, math.inf]


def test_the_resampler_redraws_runs_then_steps_and_is_seeded():
    runs = [trial("torch", "eager", repeat=i, examples_per_s=e) for i, e in enumerate((480, 500, 520))]
    eps = QUANTITIES["examples_per_s"]
    reps = Resampler(runs, rng_for("a"), 4000).replicates(eps)
    assert reps.shape == (4000,) and np.array_equal(reps, Resampler(runs, rng_for("a"), 4000).replicates(eps))
    # Between-run spread (480..520) plus within-run step noise: wider than either alone.
    steady = [trial("torch", "eager", repeat=i, examples_per_s=e, jitter=0.0) for i, e in enumerate((480, 500, 520))]
    runs_only = Resampler(steady, rng_for("a"), 4000).replicates(eps)
    steps_only = Resampler(runs[1:2], rng_for("a"), 4000).replicates(eps)
    width = {name: np.subtract(*percentile_interval(r)[::-1]) for name, r in
             (("both", reps), ("runs", runs_only), ("steps", steps_only))}
    assert width["both"] > width["runs"] > 0 and width["both"] > width["steps"] > 0
    assert set(np.unique(runs_only)) <= {480.0, 500.0, 520.0}
    # Step time and throughput come from the same resampled steps: each replicate is examples per step / step.
    step = Resampler(runs, rng_for("a"), 4000).replicates(QUANTITIES["steady_step_s"])
    assert np.allclose(np.sort(32 / step), np.sort(reps), rtol=0.02)


def test_censored_runs_count_as_never_in_the_replicates():
    runs = [trial("torch", "eager", repeat=i, time_to_target_s=t) for i, t in enumerate((1.0, None, None))]
    reps = Resampler(runs, rng_for("b"), 4000).replicates(QUANTITIES["time_to_target_s"])
    finite = np.isfinite(reps).mean()  # a majority of the 3 draws must be the one run that reached it: 7/27
    assert finite == pytest.approx(7 / 27, abs=0.03)


def test_a_comparison_shows_better_worse_equal_or_unsettled_never_tie():
    from bakeoff.analysis.bootstrap import OUTCOMES, Difference
    from bakeoff.analysis.verdict import outcome_text

    unsettled = Difference("examples_per_s", 3.0, 2.0, 1.50, 1.02, 2.24, None, False)
    equal = Difference("examples_per_s", 1.0, 1.0, 1.01, 0.98, 1.03, None, True)
    better = Difference("examples_per_s", 2.0, 1.0, 1.83, 1.76, 1.89, "a", False)
    one_run = Difference("examples_per_s", 2.0, 1.0, 1.83, None, None, "a", False)
    assert [d.outcome for d in (unsettled, equal, better, better.swapped(), one_run)] == [
        "unsettled", "equal", "better", "worse", "unsettled"]
    assert {d.outcome for d in (unsettled, equal, better, one_run)} <= set(OUTCOMES)
    assert outcome_text(unsettled) == "unsettled 1.50x (1.02–2.24x)"
    assert outcome_text(equal) == "equal 1.01x (0.98–1.03x)"
    assert outcome_text(one_run) == "unsettled 1.83x (one run a side: no interval)"
    assert "CI" not in outcome_text(one_run) and "tie" not in outcome_text(unsettled)
