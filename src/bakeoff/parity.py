"""Parity probe: what one framework computes from given weights and batches, for cross-framework comparison.

``python -m bakeoff.parity WORKLOAD FRAMEWORK OUT.npz [--preset tiny] [--steps 5] [--execution eager]``

Runs in its own process (frameworks never share one), through the real engine and model code, with dropout
off and fp32, and saves:
  ``num_params``; ``outputs`` — outputs on test examples from the workload's initial weights;
  ``outputs_perturbed`` — outputs after loading perturbed weights (non-zero biases, non-unit LayerNorm), which
  exercises every canonical-name mapping; ``roundtrip_max_err`` — get_weights(set_weights(w)) against w;
  ``grad_accum_max_rel_err`` — accumulated gradients of 4 micro-batches against the gradient of the batch they
  make up; ``losses`` — the loss of every training step from the initial weights on the same batches.
The parity tests run this once per framework and compare.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff import registry
from bakeoff.spec import Execution, RunSpec, Weights, Workload


def perturbed(weights: Weights, seed: int = 1, scale: float = 0.05) -> Weights:
    rng = np.random.default_rng(seed)
    return {k: (v + rng.normal(0, scale, v.shape)).astype(np.float32) for k, v in sorted(weights.items())}


def probe(workload_name: str, framework: str, preset: str = "tiny", steps: int = 5, batch_size: int = 16,
          execution: str = "eager", seed: int = 0, examples: int = 64,
          extra: Callable[[Any, Workload, dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
          ) -> dict[str, np.ndarray]:
    """Run the probe in this process and return the arrays described in the module docstring.

    ``extra(engine, workload, test)``, called with the initial weights loaded, adds a workload's own checks.
    """
    spec = RunSpec(workload=workload_name, framework=framework, preset=preset, execution=Execution(execution),
                   max_steps=steps, batch_size=batch_size, seed=seed, device="cpu")
    workload = registry.workload(workload_name)
    data = workload.load_data(spec)
    config = workload.config(preset, spec, data)
    config["dropout"] = 0.0  # dropout masks are framework RNG streams; parity is checked without them
    weights = workload.init_weights(config, seed)
    engine = registry.engine_class(framework)(spec, workload, config)
    engine.setup(weights)
    test = {k: v[:examples] for k, v in data.test.items()}
    out: dict[str, np.ndarray] = {"num_params": np.array(engine.num_params())}
    out["outputs"] = engine.predict(test, examples)
    if extra is not None:
        out.update(extra(engine, workload, test))
    other = perturbed(weights)
    engine.impl.set_weights(other)
    back = engine.impl.get_weights()
    out["roundtrip_max_err"] = np.array(max(float(np.abs(back[k] - other[k]).max()) for k in other))
    out["roundtrip_same_keys"] = np.array(sorted(back) == sorted(other))
    out["outputs_perturbed"] = engine.predict(test, examples)
    engine.impl.set_weights(weights)
    # Gradient accumulation is exact: 4 micro-batches of b give the gradient of the one batch of 4·b they make up.
    micro = list(workload.batches(data.train, batch_size // 4, seed, epoch=0))[:4]
    whole = workload.merge(micro)
    accumulated, single = engine.gradients(micro), engine.gradients([whole])
    # Relative to the largest gradient entry: some gradients are exactly zero in theory (attention key biases)
    # and hold only rounding noise, which a per-tensor relative error would blow up.
    scale = max(float(np.abs(b).max()) for b in single)
    out["grad_accum_max_rel_err"] = np.array(max(float(np.abs(a - b).max())
                                                 for a, b in zip(accumulated, single, strict=True)) / scale)
    batches = workload.batches(data.train, batch_size, seed, epoch=0)
    out["losses"] = np.array([engine.train_step([next(batches)]) for _ in range(steps)])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bakeoff.parity", description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("framework")
    parser.add_argument("out", type=Path)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--execution", default="eager")
    args = parser.parse_args(argv)
    result = probe(args.workload, args.framework, args.preset, args.steps, execution=args.execution)
    np.savez(args.out, **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
