"""The verdict's error rates in full: every null scenario, the power and the intervals' coverage.

Run: .venv/bin/python bench/calibration.py [DRAWS]     (default 1000 a scenario; about 30 ms a draw on 2 cores)

Bounds (tests/test_calibration.py checks them at fewer draws): false "wins" <= 5% in every null scenario, false
"robust" <= 1%, a 1.3x difference at 5% noise called at 3 runs >= 80%, 95% intervals covering the true ratio
>= 90% at 3 runs. A one-run "leads" is provisional; its null rate is printed, not bounded. Adaptive repeats
(``--repeats auto``, 3 runs then one more at a time while unsettled, up to 6) are held to the same bounds.
"""

from __future__ import annotations

import math
import sys

from bakeoff.analysis.calibration import Noise, Scenario, adaptive_scenarios, scenarios, simulate, table


def main() -> None:
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    cases = [*scenarios(2), *scenarios(3),
             *(Scenario(f"{p:.0%}, n = 1, 2 sides", 1, (Noise.uniform(p),) * 2) for p in (0.05, 0.10, 0.25)),
             Scenario("10%, n = 2, 2 sides", 2, (Noise.uniform(0.10),) * 2),
             *(Scenario(f"power: 1.3x at {p:.0%}, n = {n}", n, (Noise.uniform(p),) * 2, (1.3, 1.0))
               for p in (0.05, 0.10) for n in (3, 5)),
             *adaptive_scenarios()]
    columns = ["scenario", "wins", "robust", "provisional leads", "right wins", "coverage throughput",
               "coverage time to target"]
    sys.stdout.write(f"{draws} draws a scenario; rates are shares of draws, coverage a share of the intervals given\n")
    sys.stdout.write("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n")
    for case in cases:
        row = table([simulate(case, draws)])[0]
        cells = [row[c] if isinstance(row[c], str) else "—" if math.isnan(row[c]) else f"{100 * row[c]:.1f}%"
                 for c in columns]
        sys.stdout.write("| " + " | ".join(str(c) for c in cells) + " |\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
