"""Compile time of each framework's compiled mode on the text classifier: jax.jit against tf.function, XLA and
torch.compile, each the whole training step, measured the way every trial measures it.

Each case is a real trial (``bakeoff.run.executors.local.run_one``: a fresh process, empty compile caches),
text classifier ``tiny``, batch 32, 8 steps, 3 repeats, the frameworks interleaved. The compile cost is the
first step's time minus the median steady step (the first step also runs the step once), and the import and
model-build times are shown beside it; the graphs built are each engine's count (a new input shape would add one).

Run: .venv/bin/python bench/compile_time.py [REPEATS]     (about 4 minutes on 2 cores)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from bakeoff.core import registry
from bakeoff.core.spec import RunSpec, Status
from bakeoff.run.executors.local import run_one

CASES = [("jax", "graph"), ("tensorflow", "graph"), ("tensorflow", "xla"), ("torch", "graph")]


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    cases = [c for c in CASES if registry.installed(c[0])]
    rows: dict[tuple[str, str], list] = {c: [] for c in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(repeats):
            for framework, execution in cases:  # interleaved: drift on the machine falls on every case alike
                spec = RunSpec(workload="text_classifier", framework=framework, execution=execution, batch_size=32,
                               max_steps=8, eval_every=1000, warmup_steps=2, seed=seed, device="cpu")
                result = run_one(spec, 900, Path(tmp) / "logs")
                if result.status is not Status.OK:
                    sys.stdout.write(f"{framework}/{execution} seed {seed}: {result.status}: {result.reason}\n")
                    continue
                rows[framework, execution].append(result)
    sys.stdout.write(f"{'configuration':<18} {'compile s':>20} {'first step s':>13} {'steady ms':>10} "
                     f"{'import s':>9} {'build s':>8} {'graphs':>7}\n")
    for (framework, execution), results in rows.items():
        if not results:
            continue
        compile_s = [r.first_step_s - r.steady_step_s for r in results]
        med = statistics.median
        sys.stdout.write(
            f"{framework + '/' + execution:<18} {med(compile_s):>8.2f} ({min(compile_s):.2f}–{max(compile_s):.2f})"
            f" {med([r.first_step_s for r in results]):>13.2f} {med([r.steady_step_s for r in results]) * 1e3:>10.1f}"
            f" {med([r.import_s for r in results]):>9.2f} {med([r.build_s for r in results]):>8.2f}"
            f" {results[0].training.graph_builds:>7}\n")
    sys.stdout.write(f"median (min–max) of {repeats} fresh-process trials each; compile = first step − steady step\n")


if __name__ == "__main__":
    main()
