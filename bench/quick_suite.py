"""The quick suite end to end, as `make demo` runs it: wall time and whether every trial reached its target.

Run: .venv/bin/python bench/quick_suite.py      Target: under 5 minutes on a 2-core CPU, every trial at target.
Uses a fresh store in a temporary directory, so nothing is skipped.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    from bakeoff.results.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "bakeoff.cli", "run", "--suite", "quick", "--store", "r.sqlite",
                        "--out", "report"], cwd=tmp, check=False)
        wall = time.perf_counter() - start
        with Store(Path(tmp) / "r.sqlite") as store:
            results = store.results()
    out = sys.stdout
    out.write(f"\nquick suite: {len(results)} trials in {wall:.0f} s wall (target < 300 s: "
              f"{'met' if wall < 300 else 'MISSED'})\n")
    for r in results:
        spec = r.run_spec
        out.write(f"  {spec.workload:<16} {spec.label():<18} {r.status.value:<8} process {r.wall_s or 0:6.1f} s  "
                  f"import {r.import_s or 0:4.1f} s  first step {r.first_step_s or 0:5.1f} s  steady "
                  f"{(r.steady_step_s or 0) * 1e3:6.1f} ms  {r.metric_name} {r.final_metric}  target "
                  f"{r.target} in {r.time_to_target_s if r.time_to_target_s is None else round(r.time_to_target_s, 1)}"
                  f" s ({r.steps_to_target} steps)\n")
    reached = sum(r.time_to_target_s is not None for r in results)
    out.write(f"reached target: {reached}/{len(results)}\n")


if __name__ == "__main__":
    main()
