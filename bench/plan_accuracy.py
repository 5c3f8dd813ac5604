"""How close `bakeoff plan`'s formulas come to measured trials (#29 item 2): the text classifier at four sizes (the
`tiny` and `small` presets and two between them, by `--set`), one device, batch 32, fp32, each framework in its
production mode, each trial in its own fresh process (the real runner, no evaluation). Every prediction of a size
is calibrated on the framework's *other* sizes only (leave one out): "calibrated by measured trials", tested on a
trial the calibration did not see.

Memory — the training increment (gradients and activations: Korthikanti et al.'s per-layer count, unfused
attention, since the classifier's attention has dropout; the weights and Adam's moments are in every engine's
memory baseline) against the trial's measured ``memory_increment_bytes`` (resident memory on a CPU):
  * ``formula``: the plan's count as it stands;
  * ``fixed+scale``: ``a + k × formula``, ``a`` the framework's own working memory (allocator arenas, XLA's
    buffers, temporaries) and ``k`` what the count misses in proportion, both fitted (least squares).
Step time — against the trial's steady step:
  * ``plan``: ``6·P·tokens`` at one rate fitted to the other sizes (the plan's way: FLOPs at a measured MFU);
  * ``two-term``: the matmuls' FLOPs, ``6·P·tokens`` plus attention's own ``12·s²·h·batch·layers`` (QKᵀ and AV,
    forward and backward, which the plan leaves out), at a fitted rate, plus the softmax-sized elementwise work
    (``heads·s²·batch·layers`` elements: softmax, dropout, their backward; memory-bound on a CPU) at a fitted rate.

Run: .venv/bin/python bench/plan_accuracy.py [--frameworks torch,tensorflow,jax] [--steps 30] [--save F | --load F]
(``--save`` keeps the measurements as JSON, ``--load`` recomputes the table from them without running a trial).
Goal (#29): memory within 10%, step time within 15% on a CPU. Prints each case's error and the worst per column.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from bakeoff.core import registry
from bakeoff.core.identity import identify
from bakeoff.core.spec import RunSpec
from bakeoff.plan.capacity import Machine, Shape, plan
from bakeoff.run.executors import local as runner

MODES = {"torch": "eager", "tensorflow": "graph", "jax": "graph"}
BATCH = 32
SIZES: dict[str, tuple[str, dict[str, int]]] = {  # name: (preset, overrides)
    "tiny": ("tiny", {}),
    "tiny-w128": ("tiny", {"d_model": 128, "d_ff": 256}),
    "mid": ("tiny", {"d_model": 128, "d_ff": 512, "num_layers": 4, "seq_len": 256, "vocab_size": 8000}),
    "small": ("small", {}),
}


def shape_of(size: str) -> Shape:
    preset, overrides = SIZES[size]
    c = {**registry.workload("text_classifier").preset_configs[preset], **overrides}
    return Shape(c["num_layers"], c["d_model"], c["num_heads"], c["seq_len"], c["vocab_size"], c["d_ff"],
                 lm_head=False)


def features(size: str) -> dict[str, float]:
    """What the predictions of ``size`` are made from: the plan's training increment (bytes), its ``6·P·tokens``
    FLOPs, attention's own matmul FLOPs and its softmax-sized elements, a step at batch 32, fp32."""
    shape = shape_of(size)
    row = next(r for r in plan(shape, Machine(1, 1e12), BATCH, "fp32", fused=False).rows
               if (r.framework, r.kind) == ("torch", "data"))
    s, h, layers = shape.seq, shape.width, shape.layers
    return {"memory": row.gradients + row.activations, "flops": 6 * shape.compute_params * BATCH * s,
            "attention_flops": 12 * s * s * h * BATCH * layers, "elements": shape.heads * s * s * BATCH * layers}


def fitted(columns: list[list[float]], targets: list[float], row: list[float]) -> float:
    """Least squares ``targets ≈ columns · x`` (one list of features per case), evaluated at ``row``."""
    x = np.linalg.lstsq(np.array(columns), np.array(targets), rcond=None)[0]
    return float(np.dot(x, row))


def predictions(size: str, others: list[str], measured: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Each model's prediction of ``size`` from the framework's measurements of ``others``."""
    f, seen = features(size), {o: features(o) for o in others}
    memory = [measured[o][0] for o in others]
    step = [measured[o][1] for o in others]
    return {
        "formula": f["memory"],
        "fixed+scale": fitted([[1.0, seen[o]["memory"]] for o in others], memory, [1.0, f["memory"]]),
        "plan": fitted([[seen[o]["flops"]] for o in others], step, [f["flops"]]),
        "two-term": fitted([[seen[o]["flops"] + seen[o]["attention_flops"], seen[o]["elements"]] for o in others],
                           step, [f["flops"] + f["attention_flops"], f["elements"]]),
    }


def measure(frameworks: list[str], steps: int) -> dict[tuple[str, str], tuple[float, float]]:
    measured: dict[tuple[str, str], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size, (preset, overrides) in SIZES.items():
            for framework in frameworks:
                [spec] = identify([RunSpec(workload="text_classifier", preset=preset, framework=framework,
                                           execution=MODES[framework], batch_size=BATCH, max_steps=steps,
                                           eval_every=steps, seed=0, device="cpu",
                                           config=tuple((k, str(v)) for k, v in overrides.items()))])
                r = runner.run_one(spec, 1200, Path(tmp) / "logs", evaluate=False)
                if r.status.value != "ok" or r.memory_increment_bytes is None or r.steady_step_s is None:
                    sys.stdout.write(f"  {framework} {size}: not measured ({r.status.value}: {r.reason[:200]})\n")
                    continue
                measured[framework, size] = (float(r.memory_increment_bytes), float(r.steady_step_s))
                sys.stdout.write(f"  {framework} {size}: increment {r.memory_increment_bytes / 2**20:.1f} MiB, "
                                 f"step {r.steady_step_s * 1e3:.1f} ms\n")
                sys.stdout.flush()
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", default=",".join(MODES))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--save", type=Path, help="keep the measurements in this JSON file")
    parser.add_argument("--load", type=Path, help="recompute the table from measurements --save kept")
    args = parser.parse_args()
    frameworks = [f for f in args.frameworks.split(",") if registry.installed(f)]
    if args.load:
        kept = json.loads(args.load.read_text())
        measured = {(fw, size): tuple(v) for fw, sizes in kept["measured"].items() for size, v in sizes.items()}
        frameworks, steps = list(kept["measured"]), kept["steps"]
    else:
        measured, steps = measure(frameworks, args.steps), args.steps
    if args.save:
        by_framework: dict[str, dict[str, list[float]]] = {}
        for (fw, size), values in measured.items():
            by_framework.setdefault(fw, {})[size] = list(values)
        args.save.write_text(json.dumps({"steps": steps, "batch": BATCH, "measured": by_framework}, indent=1))
    out = sys.stdout
    out.write(f"\ntext_classifier, batch {BATCH}, fp32, {steps} steps, one CPU process each; errors are predicted / "
              "measured - 1, each size predicted from the framework's other sizes (leave one out)\n")
    out.write(f"{'framework':11}{'size':10}{'memory':>10}{'formula':>9}{'fixed+scale':>12}"
              f"{'step':>10}{'plan':>8}{'two-term':>10}\n")
    worst = dict.fromkeys(("formula", "fixed+scale", "plan", "two-term"), 0.0)
    for framework in frameworks:
        sizes = [s for s in SIZES if (framework, s) in measured]
        mine = {s: measured[framework, s] for s in sizes}
        for size in sizes:
            others = [s for s in sizes if s != size]
            if len(others) < 3:
                continue
            memory, step = mine[size]
            guess = predictions(size, others, mine)
            errors = {k: v / (memory if k in ("formula", "fixed+scale") else step) - 1 for k, v in guess.items()}
            for k, v in errors.items():
                worst[k] = max(worst[k], abs(v))
            out.write(f"{framework:11}{size:10}{memory / 2**20:>7.0f}MiB{errors['formula']:>+9.0%}"
                      f"{errors['fixed+scale']:>+12.0%}{step * 1e3:>8.0f}ms{errors['plan']:>+8.0%}"
                      f"{errors['two-term']:>+10.0%}\n")
    out.write(f"worst: memory — formula {worst['formula']:.0%}, fixed+scale {worst['fixed+scale']:.0%} (goal 10%); "
              f"step — plan {worst['plan']:.0%}, two-term {worst['two-term']:.0%} (goal 15%)\n")


if __name__ == "__main__":
    main()
