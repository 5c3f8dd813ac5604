"""``bakeoff list`` and ``bakeoff env``: what bakeoff can run, and what this machine is (with its matmul ceilings)."""

from __future__ import annotations

import argparse
from pathlib import Path

from bakeoff.cli.options import DEFAULT_STORE, key_values


def add_parsers(sub: argparse._SubParsersAction) -> None:
    listing = sub.add_parser("list", help="workloads, presets, frameworks (installed or not) and execution modes")
    listing.add_argument("--presets", action="store_true",
                         help="every preset's resolved configuration, parameter count and target")
    listing.add_argument("--workload", help="with --presets: only this workload's")
    listing.add_argument("--set", dest="config", action="append", metavar="KEY=VALUE",
                         help="with --presets and --workload: the presets with these fields overridden, as "
                              "`bakeoff run --set` would train them")
    listing.add_argument("--data", action="append", metavar="KEY=VALUE",
                         help="with --presets and --workload: the workload's data options, as `bakeoff run --data` "
                              "takes them: the sizes this data derives (its classes, its vocabulary)")
    env = sub.add_parser("env", help="this machine's fingerprint, as stored with every result, each installed "
                                     "framework's matmul ceiling (measured once, kept in the store), and each "
                                     "implementation's measured speed against a public reference implementation "
                                     "(bench/reference_efficiency.py --store)")
    env.add_argument("--store", type=Path, default=DEFAULT_STORE, help=f"where ceilings and efficiency records are "
                                                                          f"kept (default: {DEFAULT_STORE})")
    env.add_argument("--no-probe", action="store_true", help="show kept ceilings only; measure none")
    env.add_argument("--reprobe", action="store_true",
                     help="measure every ceiling again (a quiet machine helps) and keep the higher median: "
                          "interference only lowers a matmul rate, so the kept ceiling is the highest measured")
    env.add_argument("--threads", type=int, default=0, help="threads of the probe, as a trial's --threads [0: all "
                                                            "cores]")


def cmd_list(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from bakeoff.cli.console import console
    from bakeoff.core import discover, frameworks, registry
    from bakeoff.plan.suite import shipped_suites

    if args.presets or args.workload or args.config:
        return _list_presets(args)
    for name in registry.workload_names():
        wl = registry.workload(name)
        origin = discover.by_name(name).origin
        console.print(f"workload [bold]{name}[/]: presets {', '.join(wl.presets)}; metric {wl.metric_name}; "
                      f"implemented in {', '.join(registry.models(name))}"
                      + ("" if origin == "shipped" else f" ({origin})"), soft_wrap=True)
    for fw, info in frameworks.FRAMEWORKS.items():
        state = "installed" if registry.installed(fw) else f"not installed ({info.install_hint})"
        modes = ", ".join(f"{m.value} ({info.execution_notes[m]})" for m in info.executions)
        not_on_cpu = ", ".join(f"{e.value} {p.value}" for e, p in info.cpu_missing)
        # Record text is plain, not markup: escaped, or rich would take "bakeoff[paddle]"'s "[paddle]" for a tag.
        console.print(f"framework [bold]{fw}[/]: {escape(state)} ({info.display}); execution modes: {escape(modes)}; "
                      "precisions: "
                      f"{', '.join(p.value for p in info.precisions)}"
                      + (f" (on a CPU, not {not_on_cpu})" if not_on_cpu else "")
                      + f"; parallelism: {', '.join(p.value for p in info.launchers)}", soft_wrap=True)
    console.print("fp16 needs a GPU (loss scaling); on CPU use bf16")
    console.print(f"shipped suites: {', '.join(shipped_suites())}")
    return 0

def _list_presets(args: argparse.Namespace) -> int:
    """``bakeoff list --presets``: each preset's fields (what ``--set`` overrides), the fields derived from them,
    the parameter count (framework-free, from the initial weights) and the target."""
    from bakeoff.cli.console import console
    from bakeoff.core import frameworks, registry
    from bakeoff.core.spec import RunSpec, SpecError

    if not args.presets:
        raise SpecError("--workload and --set go with --presets: bakeoff list --presets --workload NAME --set K=V")
    if (args.config or args.data) and not args.workload:
        raise SpecError("--set and --data need --workload: each workload has its own fields and data options "
                        "(bakeoff list --presets names them)")
    overrides = key_values(args.config or [], "--set")
    data_options = tuple(key_values(args.data or [], "--data").items())
    for given in [args.workload] if args.workload else registry.workload_names():
        wl = registry.workload(given)  # a name, MODULE:CLASS or FILE.py:CLASS
        name = wl.name
        console.print(f"workload [bold]{name}[/] ({wl.metric_name}, {'higher' if wl.higher_is_better else 'lower'} "
                      "is better)")
        for preset in wl.presets:
            spec = RunSpec(**registry.workload_fields(given), framework=frameworks.names()[0], preset=preset,
                           max_steps=1, config=overrides, data=data_options)
            data = wl.load_data(spec) if data_options else None  # the user's data: the sizes it derives
            fields, config = wl.preset_config(preset, spec), wl.config(preset, spec, data)
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
    for line in _ceilings(args) + _efficiency(args):
        console.print(line, soft_wrap=True)
    return 0

def _efficiency(args: argparse.Namespace) -> list[str]:
    """Each implementation's measured speed against a public reference on this machine, as kept in the store by
    ``bench/reference_efficiency.py --store`` (:mod:`bakeoff.results.efficiency`)."""
    from bakeoff.results import efficiency
    from bakeoff.results.store import Store

    lines = ["implementation efficiency (bakeoff's text_classifier step against a public implementation of the "
             "same model in the same framework; a verdict margin smaller than a gap here may be bakeoff's, not the "
             "framework's):"]
    records = []
    if args.store.exists():
        with Store(args.store) as store:
            records = efficiency.this_machine(store)
    if not records:
        return lines + [f"  none kept for this machine: measure with `python bench/reference_efficiency.py --store "
                        f"{args.store}` (make bench installs the references)"]
    return lines + [f"  {efficiency.describe(r)}" for r in records]

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
