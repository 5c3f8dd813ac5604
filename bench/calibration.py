"""The verdict's error rates in full: every null scenario, the power and the intervals' coverage.

Run: .venv/bin/python bench/calibration.py [DRAWS]     (default 1000 a scenario; about 30 ms a draw on 2 cores, an
adaptive draw up to 8 times that)

Bounds (tests/test_calibration.py checks them at fewer draws): false "wins" <= 5% in every null scenario, false
"robust" <= 1% — at 1-25% noise, unequal noise, drifting steps, lost runs, heavy tails, bimodal runs, machine-load
drift, many timeouts, unequal n and the user's weights on two level criteria; a 1.3x difference at 5% noise called
at 3 runs >= 80%; 95% intervals covering the true ratio >= 90% at 3 runs. A one-run "leads" is provisional; its
null rate is printed, not bounded. Adaptive repeats (``--repeats auto``, 3 runs then one more at a time while
unsettled, up to 10) are held to the same bounds, and call a true 1.15x at 5% noise and 1.3x at 10% >= 80% of the
time in at most 8 runs a side on average ("mean runs": runs a side when the verdict was read).
"""

from __future__ import annotations

import math
import sys

from bakeoff.analysis.calibration import Noise, Scenario, adaptive_scenarios, scenarios, simulate, table


def cases() -> list[Scenario]:
    """Every scenario the table prints, in its order."""
    return [*scenarios(2), *scenarios(3),
            *(Scenario(f"{p:.0%}, n = 1, 2 sides", 1, (Noise.uniform(p),) * 2) for p in (0.05, 0.10, 0.25)),
            Scenario("10%, n = 2, 2 sides", 2, (Noise.uniform(0.10),) * 2),
            *(Scenario(f"power: {s:g}x at {p:.0%}, n = {n}", n, (Noise.uniform(p),) * 2, (s, 1.0))
              for s, p in ((1.3, 0.05), (1.3, 0.10), (1.15, 0.05)) for n in (3, 5)),
            Scenario("power: 1.15x at 3% under load drift 10%, n = 6", 6, (Noise.uniform(0.03),) * 2, (1.15, 1.0),
                     load_drift=0.10),
            *adaptive_scenarios()]


def main() -> None:
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    sys.stdout.write(f"{draws} draws a scenario; rates are shares of draws, coverage a share of the intervals given, "
                     "mean runs the runs a side the verdicts were read at\n")
    for i, case in enumerate(cases()):
        row = table([simulate(case, draws)])[0]
        columns = [c for c in row if c != "draws"]  # the table's own, coverage of each criterion speed moves
        if i == 0:
            sys.stdout.write("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n")
        cells = [row[c] if isinstance(row[c], str) else "—" if math.isnan(row[c]) else
                 f"{row[c]:.1f}" if c == "mean runs" else f"{100 * row[c]:.1f}%" for c in columns]
        sys.stdout.write("| " + " | ".join(str(c) for c in cells) + " |\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
