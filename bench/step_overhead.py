"""Instrumentation overhead: a step inside the engine's measured loop vs the same step in a bare loop.

Both loops call the same ``engine.train_step`` (the real code path) on the same batches; the bare loop has one
clock around all steps, the measured loop is ``bakeoff.trial.loop.train`` with evaluation pushed past the end.
The two alternate ROUNDS times per framework, each framework in its own process. On a shared 2-core VM the
round-to-round noise (±4%) is larger than the effect, so the bench also measures the loop's own bookkeeping
directly: ``train`` driving an engine whose step does nothing, which is exactly the per-step cost the
instrumentation adds. Target: under 2% overhead.

Run: .venv/bin/python bench/step_overhead.py [torch tensorflow]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from _common import build_engine, in_child

STEPS, ROUNDS = 40, 7


def measure(framework: str) -> dict[str, float]:
    from bakeoff.core.result import TrialResult
    from bakeoff.core.spec import Status
    from bakeoff.trial.loop import train

    engine, workload, data, spec = build_engine(framework, max_steps=STEPS, eval_every=10**9, warmup_steps=0)
    batches = list(workload.batches(data.train, spec.batch_size, spec.seed, 0))[:STEPS]
    for batch in batches[:5]:
        engine.train_step([batch])  # warm up: the first step's compile is not overhead
    eval_s = [0.0]
    predict = engine.predict

    def timed_predict(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        start = time.perf_counter()
        out = predict(*args, **kwargs)
        eval_s[0] += time.perf_counter() - start
        return out

    engine.predict = timed_predict  # evaluation is off the clock, so it is taken out of the loop's time too
    bare, measured = [], []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for batch in batches:
            engine.train_step([batch])
        bare.append((time.perf_counter() - start) / STEPS)
        result = TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.OK)
        eval_s[0] = 0.0
        start = time.perf_counter()
        train(engine, data, result)
        measured.append((time.perf_counter() - start - eval_s[0]) / STEPS)
    ratios = sorted(m / b - 1 for m, b in zip(measured, bare, strict=True))
    return {"bare_s": statistics.median(bare), "measured_s": statistics.median(measured),
            "ratio_min": ratios[0], "ratio_max": ratios[-1], "bookkeeping_s": bookkeeping(workload, data, spec)}


def bookkeeping(workload, data, spec) -> float:  # noqa: ANN001
    """Seconds per step that ``train`` spends outside ``train_step``: clocks, batch slicing, counters."""
    from bakeoff.core.result import TrialResult
    from bakeoff.core.spec import RunSpec, Status
    from bakeoff.engines.base import Engine
    from bakeoff.trial.loop import train

    class NullEngine(Engine):
        def setup(self, weights): ...
        def train_step(self, micro_batches): return 0.5
        def gradients(self, micro_batches): return []
        def predict(self, split, batch_size): return split["labels"].astype(float)
        def num_params(self): return 0
        def environment(self): return {}
        def save_checkpoint(self, directory): ...
        def load_checkpoint(self, directory): ...
        def summary_writer(self, logdir): ...

    steps = 2000
    spec = RunSpec(**{**spec.to_dict(), "max_steps": steps})
    engine = NullEngine(spec, workload, {})
    result = TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.OK)
    start = time.perf_counter()
    train(engine, data, result)
    return (time.perf_counter() - start) / steps


def main() -> None:
    frameworks = sys.argv[1:] or ["torch", "tensorflow"]
    if len(frameworks) == 2 and frameworks[0] == "--child":
        json.dump(measure(frameworks[1]), sys.stdout)
        return
    for fw in frameworks:
        r = in_child(__file__, fw)
        overhead = r["measured_s"] / r["bare_s"] - 1
        direct = r["bookkeeping_s"] / r["bare_s"]
        sys.stdout.write(f"{fw}: bare {r['bare_s'] * 1e3:.2f} ms/step, measured loop {r['measured_s'] * 1e3:.2f} "
                         f"ms/step: {overhead:+.2%} (rounds {r['ratio_min']:+.1%} .. {r['ratio_max']:+.1%}, noise); "
                         f"loop bookkeeping {r['bookkeeping_s'] * 1e6:.0f} us/step = {direct:.3%} of a step "
                         f"(target < 2%: {'met' if direct < 0.02 else 'MISSED'})\n")


if __name__ == "__main__":
    main()
