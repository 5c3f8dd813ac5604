"""What one trial's process carries: frameworks loaded, import time, and memory (baseline, training increment,
whole-trial peak), for each framework on MNIST tiny, through the real runner (one fresh process per trial).

Run: .venv/bin/python bench/trial_footprint.py [ROUNDS]      Rounds alternate the frameworks (default 3).
Target: each trial loads only its own framework; PyTorch's peak is about its own import, not TensorFlow's too.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from bakeoff.core import registry
from bakeoff.core.identity import identify
from bakeoff.core.spec import RunSpec
from bakeoff.run.executors import local

MIB = 2**20
MODES = {"torch": "eager", "tensorflow": "graph"}  # each framework as its users train


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    frameworks = [f for f in MODES if registry.installed(f)]
    rows: dict[str, list] = {f: [] for f in frameworks}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(rounds):
            for framework in frameworks if round_ % 2 == 0 else frameworks[::-1]:
                [spec] = identify([RunSpec(workload="mnist", framework=framework, execution=MODES[framework],
                                           max_steps=40, eval_every=20, seed=round_, device="cpu")])
                r = local.run_one(spec, 600, Path(tmp) / "logs", tensorboard_dir=Path(tmp) / f"tb{round_}")
                if r.status.value != "ok":
                    raise SystemExit(f"{framework} trial {r.status.value}: {r.reason}")
                rows[framework].append(r)
    out = sys.stdout
    out.write(f"MNIST tiny, 40 steps, {rounds} trials per framework, alternating; medians (min-max)\n")
    for framework, results in rows.items():
        loaded = sorted({f for r in results for f in r.environment["frameworks_loaded"]})

        def cell(values: list[float], digits: int = 0) -> str:
            return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"

        out.write(f"{framework:>10} {MODES[framework]:>5}: frameworks loaded {', '.join(loaded)}; "
                  f"import {cell([r.import_s for r in results], 2)} s; "
                  f"baseline {cell([r.memory_baseline_bytes / MIB for r in results])} MiB; "
                  f"training increment {cell([r.memory_increment_bytes / MIB for r in results], 1)} MiB; "
                  f"peak {cell([r.peak_memory_bytes / MIB for r in results])} MiB ({results[0].memory_kind})\n")


if __name__ == "__main__":
    main()
