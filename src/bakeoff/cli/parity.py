"""``bakeoff parity``: the flags into :func:`bakeoff.run.parity_session.check_parity`, and what it found, as a table (or
JSON). Exit 0 when every framework agrees with the reference, 1 at the first disagreement, 2 on bad input."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from bakeoff.cli.options import comma_list, key_values

if TYPE_CHECKING:
    from bakeoff.run.parity_session import ParityReport

HELP = """\
Checks, each framework against the first named (the reference), in every mode named: parameters (count, canonical
names and shapes, an exact round trip of the canonical weights), forward outputs from the same canonical weights,
per-tensor gradients on one batch, the losses of 6 Adam steps (plain and with 4 accumulated micro-batches) and the
trained weights, and accumulation (4 micro-batches give the gradient of the batch they make up). Dropout is off;
evaluation (when the preset has dropout) checks, in each framework, that a model built with the preset's dropout
gives in evaluation mode, asked twice, the outputs of the one built without. BatchNorm's running statistics
(canonical *.moving_mean, *.moving_variance) are not counted as parameters nor as gradients: they are compared with
the trained weights, and accumulation is not checked for a model that has them (each micro-batch is normalised
with its own statistics). Tolerances, fp32: outputs and evaluation 1e-5 of max(1, largest output); losses 1e-4
relative; gradients 1e-4 of each tensor's largest entry (floor 1e-6); trained weights: the movement from the
initial weights within 5e-3 relative; accumulation: gradients 1e-4, losses 1e-5. bf16 (u = 2^-8): outputs and
evaluation 8u, first loss 1u, later losses 8u; gradients and weights not compared per tensor. A tensor whose
gradient is zero (rounding noise on both sides, as measured, or declared in the workload's zero_gradient, such as
an attention's key bias) is held to being noise, and its trained weights are not compared (Adam moves noise by full
steps). Each check's margin is its worst error over its tolerance; one above 50% (within 2x of failing) is flagged
"near": it holds, but a small bug can hide there. The first disagreeing tensor is named with its largest absolute
and relative difference and the tolerance. Exit status: 0 all agree, 1 a disagreement (or a probe that failed), 2
bad input."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    from bakeoff.core import frameworks

    native = frameworks.native()  # parity's default: the native rows, the first the reference (run/parity.py)
    parity = sub.add_parser("parity", help="prove a workload's ports equivalent across frameworks",
                            description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parity.add_argument("--workload", required=True,
                        help="workload name (`bakeoff list`), MODULE:CLASS or FILE.py:CLASS")
    parity.add_argument("--framework", type=comma_list,
                        help=f"comma-separated frameworks, the reference first [{native[0]}, then "
                             f"{' and '.join(native[1:])}: those installed that implement the workload]")
    parity.add_argument("--execution", type=comma_list, help="comma-separated: eager, graph, xla [eager]")
    parity.add_argument("--precision", type=comma_list, help="comma-separated: fp32, bf16 [fp32]")
    parity.add_argument("--preset", default="tiny", help="size preset [tiny]")
    parity.add_argument("--set", dest="config", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field of the preset, repeatable")
    parity.add_argument("--data", action="append", default=[], metavar="KEY=VALUE",
                        help="the workload's data options, as `bakeoff run` takes them (train=FILE, "
                             "text_column=..., ...), repeatable: parity proves the model this data builds (its "
                             "classes, its vocabulary), not the shipped data's")
    parity.add_argument("--format", choices=("table", "json"), default="table",
                        help="a table in the terminal, or JSON on stdout, where an error or ratio with no finite "
                             "value (a missing tensor, a shape that differs, a NaN output) is null [table]")


def cmd_parity(args: argparse.Namespace) -> int:
    from bakeoff.run.parity_session import check_parity

    report = check_parity(args.workload, args.framework, args.execution, args.precision, args.preset,
                          tuple(key_values(args.config, "--set").items()),
                          tuple(key_values(args.data, "--data").items()))
    if args.format == "json":
        # allow_nan=False: to_dict writes null for what has no finite value, so this never writes Infinity or NaN
        print(json.dumps(report.to_dict(), indent=1, allow_nan=False))  # noqa: T201 (the machine-readable output)
    else:
        say(report)
    return 0 if report.ok else 1


def say(report: ParityReport) -> None:
    """The table: one row per mode, framework and check; then the first disagreement, or that all agree."""
    from rich.markup import escape
    from rich.table import Table

    from bakeoff.cli.console import console, paragraph, whole_words

    table = Table(title=f"parity of {report.workload}: each framework against {report.reference}",
                  title_justify="left")
    for column in ("mode", "framework", "check", "result", "margin", "worst / tolerance"):
        table.add_column(column)
    for row in report.rows:
        worst = row.worst
        figure = (f"{worst.error:.2g} / {worst.tolerance:.2g} ({escape(worst.item)})" if worst
                  else "exact" if row.ok else "")
        result = ("[yellow]skipped[/]" if row.skipped else "[yellow]agrees, near[/]" if row.near
                  else "[green]agrees[/]" if row.ok else "[red]DIFFERS[/]")
        margin = "" if row.skipped or row.margin is None else f"{row.margin:.0%}"
        table.add_row(str(row.mode), row.framework, row.check, result, margin, escape(row.skipped) or figure)
    console.print(whole_words(table))
    near = [row for row in report.rows if row.near]
    if near:
        paragraph("[yellow]near[/]: within 2× of failing — "
                  + "; ".join(f"{r.framework} {r.mode} {r.check} at {r.margin:.0%} of its tolerance "
                              f"({escape(r.worst.item) if r.worst else ''})" for r in near)
                  + ". They hold, but a small bug (a tanh GELU for an exact one) can hide under such a margin: "
                    "look at what differs there.")
    for what, error in report.failed_runs.items():
        console.print(f"[red]probe {escape(what)} failed[/]:\n{escape(error)}", soft_wrap=True)
    first = report.first_failure
    if first is not None:
        row, found = first
        console.print(f"[red]first disagreement[/]: {row.framework} against {report.reference}, {row.mode}: "
                      f"{escape(found.describe())}", soft_wrap=True)
    elif report.ok:
        console.print(f"[green]all agree[/]: {', '.join(report.frameworks)} within the stated tolerances",
                      soft_wrap=True)
