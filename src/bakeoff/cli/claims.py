"""``bakeoff claims``: the flags into :func:`bakeoff.run.claim_check.check`, and each claim's verdict as a table (or
JSON). Exit 0 when the claims were judged (whatever the verdicts), 2 on a bad claims file or flag, before any trial
runs."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.cli.options import DEFAULT_STORE

if TYPE_CHECKING:
    from bakeoff.report.claim_verdicts import ClaimVerdict

HELP = """\
The claims told about frameworks ("TensorFlow's graph takes 15 minutes to build, PyTorch's 5", "static graphs run
faster", ...), each as a hypothesis with a measurable form: a quantity bakeoff measures, two configurations, the
ratio the claim predicts, the trials that test it and the hardware they need. bakeoff runs the trials the store
lacks (as `bakeoff run` does: stored trials are reused, an interrupted run resumes) and says of each claim
supported, refuted or unsettled *at the scale each row names* (workload, preset, parameters, FLOPs per example,
batch, devices), with the figures, their intervals and why; "needs 8 GPUs" (and
the capacity plan's answer) for what this machine cannot test. The shipped claims are bakeoff/predict/claims.toml; its
format is the docstring of bakeoff/predict/hypotheses.py.

examples:
  bakeoff claims                                  # the shipped claims: run what is missing, then judge
  bakeoff claims --no-run --format json           # judge on the store alone, as JSON
  bakeoff claims --file my_claims.toml --only graph_build"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    claims = sub.add_parser("claims", help="test the claims told about frameworks: supported, refuted or "
                                           "unsettled at the scale each names", description=HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    claims.add_argument("--file", type=Path, help="a claims file of your own [the shipped claims]")
    claims.add_argument("--only", help="these claims only, by name, comma-separated")
    claims.add_argument("--no-run", action="store_true",
                        help="run nothing: judge on what the store holds of the claims' configurations (stored by "
                             "any bakeoff version)")
    claims.add_argument("--store", type=Path, default=DEFAULT_STORE, help=f"results database [{DEFAULT_STORE}]")
    claims.add_argument("--timeout", type=float, help="seconds per trial before it is killed [900]")
    claims.add_argument("--retry-failed", action="store_true", help="re-run stored trials that did not succeed")
    claims.add_argument("--retry-busy", action="store_true",
                        help="measure again the stored trials measured while other processes used more than a "
                             "quarter of their cores (their verdicts say so), keeping the quieter of the two "
                             "measurements (both stay in the store)")
    claims.add_argument("--format", choices=("table", "json"), default="table", help="[table]")


def cmd_claims(args: argparse.Namespace) -> int:
    from bakeoff.cli.console import RunProgress, console, errors
    from bakeoff.core.spec import SpecError
    from bakeoff.measure.environment import cuda_devices, usable_cores
    from bakeoff.predict.hypotheses import SHIPPED, load_claims
    from bakeoff.run.claim_check import check, validate

    if args.timeout is not None and not args.timeout > 0:
        raise SpecError(f"--timeout {args.timeout:g}: seconds per trial must be above 0")
    claims = load_claims(args.file)
    if args.only:
        wanted = [name.strip() for name in args.only.split(",") if name.strip()]
        names = [c.name for c in claims]
        unknown = [name for name in wanted if name not in names]
        if unknown or not wanted:
            raise SpecError(f"--only {args.only}: unknown claim {', '.join(unknown) or '(none given)'}; "
                            f"accepted: {', '.join(names)}")
        claims = [c for c in claims if c.name in wanted]
    validate(claims)  # bad input fails here, before anything is said, run or written
    json_out = args.format == "json"
    shown = errors if json_out else console  # JSON alone on stdout

    def say(line: str) -> None:
        shown.print(line, soft_wrap=True)

    gpus, cores = cuda_devices()[0], usable_cores()
    say(f"{len(claims)} claim{'s' if len(claims) != 1 else ''} from {args.file or SHIPPED}; store {args.store}; "
        f"this machine: {gpus} GPU(s), {cores} cores"
        + ("; --no-run: judged on the store alone" if args.no_run else ""))
    verdicts = check(claims, args.store, run=not args.no_run, timeout_s=args.timeout,
                     retry_failed=args.retry_failed, retry_busy=args.retry_busy, say=say,
                     progress=None if json_out else RunProgress, validated=True)
    if json_out:
        out = {"machine": {"gpus": gpus, "cores": cores}, "claims": [v.to_dict() for v in verdicts]}
        print(json.dumps(out, indent=1, default=str))  # noqa: T201
    else:
        show(verdicts)
    return 0


STYLE = {"supported": "green", "refuted": "red", "unsettled": "yellow", "needs hardware": "cyan",
         "not testable": "dim", "mixed": "magenta"}


def show(verdicts: list[ClaimVerdict]) -> None:
    """One row per comparison of each claim: what it compares, the verdict, the figures with their interval, why."""
    from rich.markup import escape
    from rich.table import Table

    from bakeoff.cli.console import PROSE_TABLE_WIDTH, UNBOUNDED, console, paragraph, whole_words
    from bakeoff.report.claim_verdicts import figures

    table = Table(title="claims, each judged at the scale it names (supported / refuted only when the whole interval "
                        "clears the threshold)", title_justify="left", show_lines=True)
    for column in ("claim: what it compares (a / b), at what scale", "verdict", "measured: a vs b (a / b, interval)",
                   "why"):
        table.add_column(column, overflow="fold", ratio=1 if column == "verdict" else 3)
    for v in verdicts:
        for i, f in enumerate(v.findings):
            claim = v.claim
            compares = (f"{claim.quantity}: {f.a_label} / {f.b_label} {claim.threshold}" if claim.form == "ratio"
                        else claim.form)
            said = f"[bold]{escape(claim.said)}[/]\n" if i == 0 else ""
            at = f"\n[dim]at: {escape(f.scale['text'])}[/]" if f.scale.get("text") else ""
            table.add_row(f"{said}[dim]{escape(compares)}[/]{at}", f"[{STYLE.get(f.verdict, '')}]{f.verdict}[/]",
                          escape(figures(claim, f)), escape(f.why))
    console.print(whole_words(table), width=PROSE_TABLE_WIDTH if console.width >= UNBOUNDED else None)
    for v in verdicts:
        for note in v.notes:
            paragraph(f"{v.claim.name}: {escape(note)}")
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    console.print("verdicts: " + ", ".join(f"{n} {word}" for word, n in counts.items()), soft_wrap=True)
