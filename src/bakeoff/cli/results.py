"""``bakeoff report``, ``show``, ``compare`` and ``prune``: what a store holds, for people and for CI."""

from __future__ import annotations

import argparse
from pathlib import Path
from shlex import quote
from typing import TYPE_CHECKING

from bakeoff.cli.options import DEFAULT_REPORTS, DEFAULT_STORE, key_values

if TYPE_CHECKING:
    from bakeoff.predict.team import Team
    from bakeoff.report.write import Stored, Written


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    report = sub.add_parser("report", help="write the decision report (Markdown + self-contained HTML)")
    report.add_argument("--store", type=Path, default=DEFAULT_STORE)
    report.add_argument("--suite", help="report only this suite's trials (a name recorded in the store); "
                                        "its weights and qualitative scores are used when it is a suite file")
    report.add_argument("--out", type=Path, help="report directory (default: reports/<suite or all>)")
    report.add_argument("--weight", action="append", default=[], metavar="CRITERION=W",
                        help="decision weight, repeatable: a measured criterion such as throughput, "
                             "time_to_target, first_step, memory (the training increment), quality or energy (a name "
                             "not known is refused with the list), or a qualitative criterion")
    report.add_argument("--survey", type=Path, metavar="TEAM.toml",
                        help="a team file: the team's proficiency per framework and the deployment targets the "
                             "project needs, each with its source and date (examples/team.toml); shown as declared, "
                             "weighed as team_familiarity and deploy_targets")
    report.add_argument("--plan", type=Path, metavar="PLANS.toml",
                        help="a plan file: one [[plan]] table a model and machine you cannot try (a name and "
                             "bakeoff plan's fields: examples/plans.toml); the report gets a Capacity plan section, "
                             "timed at the MFU these trials measured and calibrated by them")
    report.add_argument("--export", type=Path, help="also export the trials as .json or .csv")
    report.add_argument("--format", choices=("html", "json"), default="html",
                        help="html (default): Markdown + HTML report; json: OUT/decision.json (verdict, winner, "
                             "scores, intervals per configuration), the same JSON on stdout, messages on stderr")
    report.add_argument("--fail-if-slower-than", action="append", default=[], metavar="NAME=RATIO",
                        help="CI gate, repeatable: exit 1 when NAME (a framework: its fastest configuration; or a "
                             "label like torch/graph) is surely slower than RATIO x the fastest configuration of "
                             "its workload and preset: the whole 95%% interval of its throughput ratio is below "
                             "RATIO (noise alone never fails)")


def say_report(written: Written) -> None:
    """Each section's verdict (and scaling sentence), the decision card, then where the report is. A verdict is
    prose (:func:`bakeoff.cli.console.paragraph`): on a terminal it wraps at its width, into a file or a pipe at 100
    columns; between words either way, never between a ratio and its interval. A path is never wrapped."""
    from rich.markup import escape

    from bakeoff.cli.console import console, paragraph, print_card

    for heading, text in written.headlines():
        paragraph(f"[bold]{heading}[/]: {escape(text)}")
    print_card(written.card())
    console.print(f"report: {written.paths['html']}  (Markdown: {written.paths['markdown']})", soft_wrap=True)


def cmd_report(args: argparse.Namespace) -> int:
    from bakeoff.analysis.stats import summarise_groups
    from bakeoff.cli.console import console
    from bakeoff.predict.capacity import load_plans
    from bakeoff.predict.team import load
    from bakeoff.report.write import stored, write_report
    from bakeoff.results.store import export

    team = load(args.survey) if args.survey is not None else None
    plans = load_plans(args.plan) if args.plan is not None else []  # bad input fails here, before any work
    got = stored(args.store, args.suite, key_values(args.weight, "--weight"), f"--weight {' '.join(args.weight)}",
                 team)
    if args.export:
        export(got.results, args.export)
    out = args.out or DEFAULT_REPORTS / (got.suite_name or "all")
    again = " ".join(["bakeoff report --store", quote(str(args.store)),
                      *(["--suite", quote(args.suite)] if args.suite else []), "--out", quote(str(out))])
    if args.format == "json":
        return _report_json(got, out, args, team, plans, again)
    say_report(write_report(got.results, out, got.weights, got.qualitative,
                            f"bakeoff: {got.suite_name or 'all trials'}", got.suites, got.deployments, team, plans,
                            suite_files=got.suite_files, again=again))
    checks = _fail_if_slower(summarise_groups(got.results), args.fail_if_slower_than)
    for check in checks:
        console.print(check.line(), soft_wrap=True)
    return 1 if any(c.failed for c in checks) else 0


def _report_json(got: Stored, out: Path, args: argparse.Namespace, team: Team | None,
                 plans: list[tuple[str, dict]], again: str) -> int:
    import json

    from bakeoff.analysis.stats import summarise_groups
    from bakeoff.cli.console import console, errors
    from bakeoff.core.identity import bakeoff_version
    from bakeoff.report.render import report_folder, write_all
    from bakeoff.report.write import decisions
    from bakeoff.results.ci import decisions_json

    summaries = summarise_groups(got.results)
    checks = _fail_if_slower(summaries, args.fail_if_slower_than)
    decided = decisions(summaries, got.weights, got.qualitative, got.deployments, team)
    data = decisions_json(decided, summaries, store=str(args.store), suite=got.suite_name, bakeoff=bakeoff_version())
    data["checks"] = [{**vars(c), "failed": c.failed} for c in checks]
    if plans:
        from bakeoff.report.capacity_tables import made

        data["plans"] = [{"name": name, **result.to_dict()} for name, result in made(plans, got.results)]
    text = json.dumps(data, indent=1, allow_nan=False, ensure_ascii=False)
    write_all({report_folder(out) / "decision.json": (text + "\n").encode()}, f"{again} --format json")
    console.out(text, highlight=False)
    for check in checks:
        errors.print(check.line(), soft_wrap=True)
    errors.print(f"decision: {out / 'decision.json'} (and on stdout)", soft_wrap=True)
    return 1 if any(c.failed for c in checks) else 0


def _fail_if_slower(summaries, items: list[str]) -> list:  # -> list[bakeoff.results.ci.Check]
    from bakeoff.results.ci import parse_thresholds, slower_than

    return slower_than(summaries, parse_thresholds(items)) if items else []

def add_store_parsers(sub: argparse._SubParsersAction) -> None:
    def filters(p: argparse.ArgumentParser) -> None:
        p.add_argument("--store", type=Path, default=DEFAULT_STORE, help=f"results database (default: {DEFAULT_STORE})")
        p.add_argument("--suite", help="only this suite's trials (a name recorded in the store)")
        p.add_argument("--workload", help="only this workload's trials")
        p.add_argument("--framework", help="only this framework's trials")
        p.add_argument("--status", help="only trials of these statuses, comma-separated: ok, failed, timeout, "
                                        "out_of_memory, unsupported")

    show = sub.add_parser("show", help="stored suites (trial counts, dates) and trials, one line each; or one trial")
    show.add_argument("key", nargs="?", help="a trial's key (or its first characters): show that trial in full")
    filters(show)

    compare = sub.add_parser("compare", help="the same configurations in two stores (two machines or versions): "
                                             "throughput and time-to-target ratios B/A with 95%% intervals")
    compare.add_argument("store_a", type=Path, metavar="STORE_A")
    compare.add_argument("store_b", type=Path, metavar="STORE_B")
    compare.add_argument("--suite", help="only this suite's trials")
    compare.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or JSON on stdout")

    prune = sub.add_parser("prune", help="delete stored trials by filter (a dry listing unless --yes)")
    filters(prune)
    prune.add_argument("--older-than", type=float, metavar="DAYS", help="only trials finished more than DAYS ago")
    prune.add_argument("--stale", action="store_true",
                       help="only trials whose content no longer matches this installation (another bakeoff "
                            "version or package hash, or another framework version): no run here reuses them")
    prune.add_argument("--yes", action="store_true",
                       help="delete them, with their logs, checkpoints and TensorBoard runs (default: only list)")
    prune.add_argument("--dry-run", action="store_true",
                       help="only list what would be deleted (what prune does without --yes; as `run --dry-run`)")

def cmd_show(args: argparse.Namespace) -> int:
    import json

    from bakeoff.cli.console import console
    from bakeoff.core.spec import SpecError
    from bakeoff.measure.energy import describe
    from bakeoff.results.catalog import Filters, parse_statuses, select, suite_lines, trial_line
    from bakeoff.results.store import Store

    with Store(args.store, readonly=True) as store:
        if args.key:
            matches = [r for r in store.trials() if r.key.startswith(args.key)]
            if len(matches) != 1:
                raise SpecError(f"{len(matches)} stored trials have a key starting with {args.key!r}"
                                + ("; give more of it" if matches else f" in {args.store}; `bakeoff show` lists them"))
            [result] = store.results(keys=[matches[0].key])
            detail = result.to_dict()
            for name in ("step_times_s", "losses", "curve"):  # raw samples: counted here, kept in the store
                detail[name] = f"{len(detail[name])} samples"
            console.print(trial_line(matches[0]), markup=False, soft_wrap=True)
            console.print(describe(result.energy), markup=False, soft_wrap=True)
            console.print_json(json.dumps(detail, default=str))
            return 0
        rows = select(store, Filters(args.suite, args.workload, args.framework, parse_statuses(args.status)))
        everything = store.trials()
    for line in suite_lines(everything if not rows else [r for r in everything if r.suite in {x.suite for x in rows}]):
        console.print(line)
    for row in rows:
        console.print(trial_line(row), markup=False, soft_wrap=True)
    console.print(f"{len(rows)} of {len(everything)} stored trials shown; store {args.store}")
    return 0

def cmd_compare(args: argparse.Namespace) -> int:
    import json

    from bakeoff.cli.console import console
    from bakeoff.results.compare import compare_stores, lines, to_dict

    comparison = compare_stores(args.store_a, args.store_b, args.suite)
    if args.format == "json":
        console.out(json.dumps(to_dict(comparison), indent=1, allow_nan=False), highlight=False)
    else:
        for line in lines(comparison):
            console.print(line, markup=False, soft_wrap=True)
    return 0

def cmd_prune(args: argparse.Namespace) -> int:
    from bakeoff.cli.console import console
    from bakeoff.core.spec import SpecError
    from bakeoff.results.catalog import Filters, parse_statuses, remove, select, stale_reason, trial_line
    from bakeoff.results.store import Store

    filters = Filters(args.suite, args.workload, args.framework, parse_statuses(args.status), args.older_than,
                      args.stale)
    if not filters.any:
        raise SpecError("prune needs a filter: --suite, --workload, --framework, --status, --older-than or --stale "
                        "(to delete a whole store, delete its file)")
    if args.dry_run and args.yes:
        raise SpecError("--dry-run lists and --yes deletes: give one")
    with Store(args.store, readonly=not args.yes) as store:
        rows = select(store, filters)
        for row in rows:
            why = f"  [{stale_reason(row)}]" if args.stale else ""
            console.print(trial_line(row) + why, markup=False, soft_wrap=True)
        if not args.yes:
            console.print(f"would delete {len(rows)} trial(s) from {args.store}; add --yes to delete them")
            return 0
        deleted = remove(store, rows)
    console.print(f"deleted {deleted} trial(s) (and their logs, checkpoints, TensorBoard runs) from {args.store}")
    return 0
