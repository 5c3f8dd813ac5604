"""``bakeoff``: the command line. Thin: it parses arguments and calls the library.

Importing this module imports no framework (and nothing heavy): ``bakeoff --help`` stays fast.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

DEFAULT_STORE = Path("results/bakeoff.sqlite")
DEFAULT_REPORTS = Path("reports")

EPILOG = """\
examples:
  bakeoff run                              # the quick suite: text classifier, torch vs tensorflow, eager vs graph
  bakeoff run --suite seeds                # a shipped suite by name, or --suite my_suite.toml
  bakeoff run --workload text_classifier --framework torch,tensorflow --execution graph --repeats 3 \\
              --max-epochs 2 --data train=reviews.csv --data text_column=body --data label_column=stars
  bakeoff report                           # Markdown + HTML decision report from the results store
  bakeoff list                             # workloads, presets, frameworks (and which are installed), modes
  bakeoff env                              # what this machine is, as recorded with every result

Results go to results/bakeoff.sqlite (SQLite; every raw sample kept). Runs resume by default: trials already
in the store are skipped; use --retry-failed or --fresh to run them again.
"""


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bakeoff", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Train the same workloads in PyTorch and TensorFlow, measure them fairly, and decide.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each trial's outcome")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run a suite of trials (default: the quick suite)",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    run.add_argument("--suite", help="shipped suite name (quick, modes, speech, seeds) or path to a .toml file; "
                                     "ignored fields come from --workload & co. when no suite is given")
    grid = run.add_argument_group("ad-hoc trials (instead of --suite)")
    grid.add_argument("--workload", help="workload name, see `bakeoff list`")
    grid.add_argument("--preset", default="tiny", help="size preset (default: tiny)")
    grid.add_argument("--framework", type=_csv, default=["torch", "tensorflow"],
                      help="comma-separated frameworks (default: torch,tensorflow)")
    grid.add_argument("--execution", type=_csv, default=["eager", "graph"],
                      help="comma-separated modes: eager, graph, xla (default: eager,graph)")
    grid.add_argument("--repeats", type=int, default=1, help="repeats per configuration, seeds seed..seed+N-1")
    grid.add_argument("--batch-size", default="32",
                      help="examples per micro-batch, or 'auto': the largest that fits under --memory-cap")
    grid.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (default: 1)")
    grid.add_argument("--precision", type=_csv, default=["fp32"], help="comma-separated: fp32, bf16, fp16")
    grid.add_argument("--memory-cap", help="with --batch-size auto on CPU: resident-memory cap per trial, e.g. 6GiB "
                                           "(default: half the machine's memory)")
    grid.add_argument("--batch-step", type=int, help="with --batch-size auto: grow by this step, not by doubling")
    grid.add_argument("--checkpoint-every", type=int, default=0,
                      help="checkpoint every N steps; an interrupted trial resumes from its last checkpoint")
    grid.add_argument("--max-steps", type=int)
    grid.add_argument("--max-epochs", type=float)
    grid.add_argument("--max-seconds", type=float, help="training-clock budget per trial")
    grid.add_argument("--eval-every", type=int, default=25, help="evaluate every N steps (off the clock)")
    grid.add_argument("--stop-at-target", action="store_true", help="stop a trial once it reaches the target")
    grid.add_argument("--seed", type=int, default=0)
    grid.add_argument("--threads", type=int, default=0, help="CPU threads per trial (default: all cores)")
    grid.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto)")
    grid.add_argument("--data", action="append", default=[], metavar="KEY=VALUE",
                      help="data option, repeatable. text_classifier: train=FILE test=FILE text_column=... "
                           "label_column=... test_fraction=0.2 split_seed=0; speech_ctc: train=MANIFEST "
                           "test=MANIFEST (test alone: train on the embedded corpus; test=cards: 5 real shipped "
                           "recordings) batching=pad|bucket pad_multiple=N; mnist: dir=FOLDER (the four MNIST "
                           "IDX files); autoencoder: seed=N")
    run.add_argument("--store", type=Path, default=DEFAULT_STORE, help=f"results database (default: {DEFAULT_STORE})")
    run.add_argument("--timeout", type=float, help="seconds per trial before it is killed (default: suite's, or 900)")
    run.add_argument("--fresh", action="store_true", help="re-run trials already in the store")
    run.add_argument("--retry-failed", action="store_true", help="re-run recorded trials that did not succeed")
    run.add_argument("--no-report", action="store_true", help="do not write the report after the run")
    run.add_argument("--out", type=Path, help="report directory (default: reports/<suite>)")
    run.add_argument("--order-seed", type=int, default=0,
                     help="seed of the trial order: within each repeat frameworks take turns and configurations "
                          "are shuffled with it (default: 0)")

    report = sub.add_parser("report", help="write the decision report (Markdown + self-contained HTML)")
    report.add_argument("--store", type=Path, default=DEFAULT_STORE)
    report.add_argument("--suite", help="report only this suite's trials (a name recorded in the store); "
                                        "its weights and qualitative scores are used when it is a suite file")
    report.add_argument("--out", type=Path, help="report directory (default: reports/<suite or all>)")
    report.add_argument("--weight", action="append", default=[], metavar="CRITERION=W",
                        help="decision weight, repeatable: throughput, time_to_target, first_step, "
                             "memory (the training increment), quality, or a qualitative criterion")
    report.add_argument("--export", type=Path, help="also export the trials as .json or .csv")

    sub.add_parser("list", help="workloads, presets, frameworks (installed or not) and execution modes")
    sub.add_parser("env", help="this machine's fingerprint, as stored with every result")
    return parser


def _key_values(items: list[str], what: str) -> dict[str, str]:
    from bakeoff.spec import SpecError

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(f"{what} must look like KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _adhoc_suite(args: argparse.Namespace):  # -> Suite
    from bakeoff.spec import RunSpec, SpecError
    from bakeoff.suite import Suite

    if not args.workload:
        raise SpecError("give --suite NAME|FILE, or --workload with the ad-hoc trial options")
    budget = dict(max_steps=args.max_steps, max_epochs=args.max_epochs, max_seconds=args.max_seconds)
    if all(v is None for v in budget.values()):
        budget["max_epochs"] = 1.0
    auto = args.batch_size == "auto"
    if not auto and not args.batch_size.isdigit():
        raise SpecError(f"--batch-size must be a positive integer or 'auto', got {args.batch_size!r}")
    specs = [RunSpec(workload=args.workload, preset=args.preset, framework=fw, execution=ex, precision=precision,
                     repeat=r, seed=args.seed + r, batch_size=1 if auto else int(args.batch_size),
                     grad_accum=args.grad_accum, eval_every=args.eval_every, stop_at_target=args.stop_at_target,
                     threads=args.threads, device=args.device, checkpoint_every=args.checkpoint_every,
                     data=_key_values(args.data, "--data"), **budget)
             for r in range(args.repeats) for fw in args.framework for ex in args.execution
             for precision in args.precision]
    auto_batch = None
    if auto:
        from bakeoff.batch_search import parse_size

        auto_batch = {"memory_cap": parse_size(args.memory_cap) if args.memory_cap else None,
                      "step": args.batch_step}
    return Suite(name=f"adhoc-{args.workload}", description="trials from command-line flags", specs=specs,
                 timeout_s=900, weights={}, qualitative={}, source="command line", auto_batch=auto_batch)


def cmd_run(args: argparse.Namespace) -> int:
    from bakeoff import runner
    from bakeoff.console import RunProgress, console
    from bakeoff.store import Store
    from bakeoff.suite import load_suite

    suite = load_suite(args.suite or "quick") if args.suite or not args.workload else _adhoc_suite(args)
    timeout = args.timeout or suite.timeout_s
    console.print(f"[bold]{suite.name}[/]: {len(suite.specs)} trials from {suite.source}; store {args.store}")
    sizes = runner.validate(suite.specs)  # bad input fails here, before a store or report is created
    specs, annotations = suite.specs, {}
    with runner.interruptible():  # SIGINT / SIGTERM: kill the running trial or probe, record nothing of it
        if suite.auto_batch is not None:
            specs, annotations = _search_batch_sizes(suite, sizes, args.store.parent / "logs", timeout)
        with Store(args.store) as store, RunProgress(len(specs)) as progress:
            summary = runner.run(specs, store, suite.name, timeout_s=timeout, fresh=args.fresh,
                                 retry_failed=args.retry_failed, progress=progress, annotations=annotations,
                                 validated=True, order_seed=args.order_seed)
            results = store.results(suite=suite.name, keys=[s.key() for s in summary.specs])
    console.print(f"ran {len(summary.ran)} trials, skipped {len(summary.skipped)} already in the store")
    if not args.no_report:
        _write_report(results, args.out or DEFAULT_REPORTS / suite.name, suite.weights, suite.qualitative,
                      f"bakeoff: {suite.name}")
    return 0 if all(r.status.value == "ok" for r in results) else 1


def _search_batch_sizes(suite, sizes: dict, log_dir: Path, timeout: float):  # -> (specs, annotations)
    from bakeoff import batch_search
    from bakeoff.console import console

    def show(probe, status) -> None:
        console.print(f"  batch-size probe {probe.label()} batch {probe.batch_size}: {status.value}")

    specs, records = batch_search.resolve(suite.specs, sizes, log_dir, suite.auto_batch["memory_cap"],
                                          suite.auto_batch["step"], timeout, progress=show)
    shown: set[str] = set()
    for spec in specs:
        if spec.label() not in shown:
            shown.add(spec.label())
            record = records[spec.key()]
            peak = record["peak_memory_bytes"] or 0
            console.print(f"batch size for {spec.label()}: {record['batch_size']} "
                          f"(peak memory {peak / 2**20:,.0f} MiB, {record['memory_kind']})")
    return specs, {key: {"batch_search": record} for key, record in records.items()}


def _write_report(results, out: Path, weights: dict, qualitative: dict, title: str) -> None:
    from bakeoff.analysis.decide import decide_each
    from bakeoff.analysis.stats import summarise_groups
    from bakeoff.console import console
    from bakeoff.report.render import render_report

    paths = render_report(results, out, weights=weights or None, qualitative=qualitative or None, title=title)
    for decision in decide_each(summarise_groups(results), weights or None, qualitative or None).values():
        console.print(f"[bold]verdict[/]: {decision.verdict}")
    console.print(f"report: {paths['html']}  (Markdown: {paths['markdown']})")


def cmd_report(args: argparse.Namespace) -> int:
    from bakeoff.spec import SpecError
    from bakeoff.store import Store, export
    from bakeoff.suite import check_weights, load_suite, shipped_suites

    weights: dict[str, float] = {}
    qualitative: dict = {}
    if args.suite and (args.suite in shipped_suites() or args.suite.endswith(".toml")):
        suite = load_suite(args.suite)
        weights, qualitative, suite_name = suite.weights, suite.qualitative, suite.name
    else:
        suite_name = args.suite
    given = _key_values(args.weight, "--weight")
    try:
        weights = check_weights({**weights, **given}, qualitative)
    except SpecError as exc:
        raise SpecError(f"--weight {' '.join(args.weight)}: {exc}") from None
    if not args.store.exists():
        raise SpecError(f"no results store at {args.store}; run `bakeoff run` first (or pass --store)")
    with Store(args.store) as store:
        results = store.results(suite=suite_name)
        if not results:
            have = ", ".join(store.suites()) or "none"
            raise SpecError(f"no trials for suite {suite_name!r} in {args.store}; suites recorded: {have}")
    if args.export:
        export(results, args.export)
    _write_report(results, args.out or DEFAULT_REPORTS / (suite_name or "all"), weights, qualitative,
                  f"bakeoff: {suite_name or 'all trials'}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from bakeoff import registry
    from bakeoff.console import console
    from bakeoff.suite import shipped_suites

    for name in registry.WORKLOADS:
        wl = registry.workload(name)
        frameworks = sorted(f for w, f in registry.MODELS if w == name)
        console.print(f"workload [bold]{name}[/]: presets {', '.join(wl.presets)}; metric {wl.metric_name}; "
                      f"implemented in {', '.join(frameworks)}")
    for fw in registry.FRAMEWORK_MODULES:
        state = "installed" if registry.installed(fw) else f"not installed ({registry.INSTALL_HINTS[fw]})"
        modes = ", ".join(m.value for m in registry.EXECUTIONS.get(fw, ())) or "none yet"
        console.print(f"framework [bold]{fw}[/]: {state}; execution modes: {modes}")
    console.print("precisions: fp32 (bf16, fp16 planned); parallelism: none (data-parallel, multi-worker planned)")
    console.print(f"shipped suites: {', '.join(shipped_suites())}")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    import json

    from bakeoff.console import console
    from bakeoff.measure.environment import host_environment

    console.print_json(json.dumps(host_environment()))
    return 0


COMMANDS = {"run": cmd_run, "report": cmd_report, "list": cmd_list, "env": cmd_env}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if args.command is None:
        parser.print_help()
        return 0
    from bakeoff.data import DataError
    from bakeoff.spec import SpecError

    try:
        return COMMANDS[args.command](args)
    except (SpecError, DataError) as exc:
        sys.stderr.write(f"bakeoff {args.command}: error: {exc}\n")
        return 2
    except KeyboardInterrupt as exc:
        sys.stderr.write(_interrupted(args.command, exc))
        return getattr(exc, "exit_code", 130)


def _interrupted(command: str, exc: KeyboardInterrupt) -> str:
    """What an interrupted command tells the user (``exc`` is a :class:`bakeoff.runner.Interrupted` when the
    run's own signal handling caught it)."""
    name = getattr(exc, "signal_name", "SIGINT")
    if command != "run":
        return f"bakeoff {command}: interrupted by {name}\n"
    stopped = getattr(exc, "stopped", None)
    what = (f"stopped {stopped} and killed its processes; it is not recorded (its checkpoint, if any, is kept)"
            if stopped else "no trial was running")
    return (f"bakeoff run: interrupted by {name}; {what}. Finished trials are in the store: "
            "`bakeoff run` with the same options resumes, running only what is missing.\n")


if __name__ == "__main__":
    sys.exit(main())
