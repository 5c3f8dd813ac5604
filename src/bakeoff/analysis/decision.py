"""What a decision is: the records :func:`bakeoff.analysis.decide.decide` fills in for one (workload, preset), which
:mod:`bakeoff.analysis.verdict` puts into words and the report, the card and CI read.

A :class:`Decision` holds the scores (each configuration's, :class:`ConfigScore`; each framework's, that of its best
configuration, :class:`FrameworkScore`), the leader against the runner-up on every measured criterion, how the
leader changes as one weight is scaled (:class:`SensitivityRow`), the verdict and its robustness.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from bakeoff.analysis.bootstrap import Difference
from bakeoff.analysis.mixing import Mix

Qualitative = Mapping[str, Mapping[str, float]]
"""``{criterion: {framework: score 0..5}}``, e.g. ``{"team_familiarity": {"torch": 4, "tensorflow": 2}}``."""


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
    flips_at: float | None  # the multiplier nearest 1 on decide.MULTIPLIERS that changes the leader; None: none
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
    winner: str | None  # None when no comparison is possible, or the frameworks are equal or the lead unsettled
    margin: float | None  # score of the leader minus the runner-up
    inconclusive: bool  # no winner although two frameworks were compared (equal included)
    tie: bool  # shown equal: no winner, and every weighted measured interval lies wholly within the tie band
    head_to_head: dict[str, Difference]  # measured criterion -> leader's config ("a") against the runner-up's
    verdict: str
    sensitivity: list[SensitivityRow]
    robust: bool  # enough runs, none busy, leads in >= ROBUST_SHARE of joint resamples, survives every weight ×½, ×2
    provisional: bool = False  # fewer than MIN_RUNS successful runs on a compared side
    runs: tuple[int, int] | None = None  # successful runs of the leader's and runner-up's configurations
    busy: tuple[int, int] = (0, 0)  # of those, the runs measured on a busy machine (conditions.busy_runs): never robust
    win_share: dict[str, float] = dataclasses.field(default_factory=dict)  # framework -> share of joint resamples
    resamples: int = 0
    caveats: list[str] = dataclasses.field(default_factory=list)  # modes not run as users train, machine load
    budget_examples: float | None = None  # where quality was read
    mixes: list[Mix] = dataclasses.field(default_factory=list)  # what the section's trials differ in that should not
    mix_note: str = ""  # what the two compared configurations differ in, for the verdict ("" when nothing)
    # Weights behind a winner: the criteria the leader is surely better on, and those not settled either way (a
    # tie reaching outside the band). "Wins" needs the first to weigh more than the second.
    settled_weight: float = 0.0
    unsettled_weight: float = 0.0
    looks: int = 1  # adaptive repeats: the looks the run could take; the intervals are read at their level

    @property
    def settled(self) -> bool:
        """Whether adaptive repeats may stop adding runs here: a winner, shown equal, or nothing to compare."""
        return self.winner is not None or self.tie or len(self.ranking) < 2
