"""How often the verdict's words are wrong: synthetic bake-offs with a known truth, through the real analysis.

A :class:`Scenario` describes two or three configurations (one framework each) whose runs are drawn from known
distributions: a true speed per side, per-run noise on every measured criterion, step times with AR(1) drift
within a run, runs that time out and runs that never reach the target. :func:`simulate` draws whole result sets,
feeds them to :func:`~bakeoff.analysis.stats.summarise_groups` and :func:`~bakeoff.analysis.decide.decide` exactly
as a report does, and tallies what the verdicts said against the truth:

* **false "wins"**: every side drawn from the same distribution (``speeds`` all 1), yet the verdict says "wins";
  false "robust" likewise;
* **provisional "leads"**: below :data:`~bakeoff.analysis.verdict.MIN_RUNS` runs the verdict may only say "leads";
  how often it does under the null is measured, not bounded;
* **power**: sides that truly differ, and how often the verdict names the faster one the winner;
* **coverage**: how often each head-to-head interval contains the true ratio of the two sides (median over
  median of the distributions the runs were drawn from).

The tests (``tests/test_calibration.py``) assert the bounds; ``bench/calibration.py`` prints the whole table.
Everything is seeded: the same scenario and seed give the same tallies.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from bakeoff.analysis.quantities import CRITERIA
from bakeoff.core import frameworks
from bakeoff.core.result import AdaptiveRepeats, TrialResult
from bakeoff.core.spec import RunSpec, Status

if TYPE_CHECKING:
    from bakeoff.analysis.decide import Decision

MIB = 2**20
BATCH = 32
STEPS = 40  # per run: the first step, 3 warm-up steps, then steady ones
WARMUP = 3
EVAL_EVERY = 10
TARGET = 0.78
TRUE = {"examples_per_s": 500.0, "first_step_s": 1.0, "time_to_target_s": 3.0, "memory_increment_bytes": 150 * MIB,
        "metric_at_budget": 0.80}
"""The true values of the reference side (speed 1); a side of speed s has s times the throughput and 1/s the
time to target (:data:`SPEED`)."""
SPEED = {"examples_per_s": 1, "time_to_target_s": -1}
"""How a quantity's true value moves with a side's speed s: times s to this power; a quantity not named here is
drawn alike on every side (first step, memory, quality), and one the simulation does not draw has no interval."""


@dataclasses.dataclass(frozen=True)
class Noise:
    """Per-run noise of one side: relative standard deviations (log scale) unless said otherwise."""

    throughput: float = 0.05  # the run's level of steady throughput
    time_to_target: float = 0.05
    first_step: float = 0.10
    memory: float = 0.01
    quality: float = 0.005  # absolute, on the metric
    steps: float = 0.05  # step to step, within a run
    phi: float = 0.0  # AR(1) coefficient of the step-to-step noise (drift)
    timeout: float = 0.0  # share of runs that time out (recorded, nothing measured)
    never: float = 0.0  # share of the successful runs that never reach the target
    slow_share: float = 0.0  # share of runs slowed as a whole (heavy tails, bimodal runs) ...
    slow_factor: float = 1.0  # ... by this factor: throughput divided, step times and time to target multiplied

    @classmethod
    def uniform(cls, level: float, **kwargs: float) -> Noise:
        """``level`` on throughput and time to target, twice that on the first step (as measured: compile times
        vary more), steps within a run at ``level``."""
        return cls(throughput=level, time_to_target=level, first_step=2 * level, steps=level, **kwargs)


@dataclasses.dataclass(frozen=True)
class Scenario:
    """Sides (frameworks) with their true speed and noise, ``runs`` runs each."""

    name: str
    runs: int
    noise: tuple[Noise, ...]
    speeds: tuple[float, ...] = (1.0, 1.0)
    frameworks: tuple[str, ...] = dataclasses.field(default_factory=lambda: tuple(frameworks.native()))
    # Adaptive repeats (the procedure of `--repeats auto`): add a run to every side while the verdict is unsettled,
    # up to this many runs; each run records the looks it allows (max_runs - runs + 1), as the runner's do.
    max_runs: int = 0
    # Machine-load drift: every side of one repeat slowed by the same factor (frameworks take turns inside a
    # repeat), its log drifting from repeat to repeat as AR(1) (coefficient 0.8) with this standard deviation.
    load_drift: float = 0.0
    side_runs: tuple[int, ...] = ()  # unequal n: the runs of each side (instead of ``runs``)
    weights: tuple[tuple[str, float], ...] = ()  # the user's weights (default: the decision's)

    def runs_of(self, side: int) -> int:
        return self.side_runs[side] if side < len(self.side_runs) else self.runs

    @property
    def looks(self) -> int:
        return max(1, self.max_runs - self.runs + 1)

    @property
    def null(self) -> bool:
        return len(set(self.speeds)) == 1


def _ar1(rng: np.random.Generator, n: int, phi: float, sd: float) -> np.ndarray:
    """``n`` log step-time deviations, AR(1) with coefficient ``phi`` and marginal standard deviation ``sd``."""
    eps = rng.standard_normal(n) * sd * math.sqrt(1 - phi**2)
    out = np.empty(n)
    out[0] = rng.standard_normal() * sd
    for i in range(1, n):
        out[i] = phi * out[i - 1] + eps[i]
    return out


def _spec(framework: str, repeat: int) -> dict:
    return RunSpec(workload="text_classifier", framework=framework, execution="graph", preset="tiny",
                   max_steps=STEPS, repeat=repeat, batch_size=BATCH, eval_every=EVAL_EVERY,
                   warmup_steps=WARMUP).to_dict()


def draw_run(framework: str, repeat: int, speed: float, noise: Noise, rng: np.random.Generator,
             looks: int = 1, first: int | None = None, load: float = 0.0) -> TrialResult:
    """One run of a side: its level, steps, first step, time to target, memory and quality drawn from ``noise``,
    slowed by ``exp(load)`` (the machine's load during its repeat); made by a run that could look ``looks`` times
    (adaptive repeats, starting at ``first`` runs a side), recorded as the runner records it."""
    spec = _spec(framework, repeat)
    env = {"cores": 2, "load_average_1m_at_start": 1.0, "load_average_1m_at_end": 1.0}
    plan = None
    if looks > 1:
        plan = (AdaptiveRepeats(first=first, max=first + looks - 1, looks=looks) if first is not None
                else AdaptiveRepeats(looks=looks))
    if rng.random() < noise.timeout:
        return TrialResult(spec=spec, key=f"{framework}-{repeat}", status=Status.TIMEOUT,
                           reason="timeout after 60 s: killed", environment=env, metric_name="accuracy",
                           target=TARGET, adaptive_repeats=plan)
    slow = load + (math.log(noise.slow_factor) if rng.random() < noise.slow_share else 0.0)
    level = speed * TRUE["examples_per_s"] * math.exp(noise.throughput * rng.standard_normal() - slow)
    steady = BATCH / level * np.exp(_ar1(rng, STEPS - 1, noise.phi, noise.steps))
    first_step = TRUE["first_step_s"] * math.exp(noise.first_step * rng.standard_normal())
    steps = [first_step, *steady.tolist()]
    median = float(np.median(steady[WARMUP:]))
    ttt = (None if rng.random() < noise.never else
           TRUE["time_to_target_s"] / speed * math.exp(noise.time_to_target * rng.standard_normal() + slow))
    final = TRUE["metric_at_budget"] + noise.quality * rng.standard_normal()
    clock = np.cumsum(steps)
    curve = [{"step": float(s), "train_s": float(clock[s - 1]), "metric": final - 0.1 * (STEPS - s) / STEPS}
             for s in range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)]
    increment = int(TRUE["memory_increment_bytes"] * math.exp(noise.memory * rng.standard_normal()))
    return TrialResult(
        spec=spec, key=f"{framework}-{repeat}", status=Status.OK, environment=env, first_step_s=first_step,
        step_times_s=steps, examples_per_step=BATCH, steady_step_s=median,
        throughput={"examples_per_s": BATCH / median}, memory_kind="rss", memory_baseline_bytes=200 * MIB,
        memory_train_peak_bytes=200 * MIB + increment, memory_increment_bytes=increment, curve=curve,
        metric_name="accuracy", target=TARGET, time_to_target_s=ttt, final_metric=final, train_s=float(clock[-1]),
        adaptive_repeats=plan)


def loads(scenario: Scenario, rng: np.random.Generator) -> np.ndarray:
    """The machine's load over the repeats of one bake-off (:attr:`Scenario.load_drift`): one log slowdown per
    repeat, shared by every side."""
    n = max([scenario.runs, scenario.max_runs, *scenario.side_runs])
    return _ar1(rng, n, 0.8, scenario.load_drift) if scenario.load_drift else np.zeros(n)


def draw_repeat(scenario: Scenario, repeat: int, rng: np.random.Generator, load: np.ndarray,
                sides: Sequence[int] | None = None) -> list[TrialResult]:
    """Repeat ``repeat`` of every side (or of ``sides``), each side's run in turn, under that repeat's load."""
    sides = range(len(scenario.speeds)) if sides is None else sides
    return [draw_run(scenario.frameworks[i], repeat, scenario.speeds[i], scenario.noise[i], rng, scenario.looks,
                     scenario.runs, float(load[repeat])) for i in sides]


def draw(scenario: Scenario, rng: np.random.Generator, load: np.ndarray | None = None) -> list[TrialResult]:
    """One bake-off of ``scenario``: its runs of every side, taking turns inside each repeat."""
    load = loads(scenario, rng) if load is None else load
    sides = range(len(scenario.speeds))
    return [r for i in range(max(scenario.runs_of(k) for k in sides))
            for r in draw_repeat(scenario, i, rng, load, [k for k in sides if i < scenario.runs_of(k)])]


@dataclasses.dataclass
class Tally:
    """What the verdicts of ``draws`` bake-offs of one scenario said."""

    scenario: Scenario
    draws: int = 0
    wins: int = 0  # "wins" (a winner, not provisional)
    right_wins: int = 0  # ... naming the truly fastest side (a scenario with a true difference)
    robust: int = 0
    provisional_leads: int = 0  # a provisional verdict naming a leader
    runs: int = 0  # runs a side at which the verdicts were read, summed over draws (the most of any side)
    covered: dict[str, int] = dataclasses.field(default_factory=dict)  # criterion -> intervals holding the truth
    intervals: dict[str, int] = dataclasses.field(default_factory=dict)  # criterion -> intervals given

    def rate(self, count: int) -> float:
        return count / self.draws if self.draws else math.nan

    @property
    def mean_runs(self) -> float:
        """Runs a side per bake-off, on average: what adaptive repeats cost."""
        return self.runs / self.draws if self.draws else math.nan

    def coverage(self, criterion: str) -> float:
        n = self.intervals.get(criterion, 0)
        return self.covered.get(criterion, 0) / n if n else math.nan


def settled(decision: Decision) -> bool:
    """Whether adaptive repeats may stop (:attr:`~bakeoff.analysis.decision.Decision.settled`)."""
    return decision.settled


def _true_ratio(criterion: str, speed_a: float, speed_b: float) -> float:
    """The true ratio a / b of the medians of the distributions two sides' runs are drawn from, on ``criterion``."""
    return (speed_a / speed_b) ** SPEED.get(CRITERIA[criterion].quantity.name, 0)


def simulate(scenario: Scenario, draws: int, seed: int = 0) -> Tally:
    """``draws`` bake-offs of ``scenario`` through summarise → decide, tallied (see the module docstring)."""
    from bakeoff.analysis.decide import decide
    from bakeoff.analysis.stats import summarise_groups

    rng = np.random.default_rng([seed, *map(ord, scenario.name)])
    speed = dict(zip(scenario.frameworks, scenario.speeds, strict=False))
    fastest = max(speed, key=speed.__getitem__)
    tally = Tally(scenario)
    weights = dict(scenario.weights) or None
    for _ in range(draws):
        load = loads(scenario, rng)
        results = draw(scenario, rng, load)
        d = decide(summarise_groups(results), weights)
        runs = max(scenario.runs_of(k) for k in range(len(scenario.speeds)))
        for extra in range(runs, scenario.max_runs):  # the adaptive procedure of ``--repeats auto``
            if settled(d):
                break
            results += draw_repeat(scenario, extra, rng, load)
            d = decide(summarise_groups(results), weights)
            runs = extra + 1
        tally.draws += 1
        tally.runs += runs
        if d.winner is not None and not d.provisional:
            tally.wins += 1
            tally.right_wins += d.winner == fastest
            tally.robust += d.robust
        elif d.winner is not None:
            tally.provisional_leads += 1
        if len(d.ranking) >= 2:
            a, b = (f.framework for f in d.ranking[:2])
            for criterion, diff in d.head_to_head.items():
                if diff.low is None or diff.high is None or not math.isfinite(diff.low * diff.high):
                    continue
                truth = _true_ratio(criterion, speed[a], speed[b])
                tally.intervals[criterion] = tally.intervals.get(criterion, 0) + 1
                tally.covered[criterion] = tally.covered.get(criterion, 0) + (diff.low <= truth <= diff.high)
    return tally


LEVEL = ("throughput", "time_to_target")
"""The two criteria :func:`user_weights` puts level."""


def user_weights() -> tuple[tuple[str, float], ...]:
    """A user's weights that put two criteria level (:data:`LEVEL`) and drop every other measured one: one of the
    two shown better by chance must not carry the verdict while the other is unsettled."""
    return tuple((c, 1.0 if c in LEVEL else 0.0) for c in CRITERIA)


def null_models(sides: int) -> list[tuple[str, dict]]:
    """Every way the sides of a null bake-off may be drawn (name, :class:`Scenario` fields but runs): run-to-run
    noise from 1% to 25%, unequal noise, drifting steps, lost runs, heavy tails (1 run in 10 twice as slow), bimodal
    runs (3 in 10 1.4x as slow), machine-load drift shared by every side of a repeat, many timeouts, and the user's
    weights on two criteria level with unequal noise."""
    u = Noise.uniform
    unequal = (u(0.01), u(0.25), u(0.10))[:sides]
    return [("1%", {"noise": (u(0.01),) * sides}), ("5%", {"noise": (u(0.05),) * sides}),
            ("10%", {"noise": (u(0.10),) * sides}), ("25%", {"noise": (u(0.25),) * sides}),
            ("1% vs 25%", {"noise": unequal}), ("drift phi 0.9", {"noise": (u(0.05, phi=0.9),) * sides}),
            ("failures", {"noise": (u(0.10, timeout=0.2, never=0.2),) * sides}),
            ("heavy tails", {"noise": (u(0.05, slow_share=0.1, slow_factor=2.0),) * sides}),
            ("bimodal", {"noise": (u(0.05, slow_share=0.3, slow_factor=1.4),) * sides}),
            ("load drift", {"noise": (u(0.03),) * sides, "load_drift": 0.10}),
            ("many timeouts", {"noise": (u(0.10, timeout=0.4),) * sides}),
            ("user weights, 1% vs 25%", {"noise": unequal, "weights": user_weights()})]


def scenarios(sides: int = 2) -> list[Scenario]:
    """The null scenarios the calibration test bounds: every noise model of :func:`null_models`, at 3 and 5 runs,
    and unequal n (3 runs against 8)."""
    out = [Scenario(f"{name}, n = {runs}, {sides} sides", runs, speeds=(1.0,) * sides, **fields)
           for runs in (3, 5) for name, fields in null_models(sides)]
    return [*out, *(Scenario(f"{name}, n = 3 vs 8, {sides} sides", 3, speeds=(1.0,) * sides,
                             side_runs=(3, 8, 5)[:sides], **fields)
                    for name, fields in null_models(sides) if name in ("10%", "1% vs 25%"))]


def adaptive_scenarios(max_runs: int = 10) -> list[Scenario]:
    """Adaptive repeats (``--repeats auto``) from 3 runs up to ``max_runs``: the null scenarios where a verdict
    stays unsettled longest (more looks, more chances of a chance win), and the power scenarios the issue sets —
    a true 1.15x at 5% noise and 1.3x at 10% — and 1.15x on a machine whose load drifts (what comparing the runs
    of a repeat in pairs is for)."""
    out = [Scenario(f"{name}, n = 3 to {max_runs} (adaptive), 2 sides", 3, max_runs=max_runs, **fields)
           for name, fields in null_models(2)
           if name in ("10%", "25%", "1% vs 25%", "drift phi 0.9", "bimodal", "load drift",
                       "user weights, 1% vs 25%")]
    return [*out, *(Scenario(f"power: {speed:g}x at {p:.0%}, n = 3 to {max_runs} (adaptive)", 3,
                             (Noise.uniform(p),) * 2, (speed, 1.0), max_runs=max_runs)
                    for speed, p in ((1.15, 0.05), (1.3, 0.10))),
            Scenario(f"power: 1.15x at 3% under load drift 10%, n = 3 to {max_runs} (adaptive)", 3,
                     (Noise.uniform(0.03),) * 2, (1.15, 1.0), max_runs=max_runs, load_drift=0.10)]


def table(tallies: Sequence[Tally]) -> list[dict[str, object]]:
    """One row per tally, for printing: its rates, the coverage of the intervals of every measured criterion whose
    truth moves with a side's speed (:data:`SPEED`: the true ratio of the others is 1 whatever the sides), and the
    runs a side."""
    return [{"scenario": t.scenario.name, "draws": t.draws, "wins": t.rate(t.wins), "robust": t.rate(t.robust),
             "provisional leads": t.rate(t.provisional_leads), "right wins": t.rate(t.right_wins),
             **{f"coverage {c.header}": t.coverage(c.name) for c in CRITERIA.values() if c.quantity.name in SPEED},
             "mean runs": t.mean_runs}
            for t in tallies]
