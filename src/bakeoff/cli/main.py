"""``bakeoff``: the command line. The parser and the command table; each command group has its module (:mod:`.run`,
:mod:`.results`, :mod:`.info`, :mod:`.deploy`), which parses its flags and calls one library function.

Importing this package imports no framework (and nothing heavy): ``bakeoff --help`` stays fast.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import NoReturn

from bakeoff.cli import claims, deploy, info, new, parity, plan, results, run

EPILOG = """\
examples:
  bakeoff run                              # the quick suite: PyTorch eager vs TensorFlow graph, 3 small workloads
  bakeoff run --dry-run --suite seeds      # what would run, what is stored, how long; nothing runs
  bakeoff run --suite seeds                # a shipped suite by name, or --suite my_suite.toml
  bakeoff run --workload text_classifier --framework torch,tensorflow --execution production --repeats 3 \\
              --max-epochs 2 --data train=reviews.csv --data text_column=body --data label_column=stars
  bakeoff run --suite seeds --max-steps 50 --framework torch   # the suite, overridden in every trial
  bakeoff run --workload text_classifier --set d_model=128 --set num_layers=4 --target 0.8   # your model, target
  bakeoff report                           # Markdown + HTML decision report from the results store
  bakeoff list                             # workloads, presets, frameworks (and which are installed), modes
  bakeoff list --presets                   # every preset's fields (what --set overrides), parameters, target
  bakeoff env                              # what this machine is, as recorded with every result
  bakeoff show --suite quick               # stored trials, one line each; bakeoff show KEY: one in full
  bakeoff compare a.sqlite b.sqlite        # the same configurations on two machines or versions
  bakeoff report --format json --fail-if-slower-than torch=0.9   # the decision as JSON; exit 1 for CI
  bakeoff prune --status failed --yes      # delete stored trials by filter
  bakeoff parity --workload my_models.py:Sentiment --framework torch,jax   # prove your ports equivalent
  bakeoff new workload my_task             # a workload package that runs: workload, models, suite, parity test
  bakeoff plan --params 100e9 --devices 8 --memory 80GB --batch 64   # will it fit, under which strategy
  bakeoff claims                           # the claims told about frameworks, tested here: supported or not

Results go to results/bakeoff.sqlite (SQLite; every raw sample kept). Runs resume by default: trials already
in the store are skipped; use --retry-failed or --fresh to run them again.
"""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose error for an unknown option suggests the nearest known one (``--frameworks``: did
    you mean --framework?)."""

    def error(self, message: str) -> NoReturn:
        import difflib

        unknown = [word for word in message.partition("unrecognized arguments:")[2].split() if word.startswith("--")]
        if unknown:
            known = sorted(_options(self))
            hints = [f"{word}: did you mean {close[0]}?" for word in unknown
                     if (close := difflib.get_close_matches(word.partition("=")[0], known, n=1, cutoff=0.75))]
            message += "".join(f"\n  {hint}" for hint in hints)
        super().error(message)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Every long option of ``parser`` and of its subcommands'."""
    found = {o for action in parser._actions for o in action.option_strings if o.startswith("--")}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found |= _options(child)
    return found


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="bakeoff", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Train the same workloads in PyTorch, TensorFlow and JAX, measure them fairly, and decide.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each trial's outcome")
    parser.add_argument("--version", action=_Version, nargs=0, help="bakeoff's version and package hash, and the "
                                                                    "installed frameworks' versions")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    run.add_parser(sub, EPILOG)
    results.add_report_parser(sub)
    info.add_parsers(sub)
    results.add_store_parsers(sub)
    deploy.add_parsers(sub)
    parity.add_parser(sub)
    new.add_parser(sub)
    plan.add_parser(sub)
    claims.add_parser(sub)
    return parser


class _Version(argparse.Action):
    """``--version``: bakeoff's version and package hash (what trial keys record), computed only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        import platform

        from bakeoff.cli.console import console
        from bakeoff.core import frameworks
        from bakeoff.core.identity import bakeoff_version, framework_version

        found = [framework_version(fw) if framework_version(fw) != "not installed" else f"{fw} not installed"
                 for fw in frameworks.markers()]  # frameworks of their own (the Keras rows use these)
        console.print(f"bakeoff {bakeoff_version()} (version+package hash); {'; '.join(found)}; "
                      f"Python {platform.python_version()}", soft_wrap=True)
        parser.exit()


COMMANDS = {"run": run.cmd_run, "report": results.cmd_report, "list": info.cmd_list, "env": info.cmd_env,
            "show": results.cmd_show, "compare": results.cmd_compare, "prune": results.cmd_prune,
            "train": deploy.cmd_train, "export": deploy.cmd_export, "deploy": deploy.cmd_deploy,
            "evaluate": deploy.cmd_evaluate, "parity": parity.cmd_parity,
            "new": new.cmd_new, "plan": plan.cmd_plan,
            "claims": claims.cmd_claims}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if args.command is None:
        parser.print_help()
        return 0
    from bakeoff.core.spec import SpecError
    from bakeoff.data import DataError

    try:
        return COMMANDS[args.command](args)
    except (SpecError, DataError) as exc:
        sys.stderr.write(f"bakeoff {args.command}: error: {exc}\n")
        return 2
    except KeyboardInterrupt as exc:
        sys.stderr.write(_interrupted(args.command, exc))
        return getattr(exc, "exit_code", 130)


def _interrupted(command: str, exc: KeyboardInterrupt) -> str:
    """What an interrupted command tells the user (``exc`` is a :class:`bakeoff.run.process.Interrupted` when the
    run's own signal handling caught it)."""
    name = getattr(exc, "signal_name", "SIGINT")
    if command != "run":
        return f"bakeoff {command}: interrupted by {name}\n"
    stopped = getattr(exc, "stopped", None)
    what = (f"stopped {stopped} and killed its processes; it is not recorded (its checkpoint, if any, is kept)"
            if stopped else "no trial was running")
    return (f"bakeoff run: interrupted by {name}; {what}. Finished trials are in the store: "
            "`bakeoff run` with the same options resumes, running only what is missing.\n")
