"""The CLI's deployment commands: ``train`` (keep models), ``export`` (export and measure kept models) and
``deploy`` (both, then the report). Parsing only; the work is :mod:`bakeoff.deploy.pipeline`."""

from __future__ import annotations

import argparse
from pathlib import Path
from shlex import quote

from bakeoff.cli.options import DEFAULT_STORE, add_trial_options

DEFAULT_MODELS = Path("models")

EXPORT_HELP = """Each format is exported in its own process from the kept model, then measured in a fresh process with
the format's own runtime, every runtime given the same threads: load time, first inference, batch-1 latency
p50/p95/p99, throughput at --infer-batch, peak resident memory, file size, and the outputs against the framework model
on the same test examples (max |difference| against the format's tolerance; for int8 the metric change). A format
that fails to export or run is recorded with the converter's message and the others go on. Rows go into the
store; a format already measured for the same model and settings is reused unless --fresh-exports."""


def _add_export_options(parser: argparse.ArgumentParser) -> None:
    from bakeoff.core import formats

    group = parser.add_argument_group("export and inference", EXPORT_HELP)
    group.add_argument("--formats", type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
                       help=f"comma-separated formats [all of the model's framework]: {', '.join(formats.FORMATS)}")
    group.add_argument("--infer-threads", type=int, default=0, help="CPU threads of every runtime [0: all cores]")
    group.add_argument("--infer-batch", type=int, default=32, help="batch of the throughput measurement [32]")
    group.add_argument("--calls", type=int, default=200, help="timed batch-1 calls per format [200]")
    group.add_argument("--examples", type=int, default=256, help="test examples outputs are compared on [256]")
    group.add_argument("--export-timeout", type=float, default=900.0,
                       help="seconds per export or inference process before it is killed [900]")
    group.add_argument("--fresh-exports", action="store_true", help="export and measure again what is stored")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add train, export and deploy to the CLI's subcommands."""
    from bakeoff.core import formats

    rules = (f"With --workload: one trial per framework (default {', '.join(formats.exporting_frameworks())}; each "
             "in its production mode unless --execution is given), trained as `bakeoff run` trains it and kept.")
    train = sub.add_parser("train", help="train one configuration per framework and keep each model "
                                         "(a model directory: manifest, canonical weights, native file)")
    add_trial_options(train, rules)
    deploy = sub.add_parser("deploy", help="train and keep, export to every deployment format, measure inference "
                                           "in each format's runtime, and report")
    add_trial_options(deploy, rules)
    export = sub.add_parser("export", help="export kept models to deployment formats and measure inference")
    export.add_argument("model_dirs", nargs="+", type=Path, metavar="MODEL_DIR", help="directories `bakeoff train` "
                                                                                       "kept")
    export.add_argument("--workload", help="refuse model directories of any other workload")
    evaluate = sub.add_parser("evaluate", help="evaluate kept models again on their test split, from the saved "
                                               "files, without training")
    evaluate.add_argument("model_dirs", nargs="+", type=Path, metavar="MODEL_DIR", help="directories `bakeoff "
                                                                                         "train` kept")
    for parser in (train, deploy, export):
        parser.add_argument("--store", type=Path, default=DEFAULT_STORE, help=f"results database "
                                                                               f"(default: {DEFAULT_STORE})")
    for parser in (train, deploy):
        parser.add_argument("--models", type=Path, default=DEFAULT_MODELS,
                            help=f"where model directories are kept (default: {DEFAULT_MODELS})")
        parser.add_argument("--timeout", type=float, default=900.0, help="seconds per training trial [900]")
    for parser in (deploy, export):
        _add_export_options(parser)
    deploy.add_argument("--out", type=Path, help="report directory (default: reports/deploy-<workload>)")


def _specs(args: argparse.Namespace) -> list:
    from bakeoff.cli.options import trial_flags
    from bakeoff.core import formats, frameworks
    from bakeoff.core.spec import SpecError
    from bakeoff.plan.suite import adhoc_suite

    given = trial_flags(args)
    if "workload" not in given:
        raise SpecError(f"`bakeoff {args.command}` trains one configuration per framework: give --workload")
    names = given.pop("framework", None) or list(formats.exporting_frameworks())
    refused = [n for n in names if n not in formats.exporting_frameworks()]
    if refused:
        raise SpecError(f"{', '.join(refused)}: bakeoff keeps and exports models of "
                        f"{', '.join(formats.exporting_frameworks())} only")
    specs = []
    for name in names:
        execution = given.get("execution") or [frameworks.get(name).production[0]]
        specs += adhoc_suite({**given, "framework": [name], "execution": execution}).specs
    return specs


def _settings(args: argparse.Namespace):  # -> pipeline.Settings
    from bakeoff.deploy.pipeline import Settings

    return Settings(threads=args.infer_threads, batch=args.infer_batch, calls=args.calls, examples=args.examples,
                    timeout_s=args.export_timeout)


def _train(args: argparse.Namespace, store) -> list[Path]:
    from bakeoff.cli.console import RunProgress, console
    from bakeoff.deploy import pipeline

    specs = _specs(args)
    console.print(f"[bold]train[/]: {len(specs)} model{'s' if len(specs) > 1 else ''} into {args.models}")
    with RunProgress(len(specs), store) as progress:
        kept = pipeline.train(specs, store, args.models, args.timeout, progress)
    dirs = []
    for spec, directory, reason in kept:
        if directory is None:
            console.print(f"[red]not kept[/] {spec.workload} {spec.label()}: {reason[:300]}")
        else:
            console.print(f"kept {spec.workload} {spec.label()}: {directory}")
            dirs.append(directory)
    return dirs


def _export(dirs: list[Path], args: argparse.Namespace, store) -> list[dict]:
    from bakeoff.cli.console import console
    from bakeoff.deploy import pipeline
    from bakeoff.report import deployment

    settings = _settings(args)
    rows = []
    for directory in dirs:
        def show(event: str, name: str, row: dict | None, where: Path = directory) -> None:
            if event == "start":
                console.print(f"  {where.name}: exporting {name} …")
            elif event == "skip":
                console.print(f"  {where.name}: {name} already measured with these settings (--fresh-exports "
                              "measures again)")
            elif row is not None:
                console.print(f"  {deployment.line(row)}", soft_wrap=True, markup=False)

        rows += pipeline.export_and_measure(directory, store, settings, args.formats, args.fresh_exports, show)
    return rows


def cmd_train(args: argparse.Namespace) -> int:
    from bakeoff.results.store import Store

    with Store(args.store) as store:
        dirs = _train(args, store)
    return 0 if dirs and len(dirs) == len(_specs(args)) else 1


def cmd_export(args: argparse.Namespace) -> int:
    from bakeoff.core import registry
    from bakeoff.results import model_dir
    from bakeoff.results.store import Store

    workload = registry.workload_fields(args.workload)["workload"] if args.workload else None  # a name or reference
    for directory in args.model_dirs:  # every directory checked before anything runs
        model_dir.read(directory, workload=workload)
    with Store(args.store) as store:
        rows = _export(args.model_dirs, args, store)
    return 0 if all(r["status"] in ("ok", "unsupported") for r in rows) else 1


def cmd_deploy(args: argparse.Namespace) -> int:
    from bakeoff.cli.options import DEFAULT_REPORTS
    from bakeoff.cli.results import say_report
    from bakeoff.report.write import write_report
    from bakeoff.results.store import Store

    with Store(args.store) as store:
        dirs = _train(args, store)
        rows = _export(dirs, args, store)
        keys = {d.name for d in dirs}
        results = [r for r in store.results(suite="train") if any(k.endswith(r.key[:12]) for k in keys)]
    workload = results[0].spec["workload"] if results else args.workload  # its name, however it was given
    if results:
        out = args.out or DEFAULT_REPORTS / f"deploy-{workload}"
        again = f"bakeoff report --store {quote(str(args.store))} --suite train --out {quote(str(out))}"
        say_report(write_report(results, out, {}, {}, f"bakeoff deploy: {workload}", {r.key: "train" for r in results},
                                deployments=rows, again=again))
    ok = len(dirs) == len(_specs(args)) and all(r["status"] in ("ok", "unsupported") for r in rows)
    return 0 if ok else 1


def cmd_evaluate(args: argparse.Namespace) -> int:
    from bakeoff.cli.console import console
    from bakeoff.deploy import pipeline
    from bakeoff.results import model_dir

    manifests = [model_dir.read(d) for d in args.model_dirs]  # every directory checked before anything runs
    ok = True
    for directory, manifest in zip(args.model_dirs, manifests, strict=True):
        got = pipeline.evaluate(directory)
        if got.get("status") != "ok":
            ok = False
            console.print(f"{directory}: [red]{got.get('status')}[/]: {str(got.get('reason', ''))[:300]}")
            continue
        trained = got["trained_metric"]
        console.print(f"{directory}: {manifest.workload} {manifest.label} {got['metric_name']} {got['metric']:.4f} "
                      f"on {got['examples']} test examples (at the end of training: "
                      f"{'not evaluated' if trained is None else f'{trained:.4f}'})")
    return 0 if ok else 1
