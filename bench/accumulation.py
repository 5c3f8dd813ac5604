"""Gradient-accumulation overhead: k = 4 micro-batches of b against one batch of 4·b, same framework and mode.

Both run the engine's real ``train_step`` on the same 4·b examples (as 4 micro-batches, or concatenated), in
alternating rounds, one framework and mode per process. Target: accumulation costs at most 10% more.

Run: .venv/bin/python bench/accumulation.py
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

from _common import build_engine, in_child

MICRO, K, STEPS, ROUNDS = 8, 4, 15, 5
CASES = [("torch", "eager"), ("tensorflow", "eager"), ("tensorflow", "graph")]


def measure(framework: str, execution: str) -> dict[str, float]:
    accum, workload, data, _ = build_engine(framework, execution=execution, batch_size=MICRO, grad_accum=K)
    whole, *_ = build_engine(framework, execution=execution, batch_size=MICRO * K)
    micro = list(workload.batches(data.train, MICRO, 0, 0))[:STEPS * K]
    steps = [micro[i:i + K] for i in range(0, len(micro), K)]
    joined = [[{k: np.concatenate([m[k] for m in group]) for k in group[0]}] for group in steps]
    for engine, batches in ((accum, steps), (whole, joined)):
        engine.train_step(batches[0])  # first step: tracing / compilation is not accumulation overhead
    times: dict[str, list[float]] = {"accumulated": [], "whole": []}
    for _ in range(ROUNDS):
        for name, engine, batches in (("accumulated", accum, steps), ("whole", whole, joined)):
            start = time.perf_counter()
            for batch in batches:
                engine.train_step(batch)
            times[name].append((time.perf_counter() - start) / len(batches))
    return {name: statistics.median(v) for name, v in times.items()}


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        json.dump(measure(sys.argv[2], sys.argv[3]), sys.stdout)
        return
    for framework, execution in CASES:
        r = in_child(__file__, framework, execution)
        overhead = r["accumulated"] / r["whole"] - 1
        sys.stdout.write(f"{framework}/{execution}: {K}×{MICRO} accumulated {r['accumulated'] * 1e3:.1f} ms/step, "
                         f"1×{K * MICRO} {r['whole'] * 1e3:.1f} ms/step: overhead {overhead:+.1%} "
                         f"(target ≤ 10%: {'met' if overhead <= 0.10 else 'MISSED'})\n")


if __name__ == "__main__":
    main()
