"""How close `bakeoff plan` comes to measured trials (#29 item 2): the text classifier at the four sizes of the
shipped `sizes` suite (the suite `bakeoff plan --store` is calibrated with: the `tiny` and `small` presets and two
sizes between them), batch 32, each framework in its production mode, each trial in its own fresh process (the real
runner, no evaluation), in three configurations: one device fp32, one device bf16, and data parallel over 2
replicas fp32.

Every prediction goes through the plan itself (:func:`bakeoff.predict.capacity.plan`, with the calibration
:func:`~bakeoff.predict.capacity.calibrate` fits), and every one-device size is predicted from a calibration fitted to
the framework's *other* sizes only (leave one out): "calibrated by measured trials", tested on a trial the
calibration did not see. Columns:

Memory — the training increment (gradients and activations; the weights and Adam's moments are in every engine's
memory baseline) against the trial's measured ``memory_increment_bytes`` (resident memory on a CPU):
  * ``count``: the plan's count uncalibrated (gradients + activations, unfused attention: the classifier's has
    dropout);
  * ``calibrated``: the plan's calibrated memory less the weights (with their 16-bit copy) and Adam's state: fixed
    working memory + scale × count.
Step time — against the trial's steady step:
  * ``MFU``: the step's FLOPs at the median FLOP rate of the other sizes (the plan's way with a measured MFU);
  * ``calibrated``: the calibrated compute with one FLOP rate (FLOPs at one fitted rate, attention's elements at
    another): the plan's before #49;
  * ``by shape``: the plan's calibrated compute from this machine's own GEMM rates by shape (each GEMM of the step
    at the rate measured for its shape, :mod:`bakeoff.measure.gemm_rates`, plus attention's elements and the
    layers' activations at fitted rates), the rate table measured once per framework and precision (seconds;
    kept in its cache file) for every shape the trials and the ``--beyond`` size run. ``--no-gemm-rates``: without
    it.
Data parallel is predicted from the framework's one-device calibration at the same precision (all four sizes): the
memory of one process (torch: a process a replica; TensorFlow's MirroredStrategy and JAX's mesh: one process holding
both replicas) and the step's compute at the per-replica batch, with no communication term (a CPU has no stated
bandwidth): what the error is then is what the plan cannot know of this machine's all-reduce and thread split.

Run: .venv/bin/python bench/plan_accuracy.py [--frameworks torch,tensorflow,jax] [--cases fp32,bf16,dp2]
[--sizes 2x64/s128,...] [--steps 30] [--repeats N] [--beyond PRESET:BATCH] [--save F | --load F [F ...]]
[--no-gemm-rates]
(``--save`` keeps every trial's result as JSON, ``--load`` recomputes the tables from one or more such files, their
trials pooled, without running a trial but ``--beyond``'s; ``--sizes`` runs some of the suite's sizes only, to add
rounds of them; ``--beyond paper:8`` also runs a size none of the suite's is, at each of ``--beyond-precisions``
[fp32], predicted from all of them: a precision whose suite sizes are neither run nor loaded (``--cases ''``) has
them run once first, since the prediction is calibrated on them).
On a GPU (``--device cuda``, when one is lent) the same comparison reads what the trials record there: the memory
increment from the framework's allocator counters (``torch.cuda.max_memory_allocated``, TensorFlow's
``get_memory_info`` peak, JAX's ``memory_stats``), which hold the tensors the count counts and not the CPU's arenas,
so ``fixed`` should shrink to the framework's workspace; the data-parallel case then has a device a replica.
Goal (#29): memory within 10%, step time within 15% on a CPU. Prints each case's error and the worst per column.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bakeoff.core import registry
from bakeoff.core.identity import identify
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec
from bakeoff.measure import gemm_rates
from bakeoff.plan.suite import load_suite
from bakeoff.predict import capacity
from bakeoff.run.executors import local

BATCH = 32


def spec_shape(spec: RunSpec) -> capacity.Shape:
    """The Transformer a text-classifier spec trains: its preset's configuration with the spec's overrides."""
    c = {**registry.workload("text_classifier").preset_configs[spec.preset], **{k: int(v) for k, v in spec.config}}
    return capacity.Shape(c["num_layers"], c["d_model"], c["num_heads"], c["seq_len"], c["vocab_size"], c["d_ff"],
                          lm_head=False)


SIZES: dict[str, RunSpec] = {}
"""A size's name (layers x width / sequence) -> the suite's spec of it (one of them: the sizes are the same in every
framework)."""
for _spec in load_suite("sizes").specs:
    _shape = spec_shape(_spec)
    SIZES.setdefault(f"{_shape.layers}x{_shape.width}/s{_shape.seq}", _spec)
CASES = {"fp32": ("fp32", "none", 1), "bf16": ("bf16", "none", 1), "dp2": ("fp32", "data_parallel", 2)}
"""name: (precision, parallelism, workers)."""
REPLICAS_A_PROCESS = {"torch": 1, "tensorflow": 2, "jax": 2}
"""Replicas one process of a data-parallel trial holds on a CPU (torchrun: one a process; MirroredStrategy and a
JAX mesh: every replica in one process)."""


def size_of(result: TrialResult) -> str | None:
    """The suite's size a trial trained, or None (a ``--beyond`` trial)."""
    shape = capacity.trial_shape(result)
    return next((name for name in SIZES if shape_of(name) == shape), None)


def shape_of(size: str) -> capacity.Shape:
    return spec_shape(SIZES[size])


def measure(frameworks: list[str], cases: list[str], steps: int, repeats: int, device: str,
            sizes: list[str]) -> list[TrialResult]:
    """Every case × size (of ``sizes``) × framework, ``repeats`` rounds of each (a round runs every configuration
    once): the suite's trial of that size and framework, in the case's precision and parallelism."""
    suite = [s for s in load_suite("sizes").specs if s.seed == 0]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in [c for _ in range(repeats) for c in cases]:
            precision, parallelism, workers = CASES[case]
            for size, sized in [(name, SIZES[name]) for name in sizes]:
                for framework in frameworks:
                    base = next(s for s in suite if s.framework.value == framework
                                and (s.preset, s.config) == (sized.preset, sized.config))
                    [spec] = identify([dataclasses.replace(
                        base, precision=precision, parallelism=parallelism, workers=workers, batch_size=BATCH,
                        max_steps=steps, eval_every=steps, device=device)])
                    r = local.run_one(spec, 1200, Path(tmp) / "logs", evaluate=False)
                    out.append(r)
                    if r.status.value != "ok" or r.memory_increment_bytes is None or r.steady_step_s is None:
                        sys.stdout.write(f"  {case} {framework} {size}: not measured ({r.status.value}: "
                                         f"{r.reason[:200]})\n")
                    else:
                        sys.stdout.write(f"  {case} {framework} {size}: increment "
                                         f"{r.memory_increment_bytes / 2**20:.1f} MiB, step "
                                         f"{r.steady_step_s * 1e3:.1f} ms\n")
                    sys.stdout.flush()
    return out


def measured(results: list[TrialResult], framework: str, case: str) -> dict[str, list[TrialResult]]:
    """Each size's successful trials of ``framework`` in ``case``."""
    precision, parallelism, workers = CASES[case]
    out: dict[str, list[TrialResult]] = {}
    for r in results:
        if (r.status.value == "ok" and r.memory_increment_bytes is not None and r.steady_step_s
                and r.spec["framework"] == framework and r.spec["precision"] == precision
                and r.spec["parallelism"] == parallelism and int(r.spec["workers"]) == workers
                and (size := size_of(r)) is not None):
            out.setdefault(size, []).append(r)
    return out


def medians(trials: list[TrialResult]) -> tuple[float, float]:
    """The median memory increment and the median steady step of one size's trials."""
    return (statistics.median(float(r.memory_increment_bytes) for r in trials),
            statistics.median(float(r.steady_step_s) for r in trials))


def row_of(framework: str, size: str, precision: str, devices: int, cal: capacity.Calibration,
           shape: capacity.Shape | None = None, batch: int = BATCH, rates: Rates = None) -> capacity.Row:
    result = capacity.plan(shape or shape_of(size), capacity.Machine(devices, 1e12), batch, precision, fused=False,
                           calibrations=[cal], rates=rates)
    return next(r for r in result.rows if (r.framework, r.kind) == (framework, "data"))


Rates = dict[tuple[str, str], dict[tuple[int, int, int, int], float]] | None


def measure_rates(results: list[TrialResult], device: str) -> dict[tuple[str, str], dict]:
    """This machine's GEMM rates by shape for every framework and precision among ``results``, covering each
    successful trial's GEMMs (:mod:`bakeoff.measure.gemm_rates`: measured once, then read from its cache)."""
    needs: dict[tuple[str, str], set] = {}
    for r in results:
        if r.status.value == "ok" and (shape := capacity.trial_shape(r)) is not None:
            needs.setdefault((r.spec["framework"], r.spec["precision"]), set()).update(
                g.key for g in capacity.gemms(shape, int(r.spec["batch_size"])))
    out = {}
    for (framework, precision), keys in needs.items():
        t0 = time.perf_counter()
        out[framework, precision] = gemm_rates.rates(framework, precision, sorted(keys), device=device)
        sys.stdout.write(f"  GEMM rates {framework} {precision}: {len(out[framework, precision])} of {len(keys)} "
                         f"shapes in {time.perf_counter() - t0:.1f} s (kept in {gemm_rates.cache_path()})\n")
    return out


def flat_step(cal: capacity.Calibration, shape: capacity.Shape, batch: int) -> float:
    """The calibrated step with one FLOP rate (the plan's before #49)."""
    return cal.step(capacity.training_flops(shape, batch), capacity.attention_elements(shape, batch))


def one_device(results: list[TrialResult], framework: str, case: str,
               rates: Rates = None) -> list[tuple[str, float, dict[str, float]]]:
    """Each size: its measured (increment, step) and each column's error, from the other sizes' calibration."""
    precision = CASES[case][0]
    mine = measured(results, framework, case)
    out = []
    for size, trials in mine.items():
        others = [o for s, more in mine.items() if s != size for o in more]
        cals = capacity.calibrate(others, rates)
        if not cals:
            continue
        [cal] = cals
        row = row_of(framework, size, precision, 1, cal, rates=rates)
        memory, step = medians(trials)
        rate = statistics.median(capacity.training_flops(capacity.trial_shape(o), BATCH) / o.steady_step_s
                                 for o in others)
        out.append((size, memory, step, {
            "count": (row.gradients + row.activations) / memory - 1,
            "calibrated": (row.calibrated_total - row.weights - row.copy - row.optimizer) / memory - 1,
            "MFU": capacity.training_flops(shape_of(size), BATCH) / rate / step - 1,
            "calibrated step": flat_step(cal, shape_of(size), BATCH) / step - 1,
            **({"by shape": row.calibrated_compute_s / step - 1} if cal.rated else {})}))
    return out


def data_parallel(results: list[TrialResult], framework: str) -> list[tuple[str, float, float, dict[str, float]]]:
    """Each size's 2-replica trial predicted from the framework's one-device fp32 calibration (all its sizes)."""
    cals = capacity.calibrate([r for more in measured(results, framework, "fp32").values() for r in more])
    if not cals:
        return []
    [cal] = cals
    out = []
    for size, trials in measured(results, framework, "dp2").items():
        row = row_of(framework, size, "fp32", 2, cal)
        replicas = REPLICAS_A_PROCESS[framework]
        memory, step = medians(trials)
        predicted = cal.fixed + cal.scale * replicas * (row.gradients + row.activations)
        out.append((size, memory, step, {"calibrated": predicted / memory - 1,
                                         "calibrated step": row.calibrated_compute_s / step - 1}))
    return out


def beyond(results: list[TrialResult], framework: str,
           rates: Rates = None) -> list[tuple[str, str, float, float, dict[str, float]]]:
    """Each ``--beyond`` trial (a shape none of the suite's sizes has) predicted through the plan from the
    framework's one-device calibration of all its sizes at the trial's precision: the plan's real use, a size it
    never saw. (precision, size, measured increment, measured step, errors)."""
    out = []
    for precision in ("fp32", "bf16"):
        trials = [r for more in measured(results, framework, precision).values() for r in more]
        cals = capacity.calibrate(trials, rates)
        if not cals:
            continue
        [cal] = cals
        for r in results:
            if (r.spec["framework"] != framework or r.spec["precision"] != precision or r.status.value != "ok"
                    or size_of(r) is not None or r.memory_increment_bytes is None or not r.steady_step_s):
                continue
            shape, batch = capacity.trial_shape(r), int(r.spec["batch_size"])
            row = row_of(framework, "", precision, 1, cal, shape, batch, rates)
            memory, step = float(r.memory_increment_bytes), float(r.steady_step_s)
            out.append((precision, f"{r.spec['preset']}/b{batch}", memory, step, {
                "count": (row.gradients + row.activations) / memory - 1,
                "calibrated": (row.calibrated_total - row.weights - row.copy - row.optimizer) / memory - 1,
                "calibrated step": flat_step(cal, shape, batch) / step - 1,
                **({"by shape": row.calibrated_compute_s / step - 1} if cal.rated else {})}))
    return out


def measure_beyond(frameworks: list[str], preset: str, batch: int, precisions: list[str], steps: int,
                   device: str) -> list[TrialResult]:
    """One one-device trial of ``preset`` at ``batch`` per framework and precision, in the framework's production
    mode."""
    suite = [s for s in load_suite("sizes").specs if s.seed == 0 and not s.config]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for precision in precisions:
            for framework in frameworks:
                base = next(s for s in suite if s.framework.value == framework)
                [spec] = identify([dataclasses.replace(base, preset=preset, batch_size=batch, max_steps=steps,
                                                       eval_every=steps, device=device, precision=precision)])
                r = local.run_one(spec, 3600, Path(tmp) / "logs", evaluate=False)
                out.append(r)
                sys.stdout.write(f"  beyond {framework} {preset}/b{batch} {precision}: {r.status.value}, increment "
                                 f"{(r.memory_increment_bytes or 0) / 2**20:.0f} MiB, "
                                 f"step {(r.steady_step_s or 0):.2f} s\n")
                sys.stdout.flush()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", default="torch,tensorflow,jax")
    parser.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    parser.add_argument("--sizes", default=",".join(SIZES), help=f"of {', '.join(SIZES)} (to add a round of some)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=1, help="rounds of every configuration (medians are used)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda: on a GPU the memory compared is the "
                                                        "framework allocator's peak increment, as the trials record")
    parser.add_argument("--beyond", metavar="PRESET:BATCH",
                        help="also run PRESET (e.g. paper) at BATCH once per framework and precision "
                             "(--beyond-precisions), and predict it from the calibration of every suite size at that "
                             "precision: a size the calibration never saw")
    parser.add_argument("--beyond-precisions", default="fp32", help="the precisions --beyond runs: fp32, bf16")
    parser.add_argument("--save", type=Path, help="keep every trial's result in this JSON file")
    parser.add_argument("--load", type=Path, nargs="+", help="recompute the tables from the results of one or more "
                                                             "files --save kept (their trials pooled)")
    parser.add_argument("--no-gemm-rates", action="store_true",
                        help="no 'by shape' column: do not measure (or read) this machine's GEMM rates by shape")
    args = parser.parse_args()
    if args.load:
        kept = [json.loads(path.read_text()) for path in args.load]
        results = [TrialResult.from_dict(r) for k in kept for r in k["results"]]
        steps = "/".join(sorted({str(k["steps"]) for k in kept}))
        frameworks = list(dict.fromkeys(r.spec["framework"] for r in results))
    else:
        frameworks = [f for f in args.frameworks.split(",") if registry.installed(f)]
        unknown = sorted(set(args.sizes.split(",")) - set(SIZES))
        if unknown:
            parser.error(f"unknown size(s) {', '.join(unknown)}; the suite's: {', '.join(SIZES)}")
        results = (measure(frameworks, [c for c in args.cases.split(",") if c], args.steps, args.repeats, args.device,
                           args.sizes.split(",")) if args.cases else [])
        steps = str(args.steps)
    if args.beyond:
        preset, _, batch = args.beyond.partition(":")
        precisions = args.beyond_precisions.split(",")
        if set(precisions) - {"fp32", "bf16"}:
            parser.error(f"--beyond-precisions {args.beyond_precisions}: accepted fp32, bf16")
        uncalibrated = [p for p in precisions if not any(measured(results, f, p) for f in frameworks)]
        if uncalibrated:  # the prediction is calibrated on the suite's sizes: run them once at those precisions
            sys.stdout.write(f"  calibrating --beyond: the suite's sizes at {', '.join(uncalibrated)}\n")
            results += measure(frameworks, uncalibrated, args.steps, 1, args.device, list(SIZES))
        results += measure_beyond(frameworks, preset, int(batch or BATCH), precisions, args.steps, args.device)
    rates = None if args.no_gemm_rates else measure_rates(results, args.device)
    if args.save:
        args.save.write_text(json.dumps({"steps": args.steps, "batch": BATCH,
                                         "results": [r.to_dict() for r in results]}))
    out = sys.stdout
    out.write(f"\ntext_classifier, batch {BATCH}, {steps} steps, one process a trial, {len(results)} trials "
              "(a size's median when it has several); errors are predicted / measured - 1; one device: each size "
              "predicted from the framework's other sizes (leave one out)\n")
    out.write(f"{'case':6}{'framework':11}{'size':10}{'memory':>10}{'count':>8}{'calibrated':>12}"
              f"{'step':>10}{'MFU':>8}{'calibrated':>12}{'by shape':>10}\n")
    worst: dict[tuple[str, str], float] = {}
    for case in CASES:
        for framework in frameworks:
            rows = (data_parallel(results, framework) if case == "dp2" else one_device(results, framework, case, rates))
            for size, memory, step, errors in rows:
                for column, error in errors.items():
                    worst[case, column] = max(worst.get((case, column), 0.0), abs(error))
                cells = [f"{errors[c]:>+{w}.0%}" if c in errors else f"{'—':>{w}}"
                         for c, w in (("count", 8), ("calibrated", 12))]
                steps_cells = [f"{errors[c]:>+{w}.0%}" if c in errors else f"{'—':>{w}}"
                               for c, w in (("MFU", 8), ("calibrated step", 12), ("by shape", 10))]
                out.write(f"{case:6}{framework:11}{size:10}{memory / 2**20:>7.0f}MiB{''.join(cells)}"
                          f"{step * 1e3:>8.0f}ms{''.join(steps_cells)}\n")
    for framework in frameworks:
        for precision, size, memory, step, errors in beyond(results, framework, rates):
            case = f"beyond {precision}"
            for column, error in errors.items():
                worst[case, column] = max(worst.get((case, column), 0.0), abs(error))
            out.write(f"{'beyond':7}{framework:11}{size + ' ' + precision:13}{memory / 2**20:>6.0f}MiB"
                      f"{errors['count']:>+8.0%}{errors['calibrated']:>+12.0%}{step * 1e3:>8.0f}ms{'—':>8}"
                      f"{errors['calibrated step']:>+12.0%}"
                      + (f"{errors['by shape']:>+10.0%}" if "by shape" in errors else f"{'—':>10}") + "\n")
    if rates:
        for framework in frameworks:
            for precision in ("fp32", "bf16"):
                trials = [r for more in measured(results, framework, precision).values() for r in more]
                for cal in capacity.calibrate(trials, rates):
                    if cal.rated:
                        out.write(f"by shape, {framework} {precision} (all sizes): the GEMMs at this machine's rates "
                                  f"+ {cal.gemm_per_element * 1e9:.2f} ns an attention element + "
                                  f"{cal.gemm_per_activation * 1e9:.2f} ns an activation element; leave-one-out ≤ "
                                  f"{cal.gemm_step_error:.0%}\n")
    for case in (*CASES, "beyond fp32", "beyond bf16"):
        found = {column: error for (c, column), error in worst.items() if c == case}
        if found:
            out.write(f"worst, {case}: " + ", ".join(f"{column} {error:.0%}" for column, error in found.items())
                      + " (goal: memory 10%, step 15%)\n")


if __name__ == "__main__":
    main()
