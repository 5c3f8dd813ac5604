"""Does evaluation change the training memory figure? The text classifier at `small` in each framework (its production
mode), 20 steps of 32, once evaluated (the step-0 evaluation and every 10 steps, batches of 256) and once never,
through the real runner (one fresh process per trial): the memory baseline and training increment of each.

The memory criterion scores the training increment; a framework whose figure moves with evaluation is measured on
something other than training. Before 2026-12-06 the baseline came after the step-0 evaluation and TensorFlow's
increment read 370 MiB evaluated against 1,180 MiB not (JAX 1,182 against 2,034); with the baseline before any
evaluation, what an evaluation leaves held counts, as it does for a mid-run evaluation.

Run: .venv/bin/python bench/evaluation_memory.py [--frameworks torch,tensorflow,jax] [--preset small]
Target: evaluated and not within ~15% for every framework (what an evaluation leaves held is real memory).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from bakeoff.core import registry
from bakeoff.core.identity import identify
from bakeoff.core.spec import RunSpec
from bakeoff.run.executors import local

MIB = 2**20
MODES = {"torch": "eager", "tensorflow": "graph", "jax": "graph"}  # each framework as its users train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", default=",".join(MODES))
    parser.add_argument("--preset", default="small")
    args = parser.parse_args()
    out = sys.stdout
    out.write(f"{'framework':11}{'evaluated':>10}{'baseline':>10}{'increment':>11}{'step':>9}\n")
    with tempfile.TemporaryDirectory() as tmp:
        for framework in [f for f in args.frameworks.split(",") if registry.installed(f)]:
            for evaluate in (True, False):
                [spec] = identify([RunSpec(workload="text_classifier", preset=args.preset, framework=framework,
                                           execution=MODES[framework], batch_size=32, max_steps=20, eval_every=10,
                                           seed=0, device="cpu")])
                r = local.run_one(spec, 1200, Path(tmp) / "logs", evaluate=evaluate)
                if r.status.value != "ok" or r.memory_increment_bytes is None or r.memory_baseline_bytes is None:
                    out.write(f"{framework:11}{'yes' if evaluate else 'no':>10}  not measured ({r.status.value}: "
                              f"{r.reason[:200]})\n")
                    continue
                out.write(f"{framework:11}{'yes' if evaluate else 'no':>10}"
                          f"{r.memory_baseline_bytes / MIB:>7.0f}MiB{r.memory_increment_bytes / MIB:>8.0f}MiB"
                          f"{(r.steady_step_s or 0) * 1e3:>7.0f}ms\n")
                out.flush()


if __name__ == "__main__":
    main()
