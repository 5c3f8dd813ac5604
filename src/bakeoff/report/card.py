"""The decision card: what a reader sees first, in the report and at the end of ``bakeoff run`` / ``bakeoff report``.

Across every workload of the report: one row per framework (judged, as the decision judges it, by its best
configuration) and one column per weighted criterion. The workload's leader shows its medians; every other framework
shows how it compares with the leader in the words of :attr:`~bakeoff.analysis.bootstrap.Difference.outcome` —
better, worse, equal or unsettled — with the ratio of medians and its interval (the runner-up's are the verdict's own
head-to-head numbers, seen from its side). Cells say "better"/"worse", not "win"/"loss": a framework that loses the
workload can be better on one criterion, and the verdict's "wins" is the workload's. Under it, the overall
recommendation with its win probability (the share of joint draws of measurements and weights in which it leads,
:attr:`Decision.win_share`) and one line of what decides it. :func:`build` reads the decisions; :func:`blocks` is
the report's, and :mod:`bakeoff.cli.console` draws the same :class:`Card` as a rich table.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from bakeoff.analysis.bootstrap import RESAMPLES, TIE_BAND, Difference
from bakeoff.analysis.conditions import BUSY_MARK, busy_runs, display_name, timed
from bakeoff.analysis.decide import Decision, against
from bakeoff.analysis.quantities import CRITERIA, Criterion, fmt
from bakeoff.analysis.stats import ConfigSummary
from bakeoff.analysis.verdict import interval_text, outcome_text, percent, ratio_text
from bakeoff.measure.environment import OTHER_WORK_SHARE
from bakeoff.report.templates import Block, Heading, Para, Section, Table

LEADER = "★"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One cell: its text, and how it came out for the row's framework against the leader."""

    text: str
    # One of bootstrap.OUTCOMES ("better" | "worse" | "equal" | "unsettled"), "leader" (the leader's own value) or
    # "" (nothing to judge); the report's CSS class and the console's colour.
    outcome: str = ""


@dataclasses.dataclass(frozen=True)
class Row:
    section: str  # "text_classifier/tiny"
    framework: str  # "PyTorch (graph)": the framework and the mode of its best configuration
    standing: str  # the leader's: "wins" (robust), "wins, not robust", "leads, provisional", "equal"…; "… §" on busy
    win_probability: str  # "99.9%", or "—" where there are no joint draws worth a number
    cells: list[Cell]
    leader: bool = False


@dataclasses.dataclass(frozen=True)
class Card:
    """The card: its criteria (columns), rows, the recommendation, what decides it, and the legend."""

    criteria: list[str]
    rows: list[Row]
    recommendation: str
    decides: str
    legend: list[str]

    @property
    def header(self) -> list[str]:
        return ["workload", "framework", "verdict", "win prob.", *map(criterion_header, self.criteria)]

    def cells(self) -> list[list[Cell]]:
        """Every row as cells, the workload named on the first row of its group only."""
        out = []
        for i, r in enumerate(self.rows):
            first = i == 0 or self.rows[i - 1].section != r.section
            name = f"{LEADER} {r.framework}" if r.leader else r.framework
            out.append([Cell(r.section if first else ""), Cell(name, "leader" if r.leader else ""),
                        Cell(r.standing), Cell(r.win_probability), *r.cells])
        return out


def criterion_header(criterion: str) -> str:
    """A criterion's column header: a measured one's own (:attr:`~bakeoff.analysis.quantities.Criterion.header`;
    its unit is in the legend), another's name with its underscores spaced."""
    return CRITERIA[criterion].header if criterion in CRITERIA else criterion.replace("_", " ")


def _section(d: Decision) -> str:
    return f"{d.workload}/{d.preset}"


def _criteria(decisions: Sequence[Decision]) -> list[str]:
    """The criteria weighted in some decision: the measured ones in their order, then the others as met."""
    weighted = [c for d in decisions for c in d.weights]
    return [c for c in CRITERIA if c in weighted] + list(dict.fromkeys(c for c in weighted if c not in CRITERIA))


def _score(d: Decision, label: str, criterion: str) -> float | None:
    """A qualitative (or deployment) criterion's 0..5 score of configuration ``label``."""
    part = next((c.parts.get(criterion) for c in d.configs if c.label == label), None)
    return None if part is None else 5 * part


def _ratio_cell(diff: Difference) -> Cell:
    """``better 1.83x (1.76–1.89x)``, ``unsettled 1.50x (1.02–2.24x)`` from the row's side (``a``)."""
    if diff.ratio is None:
        return Cell("—")
    return Cell(outcome_text(diff), diff.outcome)


def _leader_cell(d: Decision, c: str, config: ConfigSummary) -> Cell:
    if c in CRITERIA:
        q = CRITERIA[c].quantity
        v = config.value(q.name)
        text = "—" if v is None else "never" if math.isinf(v) else fmt(v * q.scale)
        return Cell(text, "leader")
    score = _score(d, config.label, c)
    return Cell("—" if score is None else f"{score:.2g}/5", "leader")


def _other_cell(d: Decision, c: str, config: ConfigSummary, leader: ConfigSummary, runner_up: bool) -> Cell:
    if c in CRITERIA:
        diff = d.head_to_head[c].swapped() if runner_up and c in d.head_to_head else against(c, config, leader)
        return _ratio_cell(diff)
    mine, theirs = _score(d, config.label, c), _score(d, leader.label, c)
    if mine is None or theirs is None:
        return Cell("—")
    outcome = "better" if mine > theirs else "worse" if mine < theirs else "equal"  # scores given, not measured
    return Cell(f"{outcome} {mine:.2g} vs {theirs:.2g}", outcome)


def _standing(d: Decision) -> str:
    if d.winner is not None:
        return "leads, provisional" if d.provisional else "wins" if d.robust else "wins, not robust"
    if d.tie:  # every interval wholly inside the band
        return "equal"
    return "leads, unsettled" if len(d.ranking) > 1 else "only one compared"


def _shares(d: Decision) -> bool:
    """Whether the decision's joint draws are worth a number: two frameworks compared, and more than one run a side
    (one run has no spread to draw from)."""
    return bool(d.win_share) and not (d.runs is not None and min(d.runs) < 2)


def _busy(cell: Cell, criterion: str, *configs: ConfigSummary) -> Cell:
    """``cell`` marked :data:`BUSY_MARK` when it is a timing resting on a run of ``configs`` measured on a busy
    machine (a memory or a metric is not skewed by other work)."""
    if (criterion in CRITERIA and timed(CRITERIA[criterion].quantity) and cell.text != "—"
            and any(busy_runs(c) for c in configs)):
        return Cell(f"{cell.text} {BUSY_MARK}", cell.outcome)
    return cell


def _rows(d: Decision, summaries: Sequence[ConfigSummary], criteria: Sequence[str]) -> list[Row]:
    mine = {s.label: s for s in summaries if (s.workload, s.preset) == (d.workload, d.preset)}
    rows = []
    if d.ranking:
        leader = mine[d.ranking[0].label]
        for i, f in enumerate(d.ranking):
            config = mine[f.label]
            share = percent(d.win_share.get(f.framework, 0.0)) if _shares(d) else "—"
            if i == 0:
                cells = [_busy(_leader_cell(d, c, config), c, config) if c in d.weights else Cell("—")
                         for c in criteria]
            else:
                cells = [_busy(_other_cell(d, c, config, leader, i == 1), c, config, leader) if c in d.weights
                         else Cell("—") for c in criteria]
            standing = _standing(d) + (f" {BUSY_MARK}" if any(d.busy) else "")  # the verdict rests on busy runs
            rows.append(Row(_section(d), display_name(f.label), standing if i == 0 else "", share, cells,
                            leader=i == 0))
    for framework in d.unscored:
        rows.append(Row(_section(d), display_name(framework), "no successful trial", "—",
                        [Cell("—") for _ in criteria]))
    return rows


def _mean_share(framework: str, decisions: Sequence[Decision]) -> tuple[float, int] | None:
    """The framework's win share averaged over the decisions that drew for it, and how many did."""
    shares = [d.win_share[framework] for d in decisions if _shares(d) and framework in d.win_share]
    return (sum(shares) / len(shares), len(shares)) if shares else None


def _probability(framework: str, decisions: Sequence[Decision]) -> str:
    mean = _mean_share(framework, decisions)
    if mean is None:
        return "no win probability (one run a side: no spread to draw from)"
    share, n = mean
    over = "" if n == 1 else f", the mean over the {n} workloads it was compared on"
    return f"win probability {percent(share)} (the share of joint draws in which it leads{over})"


def _names(decisions: Sequence[Decision]) -> str:
    return ", ".join(_section(d) for d in decisions)


def _no_winner(d: Decision) -> str:
    return "equal" if d.tie else "unsettled"


def recommendation(decisions: Sequence[Decision]) -> str:
    """The framework the evidence favours across every workload, with its win probability; or why none."""
    compared = [d for d in decisions if len(d.ranking) > 1]
    if not compared:
        return ("No recommendation: no workload had two frameworks to compare"
                + (f" ({_names(decisions)}: its verdict below says why)" if decisions else "") + ".")
    wins: dict[str, list[Decision]] = {}
    for d in compared:
        if d.winner is not None:
            wins.setdefault(d.winner, []).append(d)
    if len(wins) == 1:
        (framework, won), = wins.items()
        rest = [d for d in compared if d not in won]
        name = display_name(framework)
        provisional = (" (provisional: fewer than 3 runs a side)" if any(d.provisional for d in won) else
                       " (not robust: see its verdict)" if any(not d.robust for d in won) else "")
        others = "; ".join(f"no winner on {_section(d)} ({_no_winner(d)})" for d in rest)
        wins_text = (f"wins {_names(won)}" if len(compared) == 1 else
                     f"wins {len(won)} of {len(compared)} compared workloads ({_names(won)})")
        return (f"{name}{provisional}: it {wins_text}{'; ' + others if others else ''}; "
                f"{_probability(framework, compared)}.")
    if wins:
        def each(framework: str, won: list[Decision]) -> str:
            share = _mean_share(framework, won)
            return f"{display_name(framework)} wins {_names(won)}" + (
                f" (win probability {percent(share[0])} there)" if share else "")

        return ("No single framework: " + "; ".join(
            each(fw, ds) for fw, ds in sorted(wins.items(), key=lambda kv: (-len(kv[1]), kv[0])))
                + " — win probability: the share of joint draws in which it leads.")
    leaning = max({f.framework for d in compared for f in d.ranking},
                  key=lambda fw: ((_mean_share(fw, compared) or (0.0, 0))[0], fw))
    lean = (f"; the evidence leans to {display_name(leaning)}, {_probability(leaning, compared)}"
            if _mean_share(leaning, compared) else "")
    return (f"No recommendation: no framework wins any workload "
            f"({'; '.join(f'{_no_winner(d)} on {_section(d)}' for d in compared)}){lean}.")


def _weightiest(d: Decision) -> str | None:
    """The leader's weightiest criterion won against the runner-up, as ``throughput on mnist/tiny (1.83x TensorFlow
    (graph)'s, 95% CI 1.76–1.89x)``."""
    lead, runner = d.ranking[0], d.ranking[1]
    parts = {c.label: c.parts for c in d.configs}

    def gain(c: str) -> float:
        return d.weights[c] * abs((parts[lead.label].get(c) or 0.0) - (parts[runner.label].get(c) or 0.0))

    for c in sorted(d.weights, key=gain, reverse=True):
        name = criterion_header(c)
        if c in d.head_to_head and d.head_to_head[c].better == "a":
            diff = d.head_to_head[c]
            ci = (f", {interval_text(diff.low, diff.high, diff.confidence)}" if diff.low is not None
                  and diff.high is not None else "")
            return f"{name} on {_section(d)} ({ratio_text(diff.ratio)} {display_name(runner.label)}'s{ci})"
        if c not in CRITERIA and gain(c) > 0 and (parts[lead.label].get(c) or 0) > (parts[runner.label].get(c) or 0):
            return (f"{name} on {_section(d)} ({5 * (parts[lead.label][c] or 0):.2g} vs "
                    f"{5 * (parts[runner.label][c] or 0):.2g}, a score given, not measured)")
    return None


def decides(decisions: Sequence[Decision]) -> str:
    """One line of what decides the recommendation: each winner's weightiest criterion won, per workload."""
    compared = [d for d in decisions if len(d.ranking) > 1]
    won = [w for d in compared if d.winner is not None and (w := _weightiest(d))]
    if won:
        return "; ".join(won) + "."
    if compared and all(d.tie for d in compared):
        return (f"nothing measured: the frameworks are within ±{TIE_BAND:.0%} of each other on every weighted "
                "criterion, so what cannot be measured (qualitative criteria, scored in the suite) decides.")
    if compared:
        return ("nothing yet: no leader is better on criteria that weigh more than those still unsettled; more "
                "runs (--repeats, or --repeats auto) narrow the intervals, and each verdict says what would settle "
                "its unsettled criteria.")
    return "nothing: there is no comparison."


def _explained(c: Criterion, summaries: Sequence[ConfigSummary]) -> str:
    """What the legend says of measured criterion ``c``: its header, then its legend with its unit and the
    workloads' metric filled in (each metric with its workloads, where they differ)."""
    metrics: dict[str, list[str]] = {}
    for s in summaries:
        metrics.setdefault(s.metric_name or "metric", []).append(f"{s.workload}/{s.preset}")
    if "{metric}" not in c.legend or len(metrics) <= 1:
        return c.explained(next(iter(metrics), "metric"))
    what = ", ".join(f"{m} ({', '.join(dict.fromkeys(where))})" for m, where in metrics.items())
    return c.explained("the workload's metric") + f", {what}"


def _legend(decisions: Sequence[Decision], summaries: Sequence[ConfigSummary], criteria: Sequence[str]) -> list[str]:
    units = []
    for c in criteria:
        if c in CRITERIA:
            units.append(_explained(CRITERIA[c], summaries))
        else:
            units.append(f"{c.replace('_', ' ')}: a 0..5 score given in the suite, not measured"
                         if not c.startswith("deploy_") else f"{c.replace('_', ' ')}: 0..5, scored from the stored "
                                                                "deployments, 5 = the best")
    legend = [f"Each framework by its best configuration (its mode in brackets). {LEADER}: the workload's leader, "
              f"with its medians — {'; '.join(units)}.",
              "Others vs the leader: ratio of medians (time, memory: above 1x is more), 95% interval; better/worse: "
              f"wholly beyond ±{TIE_BAND:.0%}, equal: wholly inside, unsettled: neither or 1 run.",
              f"win prob.: how often it scores highest in {RESAMPLES:,} joint draws of the runs and the weights "
              "(each ×½–2); — with one run a side."]
    if any(c not in d.weights for d in decisions for c in criteria):
        legend.append("— under a criterion: not counted on that workload (its verdict below says why).")
    return legend


def busy_legend(rows: Sequence[Row]) -> str | None:
    """The legend of :data:`BUSY_MARK`, when some row's verdict or cell carries it."""
    if not any(BUSY_MARK in r.standing or any(BUSY_MARK in c.text for c in r.cells) for r in rows):
        return None
    return (f"{BUSY_MARK}: rests on runs measured while other processes used more than {OTHER_WORK_SHARE:.0%} of "
            "their cores during the steady steps — a verdict marked so is never robust (it names the runs), a "
            "timing marked so is suspect; `bakeoff run --retry-busy` measures those runs again and keeps the "
            "quieter measurement.")


def build(decisions: Mapping[tuple[str, str], Decision], summaries: Sequence[ConfigSummary]) -> Card:
    """The card of every decision in the report."""
    ds = list(decisions.values())
    criteria = _criteria(ds)
    rows = [row for d in ds for row in _rows(d, summaries, criteria)]
    legend = _legend(ds, summaries, criteria) + ([busy] if (busy := busy_legend(rows)) else [])
    return Card(criteria, rows, recommendation(ds), decides(ds), legend)


def blocks(card: Card) -> list[Block]:
    """The report's card: its heading, the recommendation and what decides it, then the coloured table."""
    cells = card.cells()
    # In HTML a ratio and its interval are two lines of one cell: the card fits 1280 px without scrolling.
    texts = [[c.text.replace(" (", "\n(", 1) if i >= 4 else c.text for i, c in enumerate(row)] for row in cells]
    table = Table(card.header, texts, card.legend,
                  align="lllr" + "r" * len(card.criteria),
                  classes=[[c.outcome + (" group" if row[0].text and i else "") for c in row]
                           for i, row in enumerate(cells)])
    return [Section("decision", [Heading(2, "Decision"), Para(card.recommendation, "recommendation"),
                                 Para(card.decides, "decides"), table])]

