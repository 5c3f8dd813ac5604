"""Parity probe: what one framework computes from given weights and batches, for cross-framework comparison.

``python -m bakeoff.trial.parity_probe WORKLOAD FRAMEWORK OUT.npz [--preset tiny] [--steps 5] [--execution eager]
[--precision fp32] [--accum-steps 0] [--set KEY=VALUE ...]``

WORKLOAD is a name or a reference (``MODULE:CLASS``, ``FILE.py:CLASS``), resolved as ``bakeoff run`` does.

Runs in its own process (frameworks never share one), through the real engine and model code in the given
execution mode and precision — the modes trials are timed in — with dropout off, and saves:
  ``num_params``; ``outputs`` — outputs on test examples from the workload's initial weights;
  ``eval_dropout`` — the preset's dropout rate (parity trains with none), and when it is above 0, ``outputs_dropout``
  and ``outputs_dropout_again`` — the outputs from the initial weights of a model built with that dropout, in
  evaluation mode, asked twice (dropout left on in evaluation shows as a difference from ``outputs``);
  ``outputs_perturbed`` — outputs after loading perturbed weights (non-zero biases, non-unit LayerNorm), which
  exercises every canonical-name mapping; ``roundtrip/NAME`` — get_weights(set_weights(w)) for those perturbed weights
  w, and ``roundtrip_max_err`` — its largest difference from w;
  ``grad/NAME`` — each canonical tensor's mean-loss gradient on one batch of ``batch_size``, and
  ``grad_accum/NAME`` — the same accumulated over the 4 micro-batches that batch is made of;
  ``init/NAME`` — the initial canonical weights; ``losses`` — the loss of every training step from them on the
  same batches, and ``weights/NAME`` — the canonical weights after those steps; ``graph_builds`` — the engine's
  count of graphs built before those steps and after each; with ``accum_steps``,
  ``losses_accum`` — the losses of that many steps of a fresh engine with ``grad_accum = 4`` (each step 4
  micro-batches of ``batch_size / 4``).
The parity tests run this once per framework and mode, and compare. When the engine refuses the mode here
(:class:`~bakeoff.engines.base.Unsupported`) it writes nothing, says why in its last line of standard error and
exits with :data:`UNSUPPORTED_EXIT`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.analysis.parity_tolerances import flatten, per_tensor_errors, unflatten
from bakeoff.core import registry
from bakeoff.core.spec import Execution, Precision, RunSpec
from bakeoff.core.workload import Weights, Workload
from bakeoff.engines.base import Unsupported
from bakeoff.trial.build import build_trial

__all__ = ["ACCUM", "UNSUPPORTED_EXIT", "flatten", "main", "per_tensor_errors", "perturbed", "probe", "unflatten"]

ACCUM = 4  # micro-batches per step in the accumulation checks


def perturbed(weights: Weights, seed: int = 1, scale: float = 0.05) -> Weights:
    rng = np.random.default_rng(seed)
    return {k: (v + rng.normal(0, scale, v.shape)).astype(np.float32) for k, v in sorted(weights.items())}


def probe(workload_name: str, framework: str, preset: str = "tiny", steps: int = 5, batch_size: int = 16,
          execution: str = "eager", precision: str = "fp32", seed: int = 0, examples: int = 64,
          accum_steps: int = 0, data: tuple[tuple[str, str], ...] = (), config: tuple[tuple[str, str], ...] = (),
          extra: Callable[[Any, Workload, dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
          ) -> dict[str, np.ndarray]:
    """Run the probe in this process and return the arrays described in the module docstring.

    ``extra(engine, workload, test)``, called with the initial weights loaded, adds a workload's own checks;
    ``data`` are the workload's data options (a trial's ``--data KEY=VALUE``), ``config`` overrides of the preset's
    fields (``--set KEY=VALUE``); ``workload_name`` is a name or a reference (``MODULE:CLASS``, ``FILE.py:CLASS``).
    """
    spec = RunSpec(**registry.workload_fields(workload_name), framework=framework, config=config, preset=preset,
                   execution=Execution(execution),
                   precision=Precision(precision), max_steps=steps, batch_size=batch_size, seed=seed, device="cpu",
                   data=data)
    # Dropout masks are framework RNG streams; parity is checked without them.
    parts = build_trial(spec, {"dropout": 0.0})
    workload, data, weights = parts.workload, parts.data, parts.weights
    engine = parts.build_engine()
    test = {k: v[:examples] for k, v in data.test.items()}
    out: dict[str, np.ndarray] = {"num_params": np.array(engine.num_params())}
    out["outputs"] = engine.predict(test, examples)
    rate = float(workload.config(spec.preset, spec, data).get("dropout", 0.0))  # the preset's, before it is off
    out["eval_dropout"] = np.array(rate)
    if rate > 0:
        with_dropout = dataclasses.replace(parts, config={**parts.config, "dropout": rate}).build_engine()
        out["outputs_dropout"] = with_dropout.predict(test, examples)
        out["outputs_dropout_again"] = with_dropout.predict(test, examples)
        del with_dropout
    if extra is not None:
        out.update(extra(engine, workload, test))
    other = perturbed(weights)
    engine.impl.set_weights(other)
    back = engine.impl.get_weights()
    out.update(flatten("roundtrip", back))
    same = [k for k in other if k in back and np.shape(back[k]) == other[k].shape]
    out["roundtrip_max_err"] = np.array(max((float(np.abs(back[k] - other[k]).max()) for k in same), default=np.inf)
                                        if len(same) == len(other) else np.inf)
    out["roundtrip_same_keys"] = np.array(sorted(back) == sorted(other))
    out["outputs_perturbed"] = engine.predict(test, examples)
    engine.impl.set_weights(weights)
    # Gradient accumulation is exact: 4 micro-batches of b/4 give the gradient of the one batch of b they make up.
    micro = list(workload.batches(data.train, batch_size // ACCUM, seed, epoch=0))[:ACCUM]
    out.update(flatten("grad_accum", engine.canonical_gradients(micro)))
    out.update(flatten("grad", engine.canonical_gradients([workload.merge(micro)])))
    out.update(flatten("init", weights))
    batches = workload.batches(data.train, batch_size, seed, epoch=0)
    losses, builds = [], [engine.graph_builds()]
    for _ in range(steps):
        losses.append(engine.train_step([next(batches)]))
        builds.append(engine.graph_builds())
    out["losses"], out["graph_builds"] = np.array(losses), np.array(builds)
    out.update(flatten("weights", engine.impl.get_weights()))
    if accum_steps:
        accum_spec = RunSpec(**{**spec.to_dict(), "batch_size": batch_size // ACCUM, "grad_accum": ACCUM})
        engine = parts.build_engine(accum_spec)
        small = workload.batches(data.train, batch_size // ACCUM, seed, epoch=0)
        out["losses_accum"] = np.array([engine.train_step([next(small) for _ in range(ACCUM)])
                                        for _ in range(accum_steps)])
    return out


UNSUPPORTED_EXIT = 4
"""The probe's exit status when its engine refuses the mode (a status no uncaught exception gives)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bakeoff.trial.parity_probe", description=__doc__.splitlines()[0])
    parser.add_argument("workload")
    parser.add_argument("framework")
    parser.add_argument("out", type=Path)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--execution", default="eager")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--accum-steps", type=int, default=0)
    parser.add_argument("--set", dest="config", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--data", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    config = tuple(tuple(item.split("=", 1)) for item in args.config)
    data = tuple(tuple(item.split("=", 1)) for item in args.data)
    try:
        result = probe(args.workload, args.framework, args.preset, args.steps, execution=args.execution,
                       precision=args.precision, accum_steps=args.accum_steps, config=config, data=data)
    except Unsupported as e:
        sys.stderr.write(f"unsupported: {e}\n")
        return UNSUPPORTED_EXIT
    np.savez(args.out, **result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
