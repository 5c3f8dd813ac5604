"""What bakeoff's inference timing costs per call, against a bare loop of the same calls.

``bakeoff.deploy.infer.latencies`` reads the clock around every call and keeps every sample. This runs the real
runtime call of an exported model — MNIST ``tiny`` exported to ONNX and run by ONNX Runtime (the fastest call
bakeoff measures, about 30 µs, so the worst case for the harness), and the same model as TorchScript — N times
bare (one clock read around the whole loop) and N times through the harness, alternating, 7 rounds, and prints
the median per-call time of each and the harness's overhead in percent (the target: under 2%), and what the
clock read around one call costs (``infer.timer_cost``) against the median timed call: the part of the overhead
that is the harness's own rather than loop-to-loop drift of the runtime (the bare and timed loops alternate ABBA).

The export happens in this process (torch), then the ONNX Runtime runs happen in a child process that loads no
framework, as the product's inference process does.

Run: .venv/bin/python bench/inference_harness.py [CALLS]     (about 1 minute on 2 cores)
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = 15


def child(fmt: str, path: str, calls: int) -> None:
    import importlib

    import numpy as np

    from bakeoff.core import formats
    from bakeoff.deploy.infer import latencies, timer_cost

    runtime = importlib.import_module(formats.get(fmt).runtime_module)
    run = runtime.load_runtime(fmt, Path(path), 1)
    rng = np.random.default_rng(0)
    examples = [{"images": rng.random((1, 28, 28), dtype=np.float32)} for _ in range(64)]
    latencies(run, examples, calls, 50)  # warm
    bare, harness, samples = [], [], []
    for r in range(ROUNDS):
        for kind in (("bare", "harness") if r % 2 == 0 else ("harness", "bare")):  # ABBA: drift hits both
            t0 = time.perf_counter()
            if kind == "bare":
                for i in range(calls):
                    run(examples[i % len(examples)])
            else:
                samples += latencies(run, examples, calls, 0)
            (bare if kind == "bare" else harness).append((time.perf_counter() - t0) / calls)
    sys.stdout.write(json.dumps({"bare": statistics.median(bare), "harness": statistics.median(harness),
                                 "clock": timer_cost(20000), "median_sample": statistics.median(samples)}) + "\n")


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    import numpy as np

    from bakeoff.core import registry
    from bakeoff.deploy import torch_deploy

    workload = registry.workload("mnist")
    config = workload.config("tiny")
    with tempfile.TemporaryDirectory() as tmp:
        torch_deploy.save_model("mnist", config, workload.init_weights(config, 0), Path(tmp))
        model = torch_deploy.load_model("mnist", config, Path(tmp))
        example = {"images": np.zeros((2, 28, 28), np.float32)}
        axes = {k: tuple(v) for k, v in workload.serving_inputs.items()}
        sys.stdout.write(f"per call, median of {ROUNDS} rounds of {calls} calls, bare loop against bakeoff's "
                         "harness:\n")
        for fmt in ("torch-onnx", "torchscript"):
            path = Path(tmp) / fmt / "model"
            path.parent.mkdir()
            torch_deploy.export(model, fmt, path, example, axes)
            out = subprocess.run([sys.executable, __file__, "--child", fmt, str(path), str(calls)], check=True,
                                 capture_output=True, text=True).stdout
            got = json.loads(out.strip().splitlines()[-1])
            overhead = (got["harness"] - got["bare"]) / got["bare"] * 100
            clock = got["clock"] / got["median_sample"] * 100
            sys.stdout.write(f"  {fmt:12s} bare {got['bare'] * 1e6:8.2f} µs   harness {got['harness'] * 1e6:8.2f} "
                             f"µs   wall overhead {overhead:+.2f}%   the clock read itself: "
                             f"{got['clock'] * 1e6:.3f} µs = {clock:.2f}% of the median sample\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
