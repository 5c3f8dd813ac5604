"""Gradient-accumulation overhead: k = 4 micro-batches of b against one batch of 4·b, same framework and mode.

Both run the engine's real ``train_step`` on the same 4·b examples (as 4 micro-batches, or concatenated), in
alternating rounds, one framework and mode per process, for b = 8 and b = 32. Target: accumulation costs at most
10% more. Accumulation is used when one micro-batch already fills the device; at b = 8 the tiny model is far from
that, and a framework whose per-op dispatch dominates small batches (TF eager) pays for the small batch itself —
the bench prints the plain b-sized step time too, so the two costs can be told apart.

Run: .venv/bin/python bench/accumulation.py [MICRO_SIZE ...] [FRAMEWORK/EXECUTION ...]
(default: b = 8 and 32, torch/eager tensorflow/eager tensorflow/graph)
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

from _common import build_engine, in_child

K, STEPS, ROUNDS = 4, 8, 3
MICROS = (8, 32)
CASES = [("torch", "eager"), ("tensorflow", "eager"), ("tensorflow", "graph")]


def measure(framework: str, execution: str, micro_size: int) -> dict[str, float]:
    accum, workload, data, _ = build_engine(framework, execution=execution, batch_size=micro_size, grad_accum=K)
    whole, *_ = build_engine(framework, execution=execution, batch_size=micro_size * K)
    micro = list(workload.batches(data.train, micro_size, 0, 0))[:STEPS * K]
    steps = [micro[i:i + K] for i in range(0, len(micro), K)]
    joined = [[{k: np.concatenate([m[k] for m in group]) for k in group[0]}] for group in steps]
    single = [[m] for m in micro[:STEPS]]  # plain steps of one micro-batch, through the accumulating engine
    for engine, batches in ((accum, steps), (whole, joined), (accum, single)):
        engine.train_step(batches[0])  # first step: tracing / compilation is not accumulation overhead
    times: dict[str, list[float]] = {"accumulated": [], "whole": [], "single_micro": []}
    for _ in range(ROUNDS):
        for name, engine, batches in (("accumulated", accum, steps), ("whole", whole, joined),
                                      ("single_micro", accum, single)):
            start = time.perf_counter()
            for batch in batches:
                engine.train_step(batch)
            times[name].append((time.perf_counter() - start) / len(batches))
    return {name: statistics.median(v) for name, v in times.items()}


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        json.dump(measure(sys.argv[2], sys.argv[3], int(sys.argv[4])), sys.stdout)
        return
    args = sys.argv[1:]
    sizes = [int(a) for a in args if a.isdigit()] or MICROS
    cases = [tuple(a.split("/")) for a in args if "/" in a] or CASES
    for micro_size in sizes:
        for framework, execution in cases:
            r = in_child(__file__, framework, execution, str(micro_size))
            overhead = r["accumulated"] / r["whole"] - 1
            sys.stdout.write(
                f"{framework}/{execution}: {K}×{micro_size} accumulated {r['accumulated'] * 1e3:.1f} ms/step, "
                f"1×{K * micro_size} {r['whole'] * 1e3:.1f} ms/step: overhead {overhead:+.1%} (target ≤ 10%: "
                f"{'met' if overhead <= 0.10 else 'MISSED'}); one step of {micro_size} alone "
                f"{r['single_micro'] * 1e3:.1f} ms (×{K} = {K * r['single_micro'] * 1e3:.1f} ms)\n")


if __name__ == "__main__":
    main()
