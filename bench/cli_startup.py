"""How long `bakeoff --help` takes, and proof that it imports no framework.

Run: .venv/bin/python bench/cli_startup.py        Target: under 1 s.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

REPEATS = 7


def main() -> None:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "bakeoff.cli", "--help"], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    probe = ("import sys, bakeoff.cli.main as c; c.build_parser().format_help(); "
             "print(' '.join(m for m in ('torch','tensorflow','jax','keras') if m in sys.modules) or 'none')")
    leaked = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout.strip()
    median = statistics.median(times)
    sys.stdout.write(f"bakeoff --help: median {median:.3f} s over {REPEATS} runs (min {min(times):.3f}, "
                     f"max {max(times):.3f}); frameworks imported: {leaked}; target < 1 s: "
                     f"{'met' if median < 1 else 'MISSED'}\n")


if __name__ == "__main__":
    main()
