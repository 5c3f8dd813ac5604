"""Render trial results as a decision report: ``report.md``, a self-contained ``report.html``, and two PNGs.

First the decision card across every workload (:mod:`bakeoff.report.card`), then the plots. Then per (workload,
preset), in this order: the verdict, a warning when the trials differ in what a comparison needs equal (data,
versions, settings), what ran and the command that reproduces it (:mod:`bakeoff.report.what_ran`), one row per
configuration with every measured quantity of :data:`~bakeoff.analysis.quantities.QUANTITIES` (noisy values
marked, missing ones explained), memory, run conditions (threads, machine load), the head-to-head differences with
their intervals, the scores of every mode, the weights, the robustness of the verdict, the trials that did not
succeed, and the environment (folded away).

This module orders the sections and writes the files; the tables of measured values are built in
:mod:`bakeoff.report.config_tables`, the head-to-head and each mode against its baseline in
:mod:`bakeoff.report.head_to_head`, the scores, weights and robustness in :mod:`bakeoff.report.decision_tables`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bakeoff.analysis.decide import Decision, Qualitative, decide_each
from bakeoff.analysis.scaling import scaling_rows, scaling_sentence
from bakeoff.analysis.stats import ConfigSummary, short_reason, summarise_groups
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import SpecError, Status
from bakeoff.report import card, claim_verdicts, deployment, plots
from bakeoff.report.config_tables import (
    batch_search_table,
    comparison_table,
    conditions_table,
    memory_table,
    scaling_table,
)
from bakeoff.report.decision_tables import robustness_blocks, scores_table, weights_table
from bakeoff.report.head_to_head import head_to_head_table, mode_effects_table
from bakeoff.report.templates import Block, Details, Heading, Image, Para, Table, to_html, to_markdown
from bakeoff.report.what_ran import mix_warning, what_ran_blocks


def _failures_block(configs: Sequence[ConfigSummary]) -> Block:
    rows = [[c.label, str(r.run_spec.seed), str(r.run_spec.repeat), r.status.value, short_reason(r.reason, 300)]
            for c in configs for r in c.trials if r.status is not Status.OK]
    if not rows:
        return Para("Every trial succeeded.")
    return Table(["configuration", "seed", "repeat", "status", "reason"], rows, align="lrrll")


def _flatten(env: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in env.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = str(v)
    return out


def environment_line(configs: Sequence[ConfigSummary]) -> str:
    """Every environment key the trials recorded; a key whose value differs lists each value with its framework.

    The load averages and the other work on a trial's cores, which differ from trial to trial, are in the
    run-conditions table instead.
    """
    seen: dict[str, dict[str, list[str]]] = {}  # key -> value -> frameworks
    for c in configs:
        for r in c.trials:
            for k, v in _flatten(r.environment).items():
                if k.startswith(("load_average", "cpu_sharing")):
                    continue
                frameworks = seen.setdefault(k, {}).setdefault(v, [])
                if c.framework not in frameworks:
                    frameworks.append(c.framework)
    parts = []
    for key, values in seen.items():
        if len(values) == 1:
            parts.append(f"{key} {next(iter(values))}")
        else:
            parts.append(f"{key} " + ", ".join(f"{v} ({'/'.join(fws)})" for v, fws in values.items()))
    return "Environment: " + (" · ".join(parts) if parts else "not recorded")


def _section(configs: Sequence[ConfigSummary], decision: Decision, qualitative: Qualitative,
             suites: Mapping[str, str], suite_files: Mapping[str, str] | None = None) -> list[Block]:
    warning = mix_warning(decision.mixes)
    scaling = scaling_sentence(scaling_rows(configs), configs)
    blocks: list[Block] = [
        Heading(2, f"{decision.workload} / {decision.preset}"),
        Para(decision.verdict, "verdict"),
        *([Para(scaling, "verdict")] if scaling else []),
        *([warning] if warning else []),
        *what_ran_blocks(configs, suites, suite_files),
        Heading(3, "Configurations"),
        comparison_table(configs),
    ]
    for heading, table in (("Memory", memory_table(configs)), ("Scaling", scaling_table(configs)),
                           ("Run conditions", conditions_table(configs)),
                           ("Head to head", head_to_head_table(decision))):
        if table is not None:
            blocks += [Heading(3, heading), table]
    effects = mode_effects_table(configs)
    if effects is not None:
        blocks += [Heading(3, "What each mode buys"), effects]
    searched = batch_search_table(configs)
    if searched is not None:
        blocks += [Heading(3, "Batch-size search"), searched]
    if decision.configs:
        blocks += [Heading(3, "Scores (every mode)"), scores_table(decision)]
    blocks += [Heading(3, "Weights"), weights_table(decision, qualitative),
               Heading(3, "Robustness of the verdict"), *robustness_blocks(decision),
               Heading(3, "Trials that did not succeed"), _failures_block(configs),
               Details("Environment", [Para(environment_line(configs), "env")])]
    return blocks


def render_report(results: Sequence[TrialResult], out_dir: Path, weights: Mapping[str, float] | None = None,
                  qualitative: Qualitative | None = None, title: str = "bakeoff report",
                  suites: Mapping[str, str] | None = None,
                  decisions: Mapping[tuple[str, str], Decision] | None = None,
                  deployments: Sequence[Mapping[str, Any]] = (),
                  declared_section: Sequence[Block] = (), plan_section: Sequence[Block] = (),
                  covers: str = "", suite_files: Mapping[str, str] | None = None,
                  again: str = "bakeoff report") -> dict[str, Path]:
    """Write ``report.md``, ``report.html``, ``throughput.png`` and ``quality_vs_time.png`` into ``out_dir``.

    Args:
        results: every trial, any mix of workloads, presets, configurations and statuses.
        out_dir: created if missing; existing report files in it are overwritten.
        weights: criterion -> weight, merged over :func:`bakeoff.analysis.decide.default_weights`.
        qualitative: ``{criterion: {framework: 0..5}}`` for criteria that cannot be measured.
        title: the report's heading.
        suites: trial key -> the suite it was stored under, for the ``bakeoff run --suite NAME`` line of "Reproduce"
            (a result's ``execution.suite`` is read when a key is missing).
        decisions: :func:`bakeoff.analysis.decide.decide_each` of these results with these weights, when the caller
            already has them (the bootstrap is not run twice); computed here otherwise.
        deployments: stored deployment rows (:meth:`bakeoff.results.store.Store.deployments`) for the Deployment
            section.
        declared_section: the "Declared criteria" section (:func:`bakeoff.report.declared.blocks`), before Deployment.
        plan_section: the "Capacity plan" section (:func:`bakeoff.report.capacity_tables.blocks`), before Claims.
        covers: what the results are, when they are more than one command's (the report's first sentence).
        suite_files: suite name -> the file it was read from, as the store recorded it (the "Reproduce" line).
        again: the command that writes this report again, for the error when the disk is full (the store and
            folder the user gave, not the defaults).

    Returns:
        ``{"markdown", "html", "throughput", "quality_vs_time"}`` (and ``"scaling"`` when distributed trials
        ran) -> the path written.
    """
    out_dir = report_folder(out_dir)
    qualitative = qualitative or {}
    summaries = summarise_groups(results)
    if decisions is None:
        decisions = decide_each(summaries, weights, qualitative)
    groups = {key: [s for s in summaries if (s.workload, s.preset) == key] for key in decisions}

    images = {"throughput": Image("throughput.png", "steady throughput per configuration",
                                  plots.throughput_png(groups)),
              "quality_vs_time": Image("quality_vs_time.png", "quality against training time, one line per trial",
                                       plots.quality_png(groups))}
    scaled = {key: rows for key, configs in groups.items() if (rows := scaling_rows(configs))}
    if scaled:
        images["scaling"] = Image("scaling.png", "throughput and scaling efficiency against replicas",
                                  plots.scaling_png(scaled))
    n_ok = sum(r.status is Status.OK for r in results)
    blocks: list[Block] = [Para(f"{covers} {len(results)} trials ({n_ok} successful) in {len(summaries)} "
                                f"configurations on {len(decisions)} workload/preset "
                                f"pair{'s' if len(decisions) != 1 else ''}.".lstrip())]
    blocks += card.blocks(card.build(decisions, summaries))
    blocks += [Heading(2, "Plots"), *images.values()]
    for key, decision in decisions.items():
        blocks += _section(groups[key], decision, qualitative, suites or {}, suite_files)
    blocks += [*declared_section, *deployment.blocks(deployments), *plan_section]
    blocks += claim_verdicts.section(results, deployments)

    paths = {"markdown": out_dir / "report.md", "html": out_dir / "report.html"}
    contents = {"markdown": to_markdown(title, blocks).encode(), "html": to_html(title, blocks).encode()}
    for name, image in images.items():
        paths[name], contents[name] = out_dir / image.filename, image.png
    write_all({paths[name]: data for name, data in contents.items()}, again)
    return paths


def report_folder(out_dir: Path | str) -> Path:
    """``out_dir``, created if missing; a clear error when it is a file or cannot be made."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise SpecError(f"--out {out_dir} is a file; a report is a folder (report.html, report.md, its plots): "
                        "name a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"cannot create the report folder {out_dir}: {exc.strerror or exc}") from None
    return out_dir


def write_all(files: dict[Path, bytes], again: str = "bakeoff report") -> None:
    """Write every file or none: each to a temporary beside it first, then all renamed into place, so a full disk
    leaves the previous report as it was, not half of a new one; the error names ``again``, the command that
    writes them again."""
    written: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            temporary = path.with_name(f".{path.name}.part")
            written.append((temporary, path))
            temporary.write_bytes(data)
    except OSError as exc:
        for temporary, _ in written:
            temporary.unlink(missing_ok=True)
        folder = next(iter(files)).parent
        raise SpecError(f"could not write the report in {folder} ({exc.strerror or exc}); nothing in it was "
                        f"replaced: make room and run `{again}`") from None
    for temporary, path in written:
        temporary.replace(path)
