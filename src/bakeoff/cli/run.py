"""``bakeoff run``: the flags into a suite, then :func:`bakeoff.run.session.run_suite` (or, with ``--dry-run``,
:func:`bakeoff.plan.preview.plan`), and what the run did, said."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.cli.options import DEFAULT_REPORTS, DEFAULT_STORE, add_trial_options, positive_int, trial_flags

if TYPE_CHECKING:
    from bakeoff.plan.suite import Suite
    from bakeoff.run.runner import RunSummary


def add_parser(sub: argparse._SubParsersAction, epilog: str) -> None:
    run = sub.add_parser("run", help="run a suite of trials (default: the quick suite)",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=epilog)
    run.add_argument("--suite", help="shipped suite name (quick, modes, speech, seeds) or path to a .toml file")
    add_trial_options(run)
    run.add_argument("--store", type=Path, default=DEFAULT_STORE, help=f"results database (default: {DEFAULT_STORE})")
    run.add_argument("--timeout", type=float, help="seconds per trial before it is killed (default: suite's, or 900)")
    run.add_argument("--fresh", action="store_true", help="re-run trials already in the store")
    run.add_argument("--retry-failed", action="store_true", help="re-run recorded trials that did not succeed")
    run.add_argument("--retry-busy", action="store_true",
                     help="measure again the stored trials measured while other processes used more than a "
                          "quarter of their cores (the report marks them §), keeping the quieter of the two "
                          "measurements (both stay in the store)")
    run.add_argument("--concurrent", action="store_true",
                     help="run at once even while another bakeoff run measures on this machine (by default a run "
                          "waits for it: two at once each time the other's load into its figures)")
    run.add_argument("--executor", default="local", metavar="NAME[=ARGUMENT]",
                     help="where the trials execute, this process staying the only writer of the store: "
                          "local (default: on this machine, one after another); ray[=ADDRESS] (each trial a Ray "
                          "task on a Ray instance started for the run, or on the cluster at ADDRESS: auto, "
                          "HOST:6379, ray://HOST:10001); slurm[=PARTITION][,workers-per-node=K] "
                          "(each trial a Slurm job on PARTITION, default the cluster's default partition, submitted "
                          "with sbatch from here; a multi_worker trial of more than K workers spans nodes, K on "
                          "each; the store's folder must be shared with the nodes at the same path; "
                          "scripts/slurm-local starts a single-machine Slurm)")
    run.add_argument("--survey", type=Path, metavar="TEAM.toml",
                     help="a team file: the team's proficiency per framework and the deployment targets the project "
                          "needs, each with its source and date (format: the docstring of bakeoff/predict/team.py; "
                          "examples/team.toml); the report shows them as declared and the decision weighs them")
    run.add_argument("--mlflow", nargs="?", const="", default=None, metavar="URI",
                     help="log every trial as an MLflow run (parameters: the spec; metrics: what it measured) and "
                          "the report as an artefact of the suite's run, to the tracking URI (default: a local file "
                          "store, mlruns beside the results store); pip install 'bakeoff[mlflow]'")
    run.add_argument("--no-report", action="store_true", help="do not write the report after the run")
    run.add_argument("--out", type=Path, help="report directory (default: reports/<suite>)")
    run.add_argument("--order-seed", type=int, default=0,
                     help="seed of the trial order: within each repeat frameworks take turns and configurations "
                          "are shuffled with it (default: 0)")
    run.add_argument("--dry-run", action="store_true",
                     help="list the trials in run order, which are already stored, and the time the rest should "
                          "take (from stored results of the same configurations); run and write nothing")
    run.add_argument("--profile", action="store_true",
                     help="after each trial that runs and succeeds, profile a few more training steps with the "
                          "framework's own profiler, off the training clock (no recorded figure changes, nor the "
                          "trial's key). Traces go to <store folder>/profiles/<workload>/<preset>/<framework-mode>/"
                          "seed<N> (results/bakeoff/profiles/... for the default store), printed after the run. "
                          "PyTorch writes <host>.pt.trace.json: open it in https://ui.perfetto.dev; TensorFlow "
                          "and JAX write plugins/profile/<time>/<host>.xplane.pb: pip install xprof, then "
                          "tensorboard --logdir FOLDER (Profile tab); JAX also writes perfetto_trace.json.gz for "
                          "Perfetto. Trials already in the store are not re-run, so get no profile: add --fresh")
    run.add_argument("--profile-steps", type=positive_int, default=5, metavar="N",
                     help="with --profile: steps under the profiler, after one unprofiled warm-up step (default: 5)")


def suite_of(args: argparse.Namespace) -> Suite:
    """The suite the flags describe: ``--suite`` (or the quick suite) with the trial flags over it, or ad-hoc
    trials with ``--workload``."""
    from bakeoff.core.spec import SpecError
    from bakeoff.plan.suite import adhoc_suite, load_suite

    if args.timeout is not None and not args.timeout > 0:
        raise SpecError(f"--timeout {args.timeout:g}: seconds per trial must be above 0")
    if args.order_seed < 0:
        raise SpecError(f"--order-seed {args.order_seed}: the seed of the trial order must be an integer >= 0")
    given = trial_flags(args)
    if args.suite or "workload" not in given:  # `bakeoff run --max-steps 4` is the quick suite with 4 steps
        return load_suite(args.suite or "quick", given)
    return adhoc_suite(given)


def cmd_run(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from bakeoff.cli.console import RunProgress, console, paragraph
    from bakeoff.cli.results import say_report
    from bakeoff.run.executors import parse as parse_executor
    from bakeoff.run.session import run_suite

    suite = suite_of(args)
    team = None
    if args.survey is not None:  # bad input fails here, before anything runs
        from bakeoff.predict.team import check_against, load

        team = load(args.survey)
        check_against(team, suite.qualitative, suite.name)
    console.print(f"[bold]{suite.name}[/]: {len(suite.specs)} trials from {suite.source}; store {args.store}")
    said = ", ".join(f"{flag} {value}" for flag, value in suite.overrides.items())
    if said:
        console.print(f"overridden from the command line in every trial: {said} (stored as suite {suite.name})")
    executor = parse_executor(args.executor)  # bad input fails here, before anything runs
    if executor.name != "local" or args.dry_run:
        console.print(f"executor{' (would run them)' if args.dry_run else ''}: {executor.describe()}",
                      soft_wrap=True)
    if args.dry_run:
        return _dry_run(suite, args, here=not executor.remote)

    def say(line: str) -> None:
        console.print(line, soft_wrap=True)

    session = run_suite(suite, args.store, timeout_s=args.timeout, fresh=args.fresh, retry_failed=args.retry_failed,
                        retry_busy=args.retry_busy, concurrent=args.concurrent, order_seed=args.order_seed,
                        profile_steps=args.profile_steps if args.profile else 0,
                        report_dir=None if args.no_report else args.out or DEFAULT_REPORTS / suite.name,
                        title=suite.title() + (f" (overridden from the command line: {said})" if said else ""),
                        say=say, progress=RunProgress, executor=executor, team=team, mlflow_uri=args.mlflow)
    summary = session.summary
    console.print(f"ran {len(summary.ran)} trials, skipped {len(summary.skipped)} already in the store")
    unsettled = session.unsettled
    if unsettled:
        kinds = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in sorted(unsettled.items()))
        paragraph(f"of the skipped, {sum(unsettled.values())} did not succeed when stored ({kinds}) and were not "
                  "run again: --retry-failed runs them again (a timed-out trial also runs again under a longer "
                  "--timeout than it had)")
    if args.profile:
        _print_profiles(summary)
    if session.report is not None:
        say_report(session.report)
    if session.mlflow is not None:
        console.print(session.mlflow.line(), soft_wrap=True)
    # Unsupported trials (a mode or strategy a framework lacks, a framework not installed) are results, decided
    # before any process started, with their reasons; the exit code says whether anything else went wrong.
    unsupported = session.unsupported
    if unsupported:
        paragraph(f"{len(unsupported)} trial{'s' if len(unsupported) > 1 else ''} recorded as unsupported (see the "
                  f"report's 'Trials that did not succeed'), e.g. {unsupported[0].run_spec.label()}: "
                  f"{escape(unsupported[0].reason)}")
    return session.exit_code


def _print_profiles(summary: RunSummary) -> None:
    """Where each trial of the run wrote its trace, and which trials got none (their stored result was reused)."""
    from bakeoff.cli.console import console
    from bakeoff.trial.profile import describe

    for result in summary.ran:
        spec = result.run_spec
        line = describe(result.profile) or ("none recorded" if result.status.value == "ok" else
                                           f"none: the trial did not succeed ({result.status.value})")
        console.print(f"profile {spec.title()}: {line}", soft_wrap=True)
    if summary.skipped:
        names = ", ".join(s.title() for s in summary.skipped[:5])
        more = f" and {len(summary.skipped) - 5} more" if len(summary.skipped) > 5 else ""
        console.print(f"no profile for {len(summary.skipped)} trial{'s' if len(summary.skipped) > 1 else ''} whose "
                      f"stored result was reused ({names}{more}): add --fresh to re-run them with the profiler")


def _dry_run(suite: Suite, args: argparse.Namespace, here: bool) -> int:
    """The plan, without running it; ``here``: the trials would run on this machine (not a cluster's nodes, whose
    GPUs are theirs to check: :func:`bakeoff.run.launchers.unsupported_here` runs on each)."""
    from bakeoff.cli.console import console, paragraph
    from bakeoff.core import registry
    from bakeoff.plan.preview import duration, plan, total
    from bakeoff.run import launchers, runner

    runner.validate(suite.specs, here=here)  # the data loaded and checked as a run would (numpy only): bad data fails

    planned = plan(suite.specs, args.store, fresh=args.fresh, retry_failed=args.retry_failed,
                   order_seed=args.order_seed, timeout_s=args.timeout or suite.timeout_s, retry_busy=args.retry_busy)
    if suite.auto_batch is not None:
        console.print("batch size 'auto': the search runs first, so the keys below (batch size 1) are placeholders")
    refused = 0  # trials that would run, recorded unsupported before any process starts
    for p in planned:
        spec = p.spec
        state = (f"run  (stored: {p.stored.value})" if p.runs and p.stored else "run" if p.runs
                 else f"skip (stored: {p.stored.value})" if p.stored else "skip")
        estimate = f"  ~{duration(p.estimate_s)}" if p.estimate_s is not None else ""
        why = registry.unsupported(spec) or (launchers.unsupported_here(spec) if here else "")  # no process starts
        note = f"  (unsupported, no process starts: {why})" if p.runs and why else ""
        refused += bool(note)
        console.print(f"{p.position:4d}  {state:<22} {spec.title()}  "
                      f"key {spec.key()}{estimate}{note}", markup=False, soft_wrap=True)
    seconds, unknown = total(planned)
    runs = sum(p.runs for p in planned)
    stored = sum(p.stored is not None for p in planned)
    if not runs:
        when = "nothing to run"
    elif unknown == runs:
        when = "no stored results of these configurations to estimate the time from"
    else:
        when = (f"about {duration(seconds)} from the stored results of the same configurations"
                + (f", {unknown} more trials without an estimate" if unknown else ""))
    unsupported = f" ({refused} of them unsupported: recorded so, no process starts)" if refused else ""
    paragraph(f"dry run: {len(planned)} trials, {stored} already stored, {runs} to run{unsupported}; {when}. "
              "Nothing was run or written (the data was loaded and checked, nothing trained).")
    if suite.adaptive is not None:
        first, most = suite.adaptive["first"], suite.adaptive["max"]
        paragraph(f"repeats auto: these are the first {first} runs of each configuration; a section whose verdict is "
                  f"still unsettled then gets one more run per configuration at a time, up to {most} (at most "
                  f"{len(planned) * (most - first) // first} more trials, about "
                  f"{duration(seconds * (most - first) / first)} more).")
    return 0
