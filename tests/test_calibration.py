"""The verdict's error rates, measured: synthetic bake-offs with a known truth through the real analysis
(:mod:`bakeoff.analysis.calibration`). ``bench/calibration.py`` prints the whole table.

Null scenarios draw every side from one distribution, so any "wins" is false. Each is drawn :data:`DRAWS` times;
pooled over every null scenario, the one-sided 95% Clopper-Pearson upper limit of the rate must lie within the
bound, so that it holds with confidence and not only on the draws made; and no scenario's draws may show its own
rate beyond the bound (its lower limit within it). The scenario nearest the bound (bimodal runs at 3 runs a side:
3 runs of one side in the fast mode and 3 of the other in the slow one look exactly like a true 1.4x) is drawn
:data:`NEAREST_DRAWS` times and held to the bound itself.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from scipy.stats import beta

from bakeoff.analysis.calibration import Noise, Scenario, Tally, adaptive_scenarios, scenarios, simulate
from bakeoff.core.result import AdaptiveRepeats

DRAWS = 150
NEAREST_DRAWS = 2000
FALSE_WINS = 0.05
FALSE_ROBUST = 0.01


def upper(events: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper limit of a rate seen ``events`` times in ``n``."""
    return 1.0 if events >= n else float(beta.ppf(confidence, events + 1, n - events))


def lower(events: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson lower limit of a rate seen ``events`` times in ``n``."""
    return 0.0 if events == 0 else float(beta.ppf(1 - confidence, events, n - events + 1))


@pytest.fixture(scope="module")
def null_tallies() -> list[Tally]:
    return [simulate(s, DRAWS) for s in scenarios(2) + [s for s in scenarios(3) if s.runs == 3][:3]]


def test_the_null_scenarios_cover_every_noise_model_of_the_issue():
    names = {s.name.split(", n")[0] for s in scenarios(2)}
    assert names == {"1%", "5%", "10%", "25%", "1% vs 25%", "drift phi 0.9", "failures", "heavy tails", "bimodal",
                     "load drift", "many timeouts", "user weights, 1% vs 25%"}
    assert {s.runs for s in scenarios(2)} == {3, 5} and all(s.null for s in scenarios(2) + scenarios(3))
    assert {s.side_runs for s in scenarios(2)} == {(), (3, 8)}  # unequal n
    adaptive = {s.name.split(", n")[0] for s in adaptive_scenarios()}
    assert {"bimodal", "load drift", "user weights, 1% vs 25%", "power: 1.15x at 5%", "power: 1.3x at 10%"} <= adaptive


def test_the_noise_models_draw_what_they_say():
    from bakeoff.analysis.calibration import draw, loads

    rng = np.random.default_rng(0)
    bimodal = Scenario("bimodal", 400, (Noise.uniform(0.0, slow_share=0.3, slow_factor=1.4),) * 2)
    rates = np.array([r.throughput["examples_per_s"] for r in draw(bimodal, rng)])
    assert 0.25 < np.mean(rates < 0.8 * rates.max()) < 0.35  # 3 runs in 10 1.4x as slow
    assert np.allclose(sorted(set(np.round(rates.max() / rates, 1))), [1.0, 1.4])
    drift = Scenario("load drift", 200, (Noise.uniform(0.0),) * 2, load_drift=0.10)
    runs = draw(drift, rng, loads(drift, rng))
    pairs = np.log([[r.throughput["examples_per_s"] for r in runs if r.spec["repeat"] == i] for i in range(200)])
    assert np.allclose(pairs[:, 0], pairs[:, 1]) and 0.07 < pairs[:, 0].std() < 0.13  # shared by a repeat's sides
    unequal = Scenario("unequal", 3, (Noise.uniform(0.05),) * 2, side_runs=(3, 8))
    assert [sum(r.spec["framework"] == fw for r in draw(unequal, rng)) for fw in ("torch", "tensorflow")] == [3, 8]


def test_a_false_wins_is_rare_in_every_null_scenario(null_tallies):
    beyond = {t.scenario.name: t.wins for t in null_tallies if lower(t.wins, t.draws) > FALSE_WINS}
    assert not beyond, beyond
    wins, draws = sum(t.wins for t in null_tallies), sum(t.draws for t in null_tallies)
    assert upper(wins, draws) <= FALSE_WINS, (wins, draws)


def test_a_false_robust_is_rarer_still(null_tallies):
    beyond = {t.scenario.name: t.robust for t in null_tallies if lower(t.robust, t.draws) > FALSE_ROBUST}
    assert not beyond, beyond
    robust, draws = sum(t.robust for t in null_tallies), sum(t.draws for t in null_tallies)
    assert upper(robust, draws) <= FALSE_ROBUST, (robust, draws)


def test_bimodal_runs_at_three_a_side_the_nearest_the_bounds_stay_within_them():
    # Measured over 6,000 draws in four seeds: 0.83% false robust (one-sided 95% upper limit 1.05%), 1.9% false
    # wins. Five runs a side: 0.2% and 0.5%.
    t = simulate(next(s for s in scenarios(2) if s.name == "bimodal, n = 3, 2 sides"), NEAREST_DRAWS)
    assert t.rate(t.wins) <= FALSE_WINS and t.rate(t.robust) <= FALSE_ROBUST, (t.wins, t.robust)


def test_the_intervals_cover_the_true_ratio(null_tallies):
    power = simulate(Scenario("power 1.3x at 5%", 3, (Noise.uniform(0.05),) * 2, (1.3, 1.0)), DRAWS)
    for t in [*null_tallies, power]:
        for criterion in ("throughput", "time_to_target"):
            if t.scenario.runs == 3 and t.intervals.get(criterion, 0) >= DRAWS // 2:
                assert t.coverage(criterion) >= 0.90, (t.scenario.name, criterion, t.coverage(criterion))


def test_a_true_difference_of_1_3x_at_5_percent_noise_is_called_at_3_runs():
    t = simulate(Scenario("power 1.3x at 5%", 3, (Noise.uniform(0.05),) * 2, (1.3, 1.0)), DRAWS)
    assert t.rate(t.right_wins) >= 0.80 and t.right_wins == t.wins  # never the slower side


def test_below_three_runs_a_lead_is_provisional_and_its_null_rate_is_the_one_the_verdict_states():
    from bakeoff.analysis.verdict import ONE_RUN_NULL_LEADS

    assert "1 of 5 simulated bake-offs at 5%" in ONE_RUN_NULL_LEADS and "2 of 3 at 25%" in ONE_RUN_NULL_LEADS
    low, high = (simulate(Scenario(f"one run, {p:.0%}", 1, (Noise.uniform(p),) * 2), DRAWS) for p in (0.05, 0.25))
    assert low.wins == high.wins == 0  # one run a side: never "wins"
    assert 0.12 <= low.rate(low.provisional_leads) <= 0.28 and 0.55 <= high.rate(high.provisional_leads) <= 0.80
    two = simulate(Scenario("two runs, 10%", 2, (Noise.uniform(0.10),) * 2), DRAWS)
    assert two.wins == 0 and two.rate(two.provisional_leads) <= FALSE_WINS


def test_the_simulation_is_seeded():
    s = Scenario("seeded", 3, (Noise.uniform(0.10),) * 2)
    a, b = simulate(s, 20, seed=3), simulate(s, 20, seed=3)
    assert (a.wins, a.robust, a.covered) == (b.wins, b.robust, b.covered)


def test_the_bench_prints_the_whole_table():
    import subprocess
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parent.parent / "bench" / "calibration.py"
    out = subprocess.run([sys.executable, str(bench), "2"], capture_output=True, text=True, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ") and "scenario" not in line]
    assert len(rows) == len(scenarios(2)) + len(scenarios(3)) + 11 + len(adaptive_scenarios())
    assert rows[0].startswith("| 1%, n = 3, 2 sides |") and all(line.count("|") == 9 for line in rows)


def test_adaptive_draws_add_runs_only_while_the_verdict_is_unsettled():
    from bakeoff.analysis.calibration import draw, settled
    from bakeoff.analysis.decide import decide
    from bakeoff.analysis.stats import summarise_groups

    clear = simulate(Scenario("clear, adaptive", 3, (Noise.uniform(0.01),) * 2, (2.0, 1.0), max_runs=6), 5)
    assert clear.wins == 5  # settled at 3 runs: a win
    rng = __import__("numpy").random.default_rng(0)
    assert settled(decide(summarise_groups(draw(clear.scenario, rng))))  # a 2x gap at 1% noise: a winner
    noisy = Scenario("noisy", 3, (Noise.uniform(0.25),) * 2)
    decisions = [decide(summarise_groups(draw(noisy, rng))) for _ in range(5)]
    assert not any(settled(d) for d in decisions if d.inconclusive and not d.tie)
    assert any(d.inconclusive and not d.tie for d in decisions)  # 25% noise, equal sides: unsettled ones exist


ADAPTIVE_DRAWS = 40  # a null draw decides 8 times (3 to 10 runs: its first-step interval is never shown equal)
POWER_DRAWS = 100


def test_adaptive_repeats_keep_a_false_wins_rare_though_they_stop_when_a_verdict_looks_settled():
    # Without a correction for looks (each look's intervals at 95%) this procedure's false wins rose from 3.0% to
    # 6.5% (25% throughput noise, up to 10 runs): each look is another chance. With the group-sequential levels the
    # bounds of fixed runs hold.
    null = [simulate(s, ADAPTIVE_DRAWS) for s in adaptive_scenarios() if s.null]
    assert len(null) == 7 and all(s.scenario.looks == 8 for s in null)
    rates = {t.scenario.name: t.rate(t.wins) for t in null}
    assert all(rate <= FALSE_WINS for rate in rates.values()), rates
    wins, robust, draws = (sum(t.wins for t in null), sum(t.robust for t in null), sum(t.draws for t in null))
    assert upper(wins, draws) <= FALSE_WINS and robust <= FALSE_ROBUST * draws, (wins, robust, draws)


@pytest.mark.parametrize("speed, noise", [(1.15, 0.05), (1.3, 0.10)])
def test_adaptive_repeats_settle_the_differences_teams_argue_about_in_at_most_8_runs_on_average(speed, noise):
    # The issue's figures: 3 to 10 runs, a true 1.15x at 5% noise and 1.3x at 10% called at least 80% of the time,
    # at most 8 runs a side on average. With Bonferroni's levels over the looks, 3 to 6 runs called the first 31%.
    power = next(s for s in adaptive_scenarios() if f"{speed:g}x at {noise:.0%}" in s.name)
    adaptive = simulate(power, POWER_DRAWS)
    assert adaptive.right_wins == adaptive.wins  # never the slower side
    assert adaptive.rate(adaptive.right_wins) >= 0.80 and adaptive.mean_runs <= 8, (adaptive.rate(adaptive.wins),
                                                                                    adaptive.mean_runs)
    fixed = simulate(dataclasses.replace(power, max_runs=0), POWER_DRAWS)
    assert adaptive.rate(adaptive.right_wins) > fixed.rate(fixed.right_wins)  # more than 3 fixed runs call


def test_on_a_machine_whose_load_drifts_the_runs_of_a_repeat_compared_in_pairs_settle_1_15x():
    # Load drifting 10% from repeat to repeat (AR(1)) under 3% run-to-run noise: Welch's interval over the runs
    # carries the load as noise (measured 68.5% called, 8.6 runs a side, 200 draws); over the pairs of a repeat it
    # cancels (99.5%, 7.1 runs).
    power = next(s for s in adaptive_scenarios() if "under load drift" in s.name)
    adaptive = simulate(power, POWER_DRAWS)
    assert adaptive.right_wins == adaptive.wins
    assert adaptive.rate(adaptive.right_wins) >= 0.90 and adaptive.mean_runs <= 8, (adaptive.rate(adaptive.wins),
                                                                                    adaptive.mean_runs)


def _load(rng: np.random.Generator, n: int, sd: float, phi: float = 0.8) -> np.ndarray:
    """A repeat-to-repeat log slowdown, AR(1): drawn here, apart from the code under test."""
    out = np.empty(n)
    out[0] = rng.normal() * sd
    for i in range(1, n):
        out[i] = phi * out[i - 1] + rng.normal() * sd * math.sqrt(1 - phi**2)
    return out


def test_pairing_the_runs_of_a_repeat_keeps_the_interval_valid_at_every_load():
    # A true ratio on the band's edge (1.05): an interval wholly above it is wrong, and a valid 95% interval is so
    # at most 2.5% of the time. The pairs are compared as pairs only where their log sums vary beyond chance more
    # than their differences (the block test at 1%): chosen so, the error stays within 2.5% with no load, a little
    # and a lot; choosing whichever interval is narrower made it 3.3%.
    from bakeoff.analysis.intervals import compare

    rng, n, draws, wrong, chose = np.random.default_rng(3), 6, 600, {}, {}
    nan = np.full(n, np.nan)
    for load in (0.0, 0.03, 0.10):
        wrong[load] = chose[load] = 0
        for _ in range(draws):
            shared = _load(rng, n, load)
            a, b = np.exp(math.log(1.05) + rng.normal(0, 0.03, n) + shared), np.exp(rng.normal(0, 0.03, n) + shared)
            d = compare("throughput", 1.05, 1.0, a, b, nan, nan, True, paired=True)
            wrong[load] += d.low > 1.05
            chose[load] += d.pairs == n
    assert all(lower(w, draws) <= 0.025 for w in wrong.values()), wrong
    assert upper(sum(wrong.values()), 3 * draws) <= 0.03, wrong
    assert chose[0.0] / draws < 0.03 and chose[0.10] / draws > 0.25, chose  # the test picks pairs where load is


def test_a_verdict_over_adaptive_runs_reads_its_intervals_at_the_looks_level_and_says_so():
    from bakeoff.analysis.calibration import draw
    from bakeoff.analysis.decide import decide
    from bakeoff.analysis.intervals import sequential_confidence
    from bakeoff.analysis.stats import summarise_groups
    from bakeoff.analysis.verdict import interval_text

    rng = np.random.default_rng(1)
    scenario = Scenario("looks", 3, (Noise.uniform(0.05),) * 2, (1.3, 1.0))
    results = draw(scenario, rng)
    plain = decide(summarise_groups(results))
    for r in results:  # an older run: its looks recorded, not its plan — Bonferroni over the looks
        r.adaptive_repeats = AdaptiveRepeats(looks=4)
    older = decide(summarise_groups(results))
    for r in results:  # the first look of a 3-to-6 plan: the group-sequential level, stricter than Bonferroni's
        r.adaptive_repeats = AdaptiveRepeats(first=3, max=6, looks=4)
    wide = decide(summarise_groups(results))
    first_look = sequential_confidence(0.95, 3, 6, 3)
    assert plain.looks == 1 and older.looks == wide.looks == 4
    assert 1 - 0.05 / 4 < first_look < 1
    for name, d in wide.head_to_head.items():
        p, o = plain.head_to_head[name], older.head_to_head[name]
        assert d.confidence == pytest.approx(first_look) and o.confidence == pytest.approx(1 - 0.05 / 4)
        assert p.confidence == 0.95
        if p.low is not None and 0 < p.low and p.high < math.inf:
            assert d.low < o.low < p.low and d.high > o.high > p.high  # the same runs, wider intervals
    assert interval_text(1.1, 1.3, 1 - 0.05 / 4) == "98.8% CI 1.10–1.30x"
    assert "98.8% CI " in older.verdict and "99.7% CI " in wide.verdict
    assert "up to 4 looks): each interval is at 98.8%, not 95%" in older.verdict
    assert ("up to 4 looks): each interval is at 99.7%, not 95%, the level this look of a group-sequential "
            "design allows") in wide.verdict


def _cleared(ratio: float, sigma: float, n: int, rng: np.random.Generator, draws: int = 20_000) -> float:
    """How often a 95% Welch interval over ``n`` log-normal runs a side (``sigma`` on the log) clears the tie band
    when the true ratio is ``ratio``: the power, simulated independently of the code under test."""
    from scipy.stats import t as student_t

    a, b = rng.normal(math.log(ratio), sigma, (draws, n)), rng.normal(0.0, sigma, (draws, n))
    va, vb = a.var(axis=1, ddof=1) / n, b.var(axis=1, ddof=1) / n
    df = (va + vb) ** 2 / (va**2 / (n - 1) + vb**2 / (n - 1))
    low = a.mean(axis=1) - b.mean(axis=1) - student_t.ppf(0.975, df) * np.sqrt(va + vb)
    return float(np.mean(low > math.log(1.05)))


def _cleared_pairs(ratio: float, sigma: float, n: int, rng: np.random.Generator, draws: int = 20_000) -> float:
    """:func:`_cleared` for ``n`` pairs whose log ratios have spread ``sigma``: Student's t, n - 1 degrees."""
    from scipy.stats import t as student_t

    d = rng.normal(math.log(ratio), sigma, (draws, n))
    low = d.mean(axis=1) - student_t.ppf(0.975, n - 1) * d.std(axis=1, ddof=1) / math.sqrt(n)
    return float(np.mean(low > math.log(1.05)))


def test_what_a_run_could_tell_apart_is_what_simulated_runs_tell_apart():
    from bakeoff.analysis.intervals import resolution

    sigma, rng = 0.09, np.random.default_rng(0)
    runs = np.exp(sigma * np.array([-1.0, 0.0, 1.0]))  # the logs' sample standard deviation is 0.09 exactly
    r = resolution(runs * 1.2, runs, observed=1.2)
    assert r is not None and r.runs == (3, 3) and r.noise == pytest.approx(sigma) and r.aim == "better"
    assert 1.3 < r.detectable < 1.45  # 3 runs a side at 9% noise: 1.15x is far below what they can see
    assert 0.76 <= _cleared(r.detectable, sigma, 3, rng) <= 0.84  # "4 times in 5"
    assert r.settle_runs is not None and 4 <= r.settle_runs <= 20
    assert _cleared(1.2, sigma, r.settle_runs, rng) >= 0.78 and _cleared(1.2, sigma, r.settle_runs - 1, rng) < 0.80
    close = resolution(runs * 1.01, runs, observed=1.01)
    assert close is not None and close.aim == "equal" and close.settles == pytest.approx(1.01)
    assert resolution(runs, runs[:1]) is None and resolution(np.array([1.0, np.inf]), runs) is None
    # Paired: the spread of the pairs' log ratios is what counts (here 0.09 * sqrt(2), each side's 0.09), with
    # n - 1 degrees of freedom: 3 pairs tell apart less than 3 runs a side would (2 degrees of freedom, not ~3).
    ratios = np.exp(sigma * math.sqrt(2) * np.array([-1.0, 0.0, 1.0]))
    p = resolution(1.2 * ratios * runs, runs, observed=1.2, paired=True)
    assert p is not None and p.paired and p.noise == pytest.approx(sigma) and p.detectable > r.detectable
    assert 0.76 <= _cleared_pairs(p.detectable, sigma * math.sqrt(2), 3, rng) <= 0.84


def test_the_sequential_boundaries_are_the_published_obrien_fleming_ones():
    from bakeoff.analysis.intervals import sequential_confidence, spending_boundaries

    # Lan-DeMets O'Brien-Fleming-type spending, two-sided 0.05, five equally spaced looks: the boundaries of the
    # published tables (gsDesign's sfLDOF at one-sided 0.025, which the symmetric two-sided 0.05 matches to the
    # third decimal): 4.877, 3.357, 2.680, 2.290, 2.031
    published = [4.877, 3.357, 2.680, 2.290, 2.031]
    assert spending_boundaries(0.05, [0.2, 0.4, 0.6, 0.8, 1.0]) == pytest.approx(published, abs=2e-3)
    assert spending_boundaries(0.05, [1.0]) == pytest.approx([1.960], abs=1e-3)  # one look: the fixed design
    levels = [sequential_confidence(0.95, 3, 10, n) for n in range(3, 11)]
    assert levels == sorted(levels, reverse=True) and levels[0] > 0.999 and 0.95 < levels[-1] < 0.97
    assert sequential_confidence(0.95, 3, 10, 2) == levels[0] and sequential_confidence(0.95, 3, 10, 12) == levels[-1]
    assert sequential_confidence(0.95, 3, 3, 3) == 0.95
    with pytest.raises(ValueError, match="information fractions"):
        spending_boundaries(0.05, [0.5, 0.4, 1.0])
