"""``bakeoff plan``: the flags into :func:`bakeoff.predict.capacity.plan`, and the plan as a table (or JSON). Exit 0
when a plan was made (whether or not anything fits), 2 on an impossible one."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from bakeoff.cli.options import key_values, positive_int

if TYPE_CHECKING:
    from bakeoff.predict.capacity import Calibration, Plan

HELP = """\
Memory per device, communication and step time of a Transformer under each framework's own strategies (data
parallel; ZeRO-1/2/3 and FSDP; tensor and pipeline parallel; parameter servers), for a size this machine cannot try.
Memory is split into weights, gradients, optimizer state (Adam) and activations, from stated formulas (ZeRO for the
model states, Korthikanti et al. 2022 for activations; `bakeoff.predict.capacity` names each). Compute time is the
step's FLOPs (6·P·tokens plus attention's 12·s²·h a sequence a layer) at the MFU bakeoff measured for each
framework on the same kind of device (--device-kind, gpu unless stated: the trials in --store run on one), or the one
given with --mfu, over --flops; a CPU's MFU is never applied to a GPU's peak. --flops with no such MFU for any
framework exits 2 naming what to give.

Model states are held as each row's recipe holds them, in bytes a parameter: by default what the framework's
strategy does with mixed precision (PyTorch's DDP and ZeroRedundancyOptimizer under autocast: fp32 weights and
gradients and a bf16 copy; FSDP and FSDP2 with their mixed precision policy; Keras' mixed_bfloat16; Flax's fp32
parameters with a bf16 compute dtype); --recipe zero counts them as DeepSpeed and the ZeRO paper do (16-bit weights
and gradients, fp32 master weights and Adam state: 2 + 2 + 12 bytes).

Calibrated: with --store and no --flops, the plan is for the machine the stored trials ran on. Each framework's
text-classifier trials at 3 or more sizes (e.g. `bakeoff run --preset tiny` and `--set d_model=128`, ...) fit its
memory (a fixed working memory + a scale of the count) and its step (its GEMMs at this machine's own rates by
shape, measured once in a child process per framework and kept in ~/.cache/bakeoff/gemm_rates.json, plus the
elementwise work over attention's scores and the layers' activations; --no-gemm-rates: at one FLOP rate); each fit
states its leave-one-out error.
bench/plan_accuracy.py checks them against fresh trials.

The shape: --preset (text_classifier's: tiny, small, paper), or --layers/--width/--heads (with --ffn, --seq,
--vocab), or --params with GPT-3's shape rule (width = 128 × layers, heads of 128, ffn = 4 × width).

examples:
  bakeoff plan --params 100e9 --devices 8 --memory 80GB --batch 64     # 100B on 8 × 80 GB: which strategy fits
  bakeoff plan --layers 24 --width 2048 --heads 16 --seq 2048 --batch 32 --devices 4 --memory 40GB \\
               --flops 312e12 --bandwidth 300GB/s --mfu torch=0.4,tensorflow=0.35,jax=0.45 --tokens 20e9
  bakeoff plan --layers 40 --width 5120 --heads 40 --batch 8 --devices 8 --memory 80GB --recompute --recipe zero
  bakeoff plan --preset paper --batch 32 --devices 1 --memory 16GB --precision fp32 --format json
  bakeoff plan --preset paper --batch 32 --memory 16GB --precision fp32 --store results/bakeoff.sqlite"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    from bakeoff.predict.recipes import RECIPES

    plan = sub.add_parser("plan", help="will a model fit, and how long will it take, under each framework's "
                                       "strategies", description=HELP,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    shape = plan.add_argument_group("the model")
    shape.add_argument("--preset", help="text_classifier's preset: its layers, width, heads, ffn, seq, vocabulary; a "
                                        "classifier's head")
    shape.add_argument("--params", type=float, help="a parameter count (e.g. 100e9), shaped by GPT-3's rule")
    shape.add_argument("--layers", type=int)
    shape.add_argument("--width", type=int, help="the model width (d_model)")
    shape.add_argument("--heads", type=int, help="attention heads [width / 128]")
    shape.add_argument("--ffn", type=int, help="feed-forward width [4 × width]")
    shape.add_argument("--seq", type=int, default=None, help="sequence length [2048; a preset's own]")
    shape.add_argument("--vocab", type=int, default=None, help="vocabulary [50257; a preset's own]")
    run = plan.add_argument_group("the step")
    run.add_argument("--batch", type=positive_int, required=True, help="global batch, in sequences")
    run.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="bf16",
                     help="fp32, or the 16-bit compute of mixed precision [bf16]")
    run.add_argument("--recipe", metavar="NAME",
                     help="how every row holds weights, gradients and Adam state (bytes a parameter), instead of "
                          "each framework's own: " + "; ".join(f"{r.name} {r.bytes_text}" for r in RECIPES.values()))
    run.add_argument("--recompute", action="store_true", help="full activation recomputation (checkpointing)")
    run.add_argument("--unfused-attention", action="store_true",
                     help="attention that keeps its a·s² scores (fused attention is the default)")
    run.add_argument("--microbatches", type=positive_int, help="pipeline micro-batches [4 × devices, at most batch]")
    run.add_argument("--tokens", type=float, help="a token budget: the time to train on it")
    machine = plan.add_argument_group("the machine")
    machine.add_argument("--devices", type=positive_int, default=1, help="accelerators [1]")
    machine.add_argument("--memory", required=True, help="memory per device with its unit: 80GB, 80GiB")
    machine.add_argument("--flops", type=float, help="a device's peak FLOP/s at this precision (e.g. 989e12)")
    machine.add_argument("--device-kind", choices=("gpu", "cpu"),
                         help="the kind of device --flops is of [gpu]: only an MFU measured on that kind is used")
    machine.add_argument("--bandwidth", help="what each device moves to the others, e.g. 450GB/s")
    machine.add_argument("--parameter-servers", type=positive_int, default=1, help="for the PS rows [1]")
    plan.add_argument("--mfu", action="append", default=[], metavar="FRAMEWORK=VALUE",
                      help="a stated MFU (0-1) per framework, repeatable or comma-separated; wins over --store's")
    plan.add_argument("--store", help="read each framework's measured MFU, and its calibrations, from this store's "
                                      "trials")
    plan.add_argument("--no-gemm-rates", action="store_true",
                      help="with --store: time the calibrated step at one FLOP rate, without measuring this "
                           "machine's GEMM rates by shape (child processes, seconds a framework, kept)")
    plan.add_argument("--format", choices=("table", "json"), default="table", help="[table]")


def _stored(args: argparse.Namespace) -> tuple[dict[str, dict[str, tuple[float, str]]], list[Calibration],
                                              dict[tuple[str, str], dict] | None]:
    """The store's measured MFU per framework and kind of device, its calibrations
    (:func:`bakeoff.predict.capacity.calibrate`) and, for a plan on this machine, its GEMM rates by shape."""
    from bakeoff.predict.capacity import PlanError, calibrate, measured_mfu

    if not args.store:
        return {}, [], None
    from pathlib import Path

    from bakeoff.results.store import Store

    if not Path(args.store).exists():
        raise PlanError(f"store={args.store!r}: no such file (bakeoff run writes results/bakeoff.sqlite)")
    with Store(args.store, readonly=True) as store:
        results = store.results()
    calibrations = calibrate(results)
    rates = None if args.no_gemm_rates or args.flops is not None else _rates(args, results, calibrations)
    return measured_mfu(results), calibrate(results, rates) if rates else calibrations, rates


def _rates(args: argparse.Namespace, results: list, calibrations: list[Calibration]) -> dict[tuple[str, str], dict]:
    """This machine's GEMM rates by shape for the calibrations fitted on it (:func:`bakeoff.predict.capacity.
    gemm_rates_for`: measured once in a child process per framework and precision, then kept)."""
    from bakeoff.predict.capacity import gemm_rates_for, shape_from

    return gemm_rates_for(results, calibrations, shape_from(fields(args)), args.batch / args.devices,
                               args.recompute)


def _mfu(args: argparse.Namespace) -> dict[str, tuple[float, str]]:
    """The MFUs stated with --mfu (for the plan's devices, whatever their kind)."""
    from bakeoff.predict.capacity import PlanError, planned

    names = planned()  # the frameworks the plan has rows for
    out: dict[str, tuple[float, str]] = {}
    stated = key_values([item for text in args.mfu for item in text.split(",") if item.strip()], "--mfu")
    for framework, raw in stated.items():
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if framework not in names or not 0 < value <= 1:
            raise PlanError(f"--mfu {framework}={raw}: give {', '.join(names[:-1])} or {names[-1]} = a fraction "
                            "in (0, 1]")
        out[framework] = (value, "stated (--mfu)")
    return out


def fields(args: argparse.Namespace) -> dict[str, object]:
    """The flags as a plan's fields (:data:`bakeoff.predict.capacity.FIELDS`), those given only."""
    names = ("preset", "params", "layers", "width", "heads", "ffn", "seq", "vocab", "batch", "precision", "recompute",
             "microbatches", "tokens", "devices", "memory", "flops", "bandwidth", "parameter_servers", "recipe",
             "device_kind")
    out = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    return {**out, "fused_attention": not args.unfused_attention}


def cmd_plan(args: argparse.Namespace) -> int:
    from bakeoff.predict.capacity import plan_from

    measured, calibrations, rates = _stored(args)
    result = plan_from(fields(args), _mfu(args), calibrations, measured=measured, rates=rates, require_mfu=True)
    if args.format == "json":
        print(json.dumps(result.to_dict(), indent=1))  # noqa: T201 (the machine-readable output)
    else:
        say(result)
    return 0


def say(result: Plan) -> None:
    """The plan as the report shows it (:mod:`bakeoff.report.capacity_tables`): memory per device by strategy and who
    offers it; step time and time to the budget per framework (their MFUs differ); calibrated figures; then the APIs,
    the notes and what is left out."""
    from rich.markup import escape

    from bakeoff.cli.console import console, paragraph, print_table
    from bakeoff.report import capacity_tables as tables

    console.print(f"plan: {tables.summary(result)}", soft_wrap=True)
    for table in (tables.memory_table(result), tables.step_table(result), tables.calibrated_table(result)):
        if table is not None:
            print_table(table)
    console.print("what each framework calls, or why there is none:")
    for label, text in tables.apis(result):
        paragraph(f"  {escape(label)}: {escape(text)}")
    console.print("how each row holds its model states (--recipe chooses one for all):")
    for label, text in tables.recipes(result):
        paragraph(f"  {escape(label)}: {escape(text)}")
    for label, text in tables.remarks(result):
        paragraph(f"{escape(label)}: {escape(text)}")
