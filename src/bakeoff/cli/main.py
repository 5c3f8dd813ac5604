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
  bakeoff run                              # the quick suite: PyTorch eager vs TensorFlow graph, 3 small workloads
  bakeoff run --dry-run --suite seeds      # what would run, what is stored, how long; nothing runs
  bakeoff run --suite seeds                # a shipped suite by name, or --suite my_suite.toml
  bakeoff run --workload text_classifier --framework torch,tensorflow --execution graph --repeats 3 \\
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

Results go to results/bakeoff.sqlite (SQLite; every raw sample kept). Runs resume by default: trials already
in the store are skipped; use --retry-failed or --fresh to run them again.
"""


OVERRIDE_RULES = """\
With --workload (and no --suite) these describe ad-hoc trials; [defaults] in brackets.
With a suite (--suite, or the quick suite when neither is given) each flag given overrides the suite in every
trial, as if written into it: the field is set everywhere and dropped from the matrix and the variants (the
excludes still apply); a list flag (--framework torch) becomes the matrix's list; a budget flag replaces the
whole budget; --data and --set merge key by key; --repeats sets every variant's repeats. The run prints what was
overridden and stores the trials as suite NAME+HASH, apart from the suite's own. Refused with a suite (exit 2):
--workload (a suite names its workloads), and --target when the suite runs several workloads."""


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}")
    return number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bakeoff", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Train the same workloads in PyTorch, TensorFlow and JAX, measure them fairly, and decide.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log each trial's outcome")
    parser.add_argument("--version", action=_Version, nargs=0, help="bakeoff's version and package hash, and the "
                                                                    "installed frameworks' versions")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run a suite of trials (default: the quick suite)",
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    run.add_argument("--suite", help="shipped suite name (quick, modes, speech, seeds) or path to a .toml file")
    _add_trial_options(run)
    run.add_argument("--store", type=Path, default=DEFAULT_STORE, help=f"results database (default: {DEFAULT_STORE})")
    run.add_argument("--timeout", type=float, help="seconds per trial before it is killed (default: suite's, or 900)")
    run.add_argument("--fresh", action="store_true", help="re-run trials already in the store")
    run.add_argument("--retry-failed", action="store_true", help="re-run recorded trials that did not succeed")
    run.add_argument("--retry-busy", action="store_true",
                     help="measure again the stored trials measured while other processes used more than a "
                          "quarter of their cores (the report marks them §)")
    run.add_argument("--concurrent", action="store_true",
                     help="run at once even while another bakeoff run measures on this machine (by default a run "
                          "waits for it: two at once each time the other's load into its figures)")
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
    run.add_argument("--profile-steps", type=_positive_int, default=5, metavar="N",
                     help="with --profile: steps under the profiler, after one unprofiled warm-up step (default: 5)")

    report = sub.add_parser("report", help="write the decision report (Markdown + self-contained HTML)")
    report.add_argument("--store", type=Path, default=DEFAULT_STORE)
    report.add_argument("--suite", help="report only this suite's trials (a name recorded in the store); "
                                        "its weights and qualitative scores are used when it is a suite file")
    report.add_argument("--out", type=Path, help="report directory (default: reports/<suite or all>)")
    report.add_argument("--weight", action="append", default=[], metavar="CRITERION=W",
                        help="decision weight, repeatable: throughput, time_to_target, first_step, "
                             "memory (the training increment), quality, or a qualitative criterion")
    report.add_argument("--export", type=Path, help="also export the trials as .json or .csv")
    report.add_argument("--format", choices=("html", "json"), default="html",
                        help="html (default): Markdown + HTML report; json: OUT/decision.json (verdict, winner, "
                             "scores, intervals per configuration), the same JSON on stdout, messages on stderr")
    report.add_argument("--fail-if-slower-than", action="append", default=[], metavar="NAME=RATIO",
                        help="CI gate, repeatable: exit 1 when NAME (a framework: its fastest configuration; or a "
                             "label like torch/graph) is surely slower than RATIO x the fastest configuration of "
                             "its workload and preset: the whole 95%% interval of its throughput ratio is below "
                             "RATIO (noise alone never fails)")

    listing = sub.add_parser("list", help="workloads, presets, frameworks (installed or not) and execution modes")
    listing.add_argument("--presets", action="store_true",
                         help="every preset's resolved configuration, parameter count and target")
    listing.add_argument("--workload", help="with --presets: only this workload's")
    listing.add_argument("--set", dest="config", action="append", metavar="KEY=VALUE",
                         help="with --presets and --workload: the presets with these fields overridden, as "
                              "`bakeoff run --set` would train them")
    env = sub.add_parser("env", help="this machine's fingerprint, as stored with every result, and each installed "
                                     "framework's matmul ceiling (measured once, kept in the store)")
    env.add_argument("--store", type=Path, default=DEFAULT_STORE, help=f"where ceilings are kept (default: "
                                                                          f"{DEFAULT_STORE})")
    env.add_argument("--no-probe", action="store_true", help="show kept ceilings only; measure none")
    env.add_argument("--reprobe", action="store_true",
                     help="measure every ceiling again (a quiet machine helps) and keep the higher median: "
                          "interference only lowers a matmul rate, so the kept ceiling is the highest measured")
    env.add_argument("--threads", type=int, default=0, help="threads of the probe, as a trial's --threads [0: all "
                                                            "cores]")
    _add_store_commands(sub)
    from bakeoff.cli.deploy import add_commands

    add_commands(sub, _add_trial_options, DEFAULT_STORE)
    return parser


def _add_trial_options(parser: argparse.ArgumentParser, rules: str = "") -> None:
    """The flags that describe trials, shared by run, train and deploy."""
    grid = parser.add_argument_group("trial options", rules or OVERRIDE_RULES)
    grid.add_argument("--workload", help="workload name, see `bakeoff list` (ad hoc only)")
    grid.add_argument("--preset", help="size preset, see `bakeoff list --presets` [tiny]")
    grid.add_argument("--set", dest="config", action="append", metavar="KEY=VALUE",
                      help="override a field of the preset, repeatable: d_model=128, num_layers=4, num_heads=8, "
                           "seq_len=256, dropout=0.2, learning_rate=3e-4, filters=16,32 (`bakeoff list --presets` "
                           "names each workload's fields)")
    grid.add_argument("--target", type=float, help="quality target on the test split [the workload's for the preset, "
                                                   "measured on the shipped data; derived from user data]")
    from bakeoff.core import frameworks  # framework-free records (no framework imported)
    from bakeoff.plan.suite import ADHOC_MATRIX

    grid.add_argument("--framework", type=_csv, help=f"comma-separated frameworks: {', '.join(frameworks.names())} "
                                                     f"(`bakeoff list` says what each runs) "
                                                     f"[{','.join(ADHOC_MATRIX['framework'])}]")
    grid.add_argument("--execution", type=_csv, help="comma-separated modes: eager, graph (compiled: torch.compile, "
                                                     "tf.function, jax.jit), xla (TensorFlow) "
                                                     f"[{','.join(ADHOC_MATRIX['execution'])}]")
    grid.add_argument("--precision", type=_csv, help="comma-separated: fp32, bf16, fp16 [fp32]")
    grid.add_argument("--parallelism", type=_csv,
                      help="comma-separated: none, data_parallel (one machine, N replicas: DDP / MirroredStrategy), "
                           "multi_worker (N worker processes: torchrun / MultiWorkerMirroredStrategy), "
                           "parameter_server (TensorFlow), horovod [none]")
    grid.add_argument("--workers", type=_csv, help="comma-separated replica / worker counts, e.g. 1,2; --batch-size "
                                                   "is the global batch, split evenly over them [1]")
    grid.add_argument("--hosts", type=_csv, help="multi_worker across machines: one host per worker, the first the "
                                                 "rendezvous host; others are reached with ssh and must see the "
                                                 "store's folder at the same path [all on this machine]")
    grid.add_argument("--repeats", type=_repeats,
                      help="repeats per configuration, seeds seed..seed+N-1; or 'auto': 3, then one more at a time "
                           "where a verdict is unsettled, up to --max-repeats (its intervals widened for the "
                           "looks) [1]")
    grid.add_argument("--max-repeats", type=int, help="with --repeats auto: at most this many runs per "
                                                       "configuration [6]")
    grid.add_argument("--batch-size", help="examples per micro-batch, or 'auto': the largest that fits under "
                                           "--memory-cap [32]")
    grid.add_argument("--grad-accum", type=int, help="micro-batches per optimizer step [1]")
    grid.add_argument("--memory-cap", help="with --batch-size auto on CPU: resident-memory cap per trial, e.g. 6GiB "
                                           "[half the machine's memory]")
    grid.add_argument("--batch-step", type=int, help="with --batch-size auto: grow by this step, not by doubling")
    grid.add_argument("--checkpoint-every", type=int,
                      help="checkpoint every N steps; an interrupted trial resumes from its last checkpoint [0: none]")
    grid.add_argument("--max-steps", type=int, help="step budget per trial")
    grid.add_argument("--max-epochs", type=float, help="epoch budget per trial [1 when no budget is given]")
    grid.add_argument("--max-seconds", type=float, help="training-clock budget per trial")
    grid.add_argument("--eval-every", type=int, help="evaluate every N steps (off the clock) [25]")
    grid.add_argument("--stop-at-target", action=argparse.BooleanOptionalAction,
                      help="stop a trial once it reaches the target [no]")
    grid.add_argument("--seed", type=int, help="seed of the first repeat [0]")
    grid.add_argument("--threads", type=int, help="CPU threads per trial [0: all cores]")
    grid.add_argument("--device", help="auto, cpu or cuda [auto]")
    grid.add_argument("--data", action="append", metavar="KEY=VALUE",
                      help="data option, repeatable. text_classifier: train=FILE test=FILE (.csv, .tsv or .jsonl, "
                           "optionally .gz) text_column=... label_column=... test_fraction=0.2 split_seed=0 "
                           "skip_bad_rows=false (true: leave out rows without text or label, counted in the "
                           "report); speech_ctc: train=MANIFEST "
                           "test=MANIFEST (test alone: train on the embedded corpus; test=cards: 5 real shipped "
                           "recordings) batching=pad|bucket pad_multiple=N; mnist: dir=FOLDER (the four MNIST "
                           "IDX files); autoencoder: seed=N")


def _repeats(text: str) -> int | str:
    """``--repeats``: a number, or ``auto``."""
    if text.strip() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of repeats or 'auto', got {text!r}") from None


def _key_values(items: list[str], what: str) -> dict[str, str]:
    from bakeoff.core.spec import SpecError

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(f"{what} must look like KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


# Flags that describe trials (argparse dest = suite field or override key, see bakeoff.plan.suite.check_overrides).
TRIAL_FLAGS = ("workload", "preset", "config", "target", "framework", "execution", "precision", "parallelism",
               "workers", "hosts", "repeats", "max_repeats",
               "batch_size", "grad_accum", "memory_cap", "batch_step", "checkpoint_every", "max_steps", "max_epochs",
               "max_seconds", "eval_every", "stop_at_target", "seed", "threads", "device", "data")


def _trial_flags(args: argparse.Namespace) -> dict:
    """The trial flags given on the command line (argparse leaves the others None), as suite values."""
    given = {name: getattr(args, name) for name in TRIAL_FLAGS if getattr(args, name) is not None}
    for name, flag in (("data", "--data"), ("config", "--set")):
        if name in given:
            given[name] = _key_values(given[name], flag)
    if "workers" in given:
        given["workers"] = [int(w) if w.isdigit() else w for w in given["workers"]]
    size = given.get("batch_size")
    if size is not None and size.strip().isdigit():
        given["batch_size"] = int(size)
    return given


def _suite(args: argparse.Namespace):  # -> Suite
    from bakeoff.core.spec import SpecError
    from bakeoff.plan.suite import adhoc_suite, load_suite

    if args.timeout is not None and not args.timeout > 0:
        raise SpecError(f"--timeout {args.timeout:g}: seconds per trial must be above 0")
    if args.order_seed < 0:
        raise SpecError(f"--order-seed {args.order_seed}: the seed of the trial order must be an integer >= 0")
    given = _trial_flags(args)
    if args.suite or "workload" not in given:  # `bakeoff run --max-steps 4` is the quick suite with 4 steps
        return load_suite(args.suite or "quick", given)
    return adhoc_suite(given)


def cmd_run(args: argparse.Namespace) -> int:
    from collections import Counter

    from bakeoff.cli.console import RunProgress, console
    from bakeoff.results.store import Store, artifacts_dir
    from bakeoff.run import machine, process
    from bakeoff.run.executors import local as runner

    suite = _suite(args)
    timeout = args.timeout or suite.timeout_s
    console.print(f"[bold]{suite.name}[/]: {len(suite.specs)} trials from {suite.source}; store {args.store}")
    said = ", ".join(f"{flag} {value}" for flag, value in suite.overrides.items())
    if said:
        console.print(f"overridden from the command line in every trial: {said} (stored as suite {suite.name})")
    if args.dry_run:
        return _dry_run(suite, args)
    sizes = runner.validate(suite.specs)  # bad input fails here, before a store or report is created
    if args.store.exists():  # a damaged store, or a folder, fails here: before any search or trial; nothing written
        Store(args.store, readonly=True).close()
    specs, annotations = suite.specs, {}
    def say(line: str) -> None:
        console.print(line, soft_wrap=True)

    # SIGINT / SIGTERM: kill the running trial or probe, record nothing of it. One measuring run per machine.
    with process.interruptible(), machine.measuring(args.store, wait=not args.concurrent, say=say):
        if suite.auto_batch is not None:
            specs, annotations = _search_batch_sizes(suite, sizes, artifacts_dir(args.store) / "logs", timeout)
        with Store(args.store) as store, RunProgress(len(specs), store) as progress:
            store.put_suite(suite.name, suite.source, suite.weights, suite.qualitative)
            options = dict(timeout_s=timeout, fresh=args.fresh, retry_failed=args.retry_failed, progress=progress,
                           annotations=annotations, validated=True, order_seed=args.order_seed,
                           retry_busy=args.retry_busy, profile_steps=args.profile_steps if args.profile else 0)
            if suite.adaptive is None:
                summary = runner.run(specs, store, suite.name, **options)
            else:
                from bakeoff.run import adaptive

                summary = adaptive.run(specs, store, suite.name, suite.adaptive["first"], suite.adaptive["max"],
                                       suite.weights, suite.qualitative, say=say, grow=progress.extend, **options)
            results = store.results(suite=suite.name, keys=[s.key() for s in summary.specs])
    console.print(f"ran {len(summary.ran)} trials, skipped {len(summary.skipped)} already in the store")
    skipped = {spec.key() for spec in summary.skipped}
    unsettled = Counter(r.status.value for r in results
                        if r.key in skipped and r.status.value not in ("ok", "unsupported"))
    if unsettled:
        kinds = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in sorted(unsettled.items()))
        console.print(f"of the skipped, {sum(unsettled.values())} did not succeed when stored ({kinds}) and were "
                      "not run again: --retry-failed runs them again (a timed-out trial also runs again under a "
                      "longer --timeout than it had)", soft_wrap=True)
    if args.profile:
        _print_profiles(summary)
    if not args.no_report:
        title = f"bakeoff: {suite.name}" + (f" (overridden from the command line: {said})" if said else "")
        _write_report(results, args.out or DEFAULT_REPORTS / suite.name, suite.weights, suite.qualitative, title,
                      {r.key: suite.name for r in results})
    # Unsupported trials (a mode or strategy a framework lacks, a framework not installed) are results, decided
    # before any process started, with their reasons; the exit code says whether anything else went wrong.
    unsupported = [r for r in results if r.status.value == "unsupported"]
    if unsupported:
        console.print(f"{len(unsupported)} trial{'s' if len(unsupported) > 1 else ''} recorded as unsupported "
                      f"(see the report's 'Trials that did not succeed'), e.g. {unsupported[0].run_spec.label()}: "
                      f"{unsupported[0].reason}")
    return 0 if all(r.status.value in ("ok", "unsupported") for r in results) else 1


def _print_profiles(summary) -> None:
    """Where each trial of the run wrote its trace, and which trials got none (their stored result was reused)."""
    from bakeoff.cli.console import console
    from bakeoff.trial.profile import describe

    for result in summary.ran:
        spec = result.run_spec
        line = describe(result.extras) or ("none recorded" if result.status.value == "ok" else
                                           f"none: the trial did not succeed ({result.status.value})")
        console.print(f"profile {spec.workload}/{spec.preset} {spec.label()} seed {spec.seed}: {line}", soft_wrap=True)
    if summary.skipped:
        names = ", ".join(f"{s.workload}/{s.preset} {s.label()} seed {s.seed}" for s in summary.skipped[:5])
        more = f" and {len(summary.skipped) - 5} more" if len(summary.skipped) > 5 else ""
        console.print(f"no profile for {len(summary.skipped)} trial{'s' if len(summary.skipped) > 1 else ''} whose "
                      f"stored result was reused ({names}{more}): add --fresh to re-run them with the profiler")


def _search_batch_sizes(suite, sizes: dict, log_dir: Path, timeout: float):  # -> (specs, annotations)
    from bakeoff.cli.console import console
    from bakeoff.run import batch_search

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


def _write_report(results, out: Path, weights: dict, qualitative: dict, title: str,
                  suites: dict[str, str] | None = None, deployments: list | tuple = ()) -> None:
    from bakeoff.analysis.decide import decide_each
    from bakeoff.analysis.scaling import scaling_rows, scaling_sentence
    from bakeoff.analysis.stats import summarise_groups
    from bakeoff.cli.console import console
    from bakeoff.report import deployment
    from bakeoff.report.render import render_report

    summaries = summarise_groups(results)
    if any((weights or {}).get(c) for c in deployment.CRITERIA):  # scored per workload from its deployments
        decisions = _with_deployment(summaries, weights, qualitative, deployments)
    else:
        decisions = decide_each(summaries, weights or None, qualitative or None)
    paths = render_report(results, out, weights=weights or None, qualitative=qualitative or None, title=title,
                          suites=suites, decisions=decisions, deployments=deployments)
    for (workload, preset), decision in decisions.items():
        console.print(f"[bold]verdict[/]: {decision.verdict}")
        configs = [s for s in summaries if (s.workload, s.preset) == (workload, preset)]
        scaling = scaling_sentence(scaling_rows(configs), configs)
        if scaling:
            console.print(f"[bold]scaling[/]: {scaling.removeprefix('Scaling: ')}")
    console.print(f"report: {paths['html']}  (Markdown: {paths['markdown']})")


def _with_deployment(summaries, weights: dict, qualitative: dict, deployments) -> dict:
    """The decision of each workload and preset, with the deployment criteria scored from its stored deployments."""
    from bakeoff.analysis.decide import decide
    from bakeoff.core.spec import SpecError
    from bakeoff.report import deployment

    rows = deployment.latest(deployments)
    out = {}
    for key in sorted({(s.workload, s.preset) for s in summaries}):
        mine = [r for r in rows if (r["workload"], r["preset"]) == key]
        if not mine:
            raise SpecError(f"a deployment criterion is weighted, but no deployment of {key[0]} / {key[1]} is "
                            f"stored: run `bakeoff deploy --workload {key[0]} --preset {key[1]}` first")
        configs = [s for s in summaries if (s.workload, s.preset) == key]
        scores = deployment.criteria(mine, {s.framework for s in configs})
        out[key] = decide(configs, weights, {**qualitative, **scores})
    return out


def cmd_report(args: argparse.Namespace) -> int:
    from bakeoff.core.spec import SpecError
    from bakeoff.plan.suite import check_weights, load_suite, shipped_suites
    from bakeoff.results.store import Store, export

    weights: dict[str, float] = {}
    qualitative: dict = {}
    from_file = bool(args.suite and (args.suite in shipped_suites() or args.suite.endswith(".toml")))
    if from_file:
        suite = load_suite(args.suite)
        weights, qualitative, suite_name = suite.weights, suite.qualitative, suite.name
    else:
        suite_name = args.suite
    given = _key_values(args.weight, "--weight")
    from bakeoff.report.deployment import CRITERIA

    deploy_criteria = dict.fromkeys(CRITERIA, {})  # accepted by name; scored from the stored deployments
    try:
        weights = check_weights({**weights, **given}, {**qualitative, **deploy_criteria})
    except SpecError as exc:
        raise SpecError(f"--weight {' '.join(args.weight)}: {exc}") from None
    if not args.store.exists():
        raise SpecError(f"no results store at {args.store}; run `bakeoff run` first (or pass --store)")
    with Store(args.store) as store:
        recorded = store.suite_settings(suite_name) if suite_name and not from_file else None
        if recorded:  # a suite known by name only: its weights and scores as they were when it ran
            qualitative = recorded["qualitative"]
            weights = check_weights({**recorded["weights"], **given}, {**qualitative, **deploy_criteria})
        results = store.results(suite=suite_name)
        suites = {row.key: row.suite for row in store.trials(suite=suite_name)}
        workloads = {r.run_spec.workload for r in results}
        deployments = [d for d in store.deployments() if d["workload"] in workloads]
        if not results:
            have = ", ".join(store.suites()) or "none"
            raise SpecError(f"no trials for suite {suite_name!r} in {args.store}; suites recorded: {have}")
    if args.export:
        export(results, args.export)
    out = args.out or DEFAULT_REPORTS / (suite_name or "all")
    if args.format == "json":
        return _report_json(results, out, weights, qualitative, args, suite_name, deployments)
    _write_report(results, out, weights, qualitative, f"bakeoff: {suite_name or 'all trials'}", suites, deployments)
    from bakeoff.analysis.stats import summarise_groups
    from bakeoff.cli.console import console

    checks = _fail_if_slower(summarise_groups(results), args.fail_if_slower_than)
    for check in checks:
        console.print(check.line(), soft_wrap=True)
    return 1 if any(c.failed for c in checks) else 0


def cmd_list(args: argparse.Namespace) -> int:
    from bakeoff.cli.console import console
    from bakeoff.core import frameworks, registry
    from bakeoff.plan.suite import shipped_suites

    if args.presets or args.workload or args.config:
        return _list_presets(args)
    for name in registry.WORKLOADS:
        wl = registry.workload(name)
        rows = [f for w, f in registry.MODELS if w == name]
        console.print(f"workload [bold]{name}[/]: presets {', '.join(wl.presets)}; metric {wl.metric_name}; "
                      f"implemented in {', '.join(rows)}", soft_wrap=True)
    for fw, info in frameworks.FRAMEWORKS.items():
        state = "installed" if registry.installed(fw) else f"not installed ({info.install_hint})"
        modes = ", ".join(f"{m.value} ({info.execution_notes[m]})" for m in info.executions)
        console.print(f"framework [bold]{fw}[/]: {state} ({info.display}); execution modes: {modes}; precisions: "
                      f"{', '.join(p.value for p in info.precisions)}; parallelism: "
                      f"{', '.join(p.value for p in info.launchers)}", soft_wrap=True)
    console.print("fp16 needs a GPU (loss scaling); on CPU use bf16")
    console.print(f"shipped suites: {', '.join(shipped_suites())}")
    return 0


def _list_presets(args: argparse.Namespace) -> int:
    """``bakeoff list --presets``: each preset's fields (what ``--set`` overrides), the fields derived from them,
    the parameter count (framework-free, from the initial weights) and the target."""
    from bakeoff.cli.console import console
    from bakeoff.core import registry
    from bakeoff.core.spec import RunSpec, SpecError

    if not args.presets:
        raise SpecError("--workload and --set go with --presets: bakeoff list --presets --workload NAME --set K=V")
    if args.config and not args.workload:
        raise SpecError("--set needs --workload: each workload has its own fields (bakeoff list --presets names them)")
    overrides = _key_values(args.config or [], "--set")
    for name in [args.workload] if args.workload else list(registry.WORKLOADS):
        wl = registry.workload(name)
        console.print(f"workload [bold]{name}[/] ({wl.metric_name}, {'higher' if wl.higher_is_better else 'lower'} "
                      "is better)")
        for preset in wl.presets:
            spec = RunSpec(workload=name, framework="torch", preset=preset, max_steps=1, config=overrides)
            fields, config = wl.preset_config(preset, spec), wl.config(preset, spec)
            target, rule = wl.target_and_rule(preset, spec)
            console.print(f"  {preset}: {wl.num_params(config):,} parameters; target {target:g} ({rule})")
            console.print("    fields (--set KEY=VALUE): " + " ".join(f"{k}={_shown(v)}" for k, v in fields.items()))
            derived = " ".join(f"{k}={_shown(v)}" for k, v in config.items() if k not in fields)
            if derived:
                console.print(f"    derived (from the data, or fixed): {derived}")
    return 0


def _shown(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def cmd_env(args: argparse.Namespace) -> int:
    import json

    from bakeoff.cli.console import console
    from bakeoff.measure.environment import host_environment

    console.print_json(json.dumps(host_environment()))
    for line in _ceilings(args):
        console.print(line, soft_wrap=True)
    return 0


def _ceilings(args: argparse.Namespace) -> list[str]:
    """Each installed framework's matmul ceiling on this machine: kept in the store, else measured now (one fresh
    process per framework, a few seconds each) and kept, unless --no-probe; with --reprobe, measured again and kept
    when higher (:func:`bakeoff.measure.ceiling.higher`)."""
    from bakeoff.core import frameworks, registry
    from bakeoff.measure import ceiling
    from bakeoff.measure.environment import usable_cores
    from bakeoff.results.store import Store

    threads = args.threads or usable_cores()
    lines = [f"matmul ceiling ({ceiling.SIZE}x{ceiling.SIZE} products, median of {ceiling.REPEATS}, {threads} "
             f"threads; what MFU is measured against):"]
    if args.no_probe and not args.store.exists():
        return lines + ["  none kept (no store yet)"]
    with Store(args.store) as store:
        for name in frameworks.markers():  # the frameworks of their own (a Keras row multiplies with its backend's)
            if not registry.installed(name):
                continue
            print_ = ceiling.fingerprint(name, threads)
            kept = store.ceiling(ceiling.key(print_))
            now = ""
            if (kept is None or args.reprobe) and not args.no_probe:
                measured = ceiling.measure(name, threads=threads)
                if measured["status"] == "ok":
                    if ceiling.higher(measured, kept):
                        store.put_ceiling(ceiling.key(print_), print_, measured)
                    elif kept is not None:
                        fp32 = measured["precisions"].get("fp32", {}).get("median_flops_per_s", 0.0)
                        now = f"; measured now: fp32 {fp32 / 1e9:,.1f} GFLOP/s, lower, not kept"
                    kept = store.ceiling(ceiling.key(print_))
                else:
                    lines.append(f"  {frameworks.get(name).display}: not measured ({measured['reason'][:200]})")
                    continue
            if kept is None:
                lines.append(f"  {frameworks.get(name).display} {print_['version']}: not measured (--no-probe)")
                continue
            parts = [f"{p} {v['median_flops_per_s'] / 1e9:,.1f} GFLOP/s (samples {min(v['samples']) / 1e9:,.0f}–"
                     f"{max(v['samples']) / 1e9:,.0f}{ceiling.size_note(v.get('n'))})" if "missing" not in v
                     else f"{p} missing ({v['missing'][:80]})" for p, v in kept["result"]["precisions"].items()]
            where = kept["result"].get("where", "probe process")
            lines.append(f"  {frameworks.get(name).display} {print_['version']}: {', '.join(parts)} "
                         f"(measured {kept['measured_at']} in a {where}{now})")
    return lines


# --- everyday commands: --version, run --dry-run, report --format json, show, compare, prune ------------------------

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


def _add_store_commands(sub: argparse._SubParsersAction) -> None:
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


def _dry_run(suite, args: argparse.Namespace) -> int:  # suite: bakeoff.plan.suite.Suite
    from bakeoff.cli.console import console
    from bakeoff.core import registry
    from bakeoff.plan.preview import duration, plan, total

    planned = plan(suite.specs, args.store, fresh=args.fresh, retry_failed=args.retry_failed,
                   order_seed=args.order_seed, timeout_s=args.timeout or suite.timeout_s, retry_busy=args.retry_busy)
    if suite.auto_batch is not None:
        console.print("batch size 'auto': the search runs first, so the keys below (batch size 1) are placeholders")
    for p in planned:
        spec = p.spec
        state = (f"run  (stored: {p.stored.value})" if p.runs and p.stored else "run" if p.runs
                 else f"skip (stored: {p.stored.value})" if p.stored else "skip")
        estimate = f"  ~{duration(p.estimate_s)}" if p.estimate_s is not None else ""
        why = registry.unsupported(spec)  # recorded as unsupported without starting a process
        note = f"  (unsupported, no process starts: {why})" if p.runs and why else ""
        console.print(f"{p.position:4d}  {state:<22} {spec.workload}/{spec.preset} {spec.label()} seed {spec.seed}  "
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
    console.print(f"dry run: {len(planned)} trials, {stored} already stored, {runs} to run; {when}. "
                  "Nothing was run or written (data files were hashed, not loaded).", soft_wrap=True)
    if suite.adaptive is not None:
        first, most = suite.adaptive["first"], suite.adaptive["max"]
        console.print(f"repeats auto: these are the first {first} runs of each configuration; a section whose "
                      f"verdict is still unsettled then gets one more run per configuration at a time, up to {most} "
                      f"(at most {len(planned) * (most - first) // first} more trials, about "
                      f"{duration(seconds * (most - first) / first)} more).", soft_wrap=True)
    return 0


def _fail_if_slower(summaries, items: list[str]) -> list:  # -> list[bakeoff.results.ci.Check]
    from bakeoff.results.ci import parse_thresholds, slower_than

    return slower_than(summaries, parse_thresholds(items)) if items else []


def _report_json(results, out: Path, weights: dict, qualitative: dict, args: argparse.Namespace,
                 suite_name: str | None, deployments: list | tuple = ()) -> int:
    import json

    from bakeoff.analysis.decide import decide_each
    from bakeoff.analysis.stats import summarise_groups
    from bakeoff.cli.console import console, errors
    from bakeoff.core.identity import bakeoff_version
    from bakeoff.report.deployment import CRITERIA
    from bakeoff.report.render import report_folder, write_all
    from bakeoff.results.ci import decisions_json

    summaries = summarise_groups(results)
    checks = _fail_if_slower(summaries, args.fail_if_slower_than)
    if any((weights or {}).get(c) for c in CRITERIA):
        decisions = _with_deployment(summaries, weights, qualitative, deployments)
    else:
        decisions = decide_each(summaries, weights or None, qualitative or None)
    data = decisions_json(decisions, summaries, store=str(args.store), suite=suite_name, bakeoff=bakeoff_version())
    data["checks"] = [{**vars(c), "failed": c.failed} for c in checks]
    text = json.dumps(data, indent=1, allow_nan=False, ensure_ascii=False)
    write_all({report_folder(out) / "decision.json": (text + "\n").encode()})
    console.out(text, highlight=False)
    for check in checks:
        errors.print(check.line(), soft_wrap=True)
    errors.print(f"decision: {out / 'decision.json'} (and on stdout)", soft_wrap=True)
    return 1 if any(c.failed for c in checks) else 0


def cmd_show(args: argparse.Namespace) -> int:
    import json

    from bakeoff.cli.console import console
    from bakeoff.core.spec import SpecError
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


def _deploy_command(name: str):  # the deployment commands live in bakeoff.cli.deploy
    def command(args: argparse.Namespace) -> int:
        from bakeoff.cli import deploy as commands

        return getattr(commands, f"cmd_{name}")(args)
    return command


COMMANDS = {"run": cmd_run, "report": cmd_report, "list": cmd_list, "env": cmd_env, "show": cmd_show,
            "compare": cmd_compare, "prune": cmd_prune, "train": _deploy_command("train"),
            "export": _deploy_command("export"), "deploy": _deploy_command("deploy"),
            "evaluate": _deploy_command("evaluate")}


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
