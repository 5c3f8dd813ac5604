"""How close `bakeoff plan` comes to measured trials (#29 item 2): text_classifier at `tiny` and `small`, one device,
batch 32, fp32, each framework in its production mode, each trial in its own fresh process (the real runner).

Memory: the plan's training increment — gradients and activations; the weights and Adam's moments are in every
engine's memory baseline — against the trial's measured ``memory_increment_bytes`` (RSS on a CPU).
Step time: the plan's ``6·P·tokens`` at the rate the *other* preset's trial achieved (calibrated on `tiny`, predict
`small`, and the other way), against the trial's steady step — what "calibrated by measured trials" means here.

Run: .venv/bin/python bench/plan_accuracy.py [--frameworks torch,tensorflow,jax] [--steps 30]
Goal (#29): memory within 10%, step time within 15% on a CPU. Prints each case's error; says what dominates it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bakeoff.core import registry
from bakeoff.core.identity import identify
from bakeoff.core.spec import RunSpec
from bakeoff.plan.capacity import Machine, Shape, plan
from bakeoff.run.executors import local as runner

MODES = {"torch": "eager", "tensorflow": "graph", "jax": "graph"}
PRESETS = ("tiny", "small")
BATCH = 32


def shape_of(preset: str) -> Shape:
    c = registry.workload("text_classifier").preset_configs[preset]
    return Shape(c["num_layers"], c["d_model"], c["num_heads"], c["seq_len"], c["vocab_size"], c["d_ff"],
                 lm_head=False)


def predicted(preset: str) -> tuple[float, float]:
    """(training memory increment, training FLOPs a step) the plan gives one device at batch 32, fp32, attention
    unfused (the text classifier's attention has dropout, so every framework keeps its scores)."""
    shape = shape_of(preset)
    row = next(r for r in plan(shape, Machine(1, 1e12), BATCH, "fp32", fused=False).rows
               if (r.framework, r.kind) == ("torch", "data"))
    return row.gradients + row.activations, 6 * shape.compute_params * BATCH * shape.seq


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", default=",".join(MODES))
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    frameworks = [f for f in args.frameworks.split(",") if registry.installed(f)]
    measured: dict[tuple[str, str], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for preset in PRESETS:
            for framework in frameworks:
                [spec] = identify([RunSpec(workload="text_classifier", preset=preset, framework=framework,
                                           execution=MODES[framework], batch_size=BATCH, max_steps=args.steps,
                                           eval_every=args.steps, seed=0, device="cpu")])
                r = runner.run_one(spec, 1200, Path(tmp) / "logs", evaluate=False)
                if r.status.value != "ok" or r.memory_increment_bytes is None or r.steady_step_s is None:
                    sys.stdout.write(f"{framework} {preset}: not measured ({r.status.value}: {r.reason})\n")
                    continue
                measured[framework, preset] = (float(r.memory_increment_bytes), float(r.steady_step_s))
                sys.stdout.write(f"  {framework} {preset}: increment {r.memory_increment_bytes / 2**20:.1f} MiB, "
                                 f"step {r.steady_step_s * 1e3:.1f} ms\n")
    out = sys.stdout
    out.write(f"text_classifier, batch {BATCH}, fp32, {args.steps} steps, one CPU process each\n")
    out.write(f"{'framework':11}{'preset':7}{'memory plan':>13}{'measured':>11}{'error':>8}"
              f"{'step plan':>12}{'measured':>11}{'error':>8}  (step calibrated on the other preset)\n")
    for framework in frameworks:
        for preset, other in zip(PRESETS, PRESETS[::-1], strict=True):
            if (framework, preset) not in measured or (framework, other) not in measured:
                continue
            memory, step = measured[framework, preset]
            plan_memory, flops = predicted(preset)
            rate = predicted(other)[1] / measured[framework, other][1]  # FLOP/s achieved on the other preset
            plan_step = flops / rate
            out.write(f"{framework:11}{preset:7}{plan_memory / 2**20:>10.1f}MiB{memory / 2**20:>8.1f}MiB"
                      f"{plan_memory / memory - 1:>+8.0%}{plan_step * 1e3:>10.1f}ms{step * 1e3:>9.1f}ms"
                      f"{plan_step / step - 1:>+8.0%}\n")
    out.write("memory: the plan counts gradients and the activations backward keeps; RSS also holds the allocator's "
              "cache, framework workspaces and temporaries, which the plan leaves out\n")


if __name__ == "__main__":
    main()
