"""Distributed training on this machine: each framework's data-parallel strategy at 1 and 2 replicas against one
device, through the real runner and launchers (a fresh process group per trial), text classifier tiny.

Run: .venv/bin/python bench/distributed.py [ROUNDS] [STEPS]     (defaults 2 rounds, 60 steps; frameworks and
configurations alternate within each round). Prints, per configuration, medians (min-max) of steady throughput,
scaling efficiency, gradient sync per step and its share, start-up (launch + import + rendezvous + set-up) and
the launch alone, and whether every run's replicas ended identical.

Targets: every trial completes with identical replicas; the launch of a process group stays under 10 s here.
On 2 shared cores, 2 replicas measure the strategies' overhead more than speed-up.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from bakeoff.core import registry
from bakeoff.core.identity import identify
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec
from bakeoff.run.executors import local

MODES = {"torch": "eager", "tensorflow": "graph"}  # each framework as its users train
SETUPS = [("none", 1), ("data_parallel", 1), ("data_parallel", 2), ("multi_worker", 2), ("parameter_server", 2)]


def _span(values: list[float], digits: int = 3) -> str:
    if not values:
        return "—"
    med = statistics.median(values)
    return f"{med:.{digits}g} ({min(values):.{digits}g}-{max(values):.{digits}g})" if len(values) > 1 else \
        f"{med:.{digits}g}"


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    frameworks = [f for f in MODES if registry.installed(f)]
    results: dict[tuple[str, str, int], list[TrialResult]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(rounds):
            order = [(f, p, w) for p, w in SETUPS for f in frameworks if not registry.unsupported(
                RunSpec(workload="text_classifier", framework=f, execution=MODES[f], parallelism=p, workers=w,
                        max_steps=1))]
            for framework, parallelism, workers in order if round_ % 2 == 0 else order[::-1]:
                [spec] = identify([RunSpec(workload="text_classifier", framework=framework,
                                           execution=MODES[framework], parallelism=parallelism, workers=workers,
                                           batch_size=32, max_steps=steps, eval_every=steps, seed=round_,
                                           device="cpu")])
                r = local.run_one(spec, 900, Path(tmp) / "logs")
                if r.status.value != "ok":
                    raise SystemExit(f"{spec.label()} trial {r.status.value}: {r.reason}")
                results.setdefault((framework, parallelism, workers), []).append(r)
    out = sys.stdout
    out.write(f"text_classifier tiny, global batch 32, {steps} steps, {rounds} rounds; medians (min-max)\n")
    for framework in frameworks:
        single = statistics.median(r.throughput["examples_per_s"] for r in results[framework, "none", 1])
        for parallelism, workers in SETUPS:
            if (framework, parallelism, workers) not in results:
                out.write(f"{framework} {parallelism} x{workers}: unsupported\n")
                continue
            rs = results[framework, parallelism, workers]
            thr = [r.throughput["examples_per_s"] for r in rs]
            line = f"{framework} {MODES[framework]} {parallelism} x{workers}: {_span(thr)} examples/s"
            if parallelism != "none":
                one = results.get((framework, parallelism, 1)) if workers > 1 else None
                base = statistics.median(r.throughput["examples_per_s"] for r in one) if one else single
                dist = [r.distributed for r in rs]
                sync = [d.sync["per_step_s"] for d in dist if d.sync.get("per_step_s") is not None]
                share = [s / r.steady_step_s for s, r in zip(sync, rs, strict=False)]
                line += (f"; efficiency {_span([t / (workers * base) for t in thr], 2)}"
                         f" (vs {'1 replica' if one else 'one device'})"
                         f"; sync/step {_span([1000 * s for s in sync])} ms = {_span([100 * s for s in share], 2)}%"
                         f"; start-up {_span([d.startup_s for d in dist])} s"
                         f" (launch {_span([d.launch_s for d in dist])} s)"
                         f"; replicas identical {all(d.replicas_identical in (True, None) for d in dist)}")
            out.write(line + "\n")


if __name__ == "__main__":
    main()
