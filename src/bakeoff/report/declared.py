"""Declared criteria in the report: the team's familiarity with each framework and the deployment targets the
project needs (a team file, :mod:`bakeoff.predict.team`), each shown with who declared it and when, apart from what was
measured. A declared target is checked against what ``bakeoff deploy`` exported and ran: met, not met or not tried,
with the evidence.

Both enter a decision as the qualitative criteria do: a 0..5 score per framework, divided by 5, times its weight
(0 unless the team file or ``bakeoff report --weight`` gives one):

* ``team_familiarity``: the survey's mean proficiency (:func:`bakeoff.predict.team.familiarity`);
* ``deploy_targets``: 5 × the share of the needed targets met in that workload and preset; a target not tried
  counts as not met (the report says which).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bakeoff.analysis.conditions import display_name
from bakeoff.analysis.decide import Decision
from bakeoff.core.formats import FORMATS
from bakeoff.predict.team import FAMILIARITY, KNOWS, SCALE, TARGETS, Team, framework_order, scale_text
from bakeoff.report import deployment
from bakeoff.report.templates import Block, Heading, Para, Table

CRITERIA = {FAMILIARITY: "the team's mean proficiency 0..5 (a team survey)",
            TARGETS: "5 × the share of the needed deployment targets met (declared needs, checked against "
                     "`bakeoff deploy`)"}
"""The criteria a team file declares, and what each scores."""

DECLARED_MARK = "declared"


@dataclasses.dataclass(frozen=True)
class TargetCheck:
    """One needed target for one framework: ``outcome`` is "met", "not met" or "not tried"; ``evidence`` says
    what was deployed (or why not)."""

    framework: str
    target: str
    outcome: str
    evidence: str


def _reaches(row: Mapping[str, Any]) -> set[str]:
    """The targets a stored row's format reaches: those stored with it and those its format record names now."""
    fmt = FORMATS.get(row.get("format", ""))
    return set(row.get("targets", [])) | (set(fmt.targets) if fmt else set())


def _why(row: Mapping[str, Any]) -> str:
    name = row.get("display", row.get("format", "?"))
    if row.get("status") != "ok":
        return f"{name} {row.get('status')} at {row.get('stage') or 'export'}: {str(row.get('reason', ''))[:120]}"
    if deployment.usable(row):  # a quantised format whose metric moved beyond the bound
        return f"{name} ran, but its metric moved beyond the bound of {deployment.QUANTISED_BOUND:g}"
    return f"{name} ran, but its outputs differ from the framework model's (max |Δ| " \
           f"{row.get('inference', {}).get('max_abs_diff', '?')})"


def check_targets(needed: Sequence[str], rows: Sequence[Mapping[str, Any]], frameworks: Iterable[str],
                  workload: str, preset: str) -> list[TargetCheck]:
    """Each needed target for each framework, from the stored deployment rows of one workload and preset.

    Met: a format reaching it exported, ran in its runtime and matched the framework model (a quantised one: its
    metric within :data:`bakeoff.report.deployment.QUANTISED_BOUND`). Not met: formats reaching it were tried and
    none did. Not tried: no stored row of a format reaching it.
    """
    latest = deployment.latest(rows)
    out = []
    for fw in frameworks:
        for target in needed:
            tried = [r for r in latest if r["framework"] == fw and target in _reaches(r)]
            good = [r for r in tried if deployment.counts(r)]
            if good:
                out.append(TargetCheck(fw, target, "met", "; ".join(
                    f"{r.get('display', r['format'])} exported, ran and matched"
                    + (f" (deployed {str(r['finished_at'])[:10]})" if r.get("finished_at") else "") for r in good)))
            elif tried:
                out.append(TargetCheck(fw, target, "not met", "; ".join(_why(r) for r in tried)))
            else:
                possible = [f.display for f in FORMATS.values() if f.framework == fw and target in f.targets]
                why = (f"no stored deployment of {', '.join(possible)}: run `bakeoff deploy --workload {workload} "
                       f"--preset {preset}`" if possible else
                       f"bakeoff exports no {display_name(fw)} format that reaches {target}")
                out.append(TargetCheck(fw, target, "not tried", why))
    return out


def scores(team: Team | None, frameworks: Sequence[str], rows: Sequence[Mapping[str, Any]], workload: str,
           preset: str) -> dict[str, dict[str, float]]:
    """``{criterion: {framework: 0..5}}`` of the criteria ``team`` declares, for one workload and preset."""
    if team is None:
        return {}
    out = {}
    if team.answers:
        out[FAMILIARITY] = team.familiarity(frameworks)
    if team.needs is not None:
        checks = check_targets(team.needs.targets, rows, frameworks, workload, preset)
        out[TARGETS] = {fw: 5 * sum(c.outcome == "met" for c in checks if c.framework == fw)
                        / len(team.needs.targets) for fw in frameworks}
    return out


def describe(criterion: str, decision: Decision) -> tuple[str, str]:
    """The Weights table's "kind" and "what it scores" of a declared criterion: its scores as the decision used
    them (0..5)."""
    shown = {cfg.framework: cfg.parts.get(criterion) for cfg in decision.configs}
    return (DECLARED_MARK + " (see Declared criteria)", f"{CRITERIA[criterion]}, /5: " + ", ".join(
        f"{display_name(fw)} {5 * v:.2g}" for fw in framework_order(shown) if (v := shown[fw]) is not None))


def _weight_note(criterion: str, decision: Decision | None) -> str:
    if decision is None:
        return ""
    used = decision.weights.get(criterion)
    return (f"weight {decision.given.get(criterion, 0):g} (normalised {used:.3f})" if used
            else "weight 0: shown, not counted (set one with `weight =` in the team file or "
                 f"`bakeoff report --weight {criterion}=W`)")


def blocks(team: Team | None, decisions: Mapping[tuple[str, str], Decision],
           frameworks: Mapping[tuple[str, str], Sequence[str]],
           deployments: Sequence[Mapping[str, Any]]) -> list[Block]:
    """The report's "Declared criteria" section (empty without a team file): the survey and its score per
    framework, then per workload and preset each needed target's check."""
    if team is None:
        return []
    first = next(iter(decisions.values()), None)
    out: list[Block] = [Heading(2, "Declared criteria"), Para(
        f"Not measured by bakeoff: declared in {team.path}, each value with who declared it and when. They enter "
        "a decision only through their weight, as qualitative scores do (0..5, divided by 5).")]
    if team.answers:
        every = framework_order({fw for names in frameworks.values() for fw in names}
                                | {fw for a in team.answers for fw in a.levels})
        score = team.familiarity(every)
        n = len(team.answers)
        rows = [[display_name(fw), f"{score[fw]:.2f}",
                 f"{sum(a.levels.get(fw, 0) >= KNOWS for a in team.answers)} of {n}",
                 f"{sum(fw in a.levels for a in team.answers)} of {n}"] for fw in every]
        sources = "; ".join(p.text() for p in team.provenance())
        out += [Heading(3, "Team familiarity (declared)"),
                Table(["framework", "team_familiarity 0..5 (declared)", f"at level {KNOWS}+", "rated it"], rows,
                      notes=[f"{n} people answered ({', '.join(a.person for a in team.answers)}); {sources}.",
                             f"Scale: {scale_text()}. Score: the mean level over every person who answered, a "
                             f"framework a person did not rate counting as 0 ({SCALE[0]}). "
                             f"At level {KNOWS}+: {SCALE[KNOWS]} or more.",
                             f"In the decision: {_weight_note(FAMILIARITY, first)}."], align="lrrr")]
    if team.needs is not None:
        needs = team.needs
        out += [Heading(3, "Deployment targets (declared need, checked against `bakeoff deploy`)"),
                Para(f"Needed: {', '.join(needs.targets)} — {needs.provenance.text()}. In the decision: "
                     f"{_weight_note(TARGETS, first)}; score 5 × the share of these met, not tried counting as "
                     "not met.")]
        for key in decisions:
            rows_here = [r for r in deployments if (r["workload"], r["preset"]) == key]
            checks = check_targets(needs.targets, rows_here, framework_order(frameworks.get(key, ())), *key)
            out += [Heading(4, f"{key[0]} / {key[1]}"),
                    Table(["framework", "target", "outcome (measured)", "evidence"],
                          [[display_name(c.framework), c.target, c.outcome, c.evidence] for c in checks],
                          notes=["Met: a format reaching the target exported here, ran in its runtime and matched "
                                 "the framework model (a quantised one within its metric bound); not met: such "
                                 "formats were tried and none did; not tried: none is stored."], align="llll")]
    return out
