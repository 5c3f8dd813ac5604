"""Adaptive repeats (``repeats = "auto"``, ``--repeats auto``): as many runs as the verdicts need, and no more.

Every configuration runs :data:`~bakeoff.plan.suite_checks.FIRST_REPEATS` times. Then, look after look, each section (a
workload at one preset and its overrides, a data set of its own: :func:`bakeoff.analysis.stats.summarise_groups`)
whose verdict is not settled — no winner, and not shown equal (:attr:`bakeoff.analysis.decision.Decision.settled`) —
gets one more run of every one of its configurations, until every verdict is settled or the configurations have
``max`` runs.

Stopping once a verdict looks settled makes a chance "wins" likelier than a fixed number of runs would. So every run
made here records its run's plan, first and most runs (its ``adaptive_repeats`` section), and a verdict over such
runs reads its intervals at the level of a group-sequential design at the look reached
(:func:`bakeoff.analysis.decide.look_confidence`), whenever and however the report is made. The error rates of the
whole procedure are measured by simulation (``tests/test_calibration.py``,
:attr:`bakeoff.analysis.calibration.Scenario.max_runs`).

A run interrupted between looks resumes as any run does: the repeats already stored are skipped, and the looks
are taken again from what is stored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bakeoff.core.result import AdaptiveRepeats
from bakeoff.core.spec import RunSpec
from bakeoff.results.store import Store
from bakeoff.run import runner


def record(first: int, most: int) -> dict[str, Any]:
    """What each run of an adaptive run records (:meth:`~bakeoff.core.result.TrialResult.annotate`): its plan,
    and the looks it allows."""
    return {"adaptive_repeats": AdaptiveRepeats(first=first, max=most, looks=most - first + 1)}


def unsettled(results: Sequence[Any], weights: Mapping[str, float], qualitative: Mapping[str, Any]) -> set[str]:
    """The keys of the stored ``results`` that belong to a section whose verdict is not settled."""
    from bakeoff.analysis.decide import decide_each
    from bakeoff.analysis.stats import summarise_groups

    summaries = summarise_groups(results)
    decisions = decide_each(summaries, weights, qualitative)
    return {r.key for s in summaries if not decisions[(s.workload, s.preset)].settled for r in s.trials}


def run(specs: Sequence[RunSpec], store: Store, suite: str, first: int, most: int, weights: Mapping[str, float],
        qualitative: Mapping[str, Any], say: Callable[[str], None] = lambda line: None,
        annotations: Mapping[str, dict] | None = None, grow: Callable[[int], None] | None = None,
        **options: Any) -> runner.RunSummary:
    """Run ``specs`` (the first ``first`` repeats of every configuration), then add repeats where the verdict is
    unsettled, up to ``most`` runs. ``grow(n)`` is told of the ``n`` trials each look adds; ``options`` are
    :func:`bakeoff.run.runner.run`'s. The summary covers every look."""
    plan = record(first, most)
    notes = {spec.key(): {**(annotations or {}).get(spec.key(), {}), **plan} for spec in specs}
    summary = runner.run(specs, store, suite, annotations=notes, say=say, **options)
    total = runner.RunSummary(ran=list(summary.ran), skipped=list(summary.skipped), specs=list(summary.specs))
    for repeat in range(first, most):
        results = store.results(suite=suite, keys=[s.key() for s in total.specs])
        open_keys = unsettled(results, weights, qualitative)
        configurations = {_configuration(s): s for s in total.specs if s.key() in open_keys}
        if not configurations:
            say(f"adaptive repeats: every verdict settled after {repeat} runs per configuration")
            return total
        sections = sorted({f"{s.workload}/{s.preset}" for s in configurations.values()})
        say(f"adaptive repeats: {', '.join(sections)} not settled after {repeat} runs per configuration: "
            f"run {repeat + 1} of at most {most}")
        more = [dataclasses.replace(s, repeat=repeat, seed=s.seed - s.repeat + repeat, content=())
                for s in configurations.values()]
        if grow is not None:
            grow(len(more))
        step = runner.run(more, store, suite, annotations={s.key(): plan for s in more}, say=say, **options)
        total.ran += step.ran
        total.skipped += step.skipped
        total.specs += step.specs
    say(f"adaptive repeats: stopped at {most} runs per configuration (--max-repeats)")
    return total


def _configuration(spec: RunSpec) -> RunSpec:
    """The configuration a spec is a repeat of (its repeat and seed set to the first's)."""
    return dataclasses.replace(spec, repeat=0, seed=spec.seed - spec.repeat)
