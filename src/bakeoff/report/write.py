"""The decision report of a set of stored results, as ``bakeoff run``, ``report`` and ``deploy`` write it: each
section's decision (the deployment criteria scored from the stored deployments when one of them is weighted), the
rendered report, and what a reader is told first (each verdict, and the scaling sentence where there is one).

:func:`stored` reads what a report of a store needs (its results, the suites they ran in, the weights and scores to
decide with, the deployments); :func:`write_report` decides and renders. Neither prints: the CLI says what they
return.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bakeoff.analysis.decide import Decision, decide, decide_each
from bakeoff.analysis.scaling import scaling_rows, scaling_sentence
from bakeoff.analysis.stats import ConfigSummary, sections, summarise_groups
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import SpecError
from bakeoff.predict.team import Team, check_against
from bakeoff.report import capacity_tables, declared, deployment
from bakeoff.report import card as decision_card
from bakeoff.report.render import render_report


@dataclasses.dataclass(frozen=True)
class Written:
    """A written report: its files (``html``, ``markdown``, ...), each section's decision and the summaries."""

    paths: dict[str, Path]
    decisions: dict[tuple[str, str], Decision]
    summaries: list[ConfigSummary]

    def headlines(self) -> list[tuple[str, str]]:
        """What a reader is told first, as (heading, text): each section's verdict, then its scaling sentence."""
        out = []
        for (workload, preset), decision in self.decisions.items():
            out.append(("verdict", decision.verdict))
            configs = [s for s in self.summaries if (s.workload, s.preset) == (workload, preset)]
            scaling = scaling_sentence(scaling_rows(configs), configs)
            if scaling:
                out.append(("scaling", scaling.removeprefix("Scaling: ")))
        return out

    def card(self) -> decision_card.Card:
        """The decision card across every section, as the report opens with it."""
        return decision_card.build(self.decisions, self.summaries)


def decisions(summaries: Sequence[ConfigSummary], weights: Mapping[str, float] | None,
              qualitative: Mapping[str, Any] | None,
              deployments: Sequence[Mapping[str, Any]] = (), team: Team | None = None
              ) -> dict[tuple[str, str], Decision]:
    """The decision of each workload and preset; when a deployment criterion is weighted, with the deployment
    criteria scored from that workload's stored ``deployments`` (refused when it has none); with a ``team`` file,
    with its declared criteria scored per section (:func:`bakeoff.report.declared.scores`), its weights under
    ``weights``."""
    weights = {**(team.weights if team else {}), **(weights or {})}
    measured = any(weights.get(c) for c in deployment.CRITERIA)
    if not measured and team is None:
        return decide_each(summaries, weights or None, qualitative or None)
    if team is not None:
        check_against(team, qualitative or {}, "being reported")
    rows = deployment.latest(deployments)
    out = {}
    for key in sections(summaries):
        mine = [r for r in rows if (r["workload"], r["preset"]) == key]
        configs = [s for s in summaries if (s.workload, s.preset) == key]
        frameworks = sorted({s.framework for s in configs})
        scores: dict[str, dict[str, float]] = {}
        if measured:
            if not mine:
                raise SpecError(f"a deployment criterion is weighted, but no deployment of {key[0]} / {key[1]} is "
                                f"stored: run `bakeoff deploy --workload {key[0]} --preset {key[1]}` first")
            scores.update(deployment.criteria(mine, frameworks))
        scores.update(declared.scores(team, frameworks, mine, *key))
        out[key] = decide(configs, weights, {**(qualitative or {}), **scores})
    return out


def write_report(results: Sequence[TrialResult], out: Path, weights: Mapping[str, float] | None,
                 qualitative: Mapping[str, Any] | None, title: str, suites: Mapping[str, str] | None = None,
                 deployments: Sequence[Mapping[str, Any]] = (), team: Team | None = None,
                 plans: Sequence[tuple[str, Mapping[str, Any]]] = (), covers: str = "",
                 suite_files: Mapping[str, str] | None = None, again: str = "bakeoff report") -> Written:
    """Decide each section of ``results`` and write the report into ``out`` (Markdown, HTML, plots); with a
    ``team`` file, its declared criteria in the decision and in their own section; with ``plans``
    (:func:`bakeoff.predict.capacity.load_plans`), a "Capacity plan" section calibrated by ``results``; ``covers``:
    what the results are, when more than one command's (its first sentence); ``again``: the command that writes
    it again (named when the disk is full)."""
    summaries = summarise_groups(results)
    decided = decisions(summaries, weights, qualitative, deployments, team)
    frameworks = {key: sorted({s.framework for s in summaries if (s.workload, s.preset) == key}) for key in decided}
    paths = render_report(results, out, weights=weights or None, qualitative=qualitative or None, title=title,
                          suites=suites, decisions=decided, deployments=deployments,
                          declared_section=declared.blocks(team, decided, frameworks, deployments),
                          plan_section=capacity_tables.blocks(plans, results), covers=covers, suite_files=suite_files,
                          again=again)
    return Written(paths, decided, summaries)


@dataclasses.dataclass(frozen=True)
class Stored:
    """What a report of a store is made of (:func:`stored`)."""

    results: list[TrialResult]
    suites: dict[str, str]  # trial key -> the suite it ran in
    suite_files: dict[str, str]  # suite name -> the file it was read from (as recorded)
    suite_name: str | None
    weights: dict[str, float]
    qualitative: dict
    deployments: list[dict]


def stored(store_path: Path, suite: str | None, given_weights: Mapping[str, str], said: str = "",
           team: Team | None = None) -> Stored:
    """The results of ``suite`` (every trial when None) in the store at ``store_path``, with the weights and
    qualitative scores to decide them with: a shipped suite's or a suite file's, else those the suite was recorded
    with when it ran, ``given_weights`` over them; and the stored deployments of their workloads. ``said``: how
    the weights were given (``--weight a=1``), named when they are refused. ``team``: a team file, whose criteria
    ``given_weights`` may weigh."""
    from bakeoff.plan.suite import load_suite, shipped_suites
    from bakeoff.plan.suite_checks import check_weights
    from bakeoff.results.store import Store

    weights: dict[str, float] = {}
    qualitative: dict = {}
    from_file = bool(suite and (suite in shipped_suites() or suite.endswith(".toml")))
    suite_name = suite
    if from_file:
        loaded = load_suite(suite)
        weights, qualitative, suite_name = loaded.weights, loaded.qualitative, loaded.name
    # accepted by name; scored from the stored deployments (and the team file's declarations)
    deploy_criteria = dict.fromkeys([*deployment.CRITERIA, *(team.criteria if team else ())], {})
    try:
        weights = check_weights({**weights, **given_weights}, {**qualitative, **deploy_criteria})
    except SpecError as exc:
        raise SpecError(f"{said}: {exc}" if said else str(exc)) from None
    if not store_path.exists():
        raise SpecError(f"no results store at {store_path}; run `bakeoff run` first (or pass --store)")
    with Store(store_path) as store:
        recorded = store.suite_settings(suite_name) if suite_name and not from_file else None
        if recorded:  # a suite known by name only: its weights and scores as they were when it ran
            qualitative = recorded["qualitative"]
            weights = check_weights({**recorded["weights"], **given_weights}, {**qualitative, **deploy_criteria})
        results = store.results(suite=suite_name)
        suites = {row.key: row.suite for row in store.trials(suite=suite_name)}
        suite_files = store.suite_files()
        workloads = {r.run_spec.workload for r in results}
        deployments = [d for d in store.deployments() if d["workload"] in workloads]
        if not results:
            have = ", ".join(store.suites()) or "none"
            raise SpecError(f"no trials for suite {suite_name!r} in {store_path}; suites recorded: {have}")
    if team is not None:
        check_against(team, qualitative, suite_name or "(all trials)")
    return Stored(results, suites, suite_files, suite_name, weights, qualitative, deployments)
