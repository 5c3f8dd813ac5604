"""Implementation efficiency (#12 item 3): bakeoff's training step against a well-known public implementation of
the same text-classifier configuration in the same framework, in each framework's production mode.

References (bench/_references.py, which says what differs): PyTorch — Hugging Face ``transformers`` ``BertEncoder``
(eager, and a plain ``torch.compile(model)`` against bakeoff's compiled step); TensorFlow —
``keras_hub.layers.TransformerEncoder`` in a ``tf.function`` step; JAX — a Flax Linen encoder as ``flax/examples``
write it (``nn.MultiHeadDotProductAttention``, ``TrainState``, ``jax.jit``). JAX's reference is Flax rather than
keras-hub on the JAX backend because bakeoff's JAX model is Flax: the question is whether bakeoff's Flax code is as
fast as the Flax that Flax's own authors write, not how Keras compares with Flax.

Both sides: the same batches (the workload's shipped data, batch 32), sequence length, Adam (lr of the preset,
β 0.9/0.999, ε 1e-8), loss (sigmoid cross-entropy, 2 classes), fp32, thread count (bakeoff's ``threads_for``).
Each (side, framework, mode, preset) is measured in its own fresh process; in it, a few untimed warm-up steps
(compilation included), then N timed steps, each closed by a host copy of the loss; the median step time gives
examples/s. The two sides alternate ABBA over the rounds (bakeoff first in even rounds, the reference first in odd
ones), so drift on the machine falls on both alike. Reported: the median over rounds, its min–max, and the ratio
bakeoff/reference of the medians (> 1: bakeoff is faster).

Parameter counts are printed for both sides. They must agree within PARAM_TOLERANCE (0.1%): the models are
built to be equal (they are, exactly), and a step's time on CPU follows its weights' matmuls, so a difference
below 0.1% moves it by far less than the round-to-round noise (±3-4% here); a larger one (BERT's pooler alone is
1.3% of tiny) would be a different model, and the row says "not comparable" instead of a ratio.

Run: .venv/bin/python bench/reference_efficiency.py [--presets tiny,small] [--rounds N] [--frameworks torch,...]
(measured on 2 cores: tiny 3 rounds 5 minutes, small 2 rounds 9 minutes; the defaults run both).
``--check`` instead builds each reference in its own process and checks that it is bakeoff's configuration
(parameter count exactly bakeoff's canonical one, output shape, a first loss near ln 2), exiting 1 if one is not;
``make bench`` runs it first. It was tests/test_reference_bench.py's until CI, which has no ``bench`` extra, skipped it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from _common import build_engine, in_child
from _references import INSTALL_HINT

CASES = [("torch", "eager"), ("torch", "graph"), ("tensorflow", "graph"), ("jax", "graph")]
MODE_NAMES = {("torch", "eager"): "eager", ("torch", "graph"): "torch.compile",
              ("tensorflow", "graph"): "tf.function", ("jax", "graph"): "jax.jit"}
# (untimed warm-up steps, timed steps): small's step is ~1-2 s on 2 cores, its compile tens of seconds.
STEPS = {"tiny": (3, 15), "small": (2, 5)}
# Default ABBA rounds: small's 8 processes take ~4.5 minutes a round here (start-up and compilation included),
# tiny's ~1.7: 3 rounds of tiny and one ABBA block (2 rounds) of small keep the default run near 14 minutes.
ROUNDS = {"tiny": 3, "small": 2}
BATCH = 32
PARAM_TOLERANCE = 1e-3
SIDES = ("bakeoff", "reference")
MISSING = "not measured: install bakeoff[bench]"


def abba_order(rounds: int) -> list[tuple[str, str]]:
    """The two sides' order in each round: bakeoff first in even rounds, the reference first in odd ones."""
    return [SIDES if r % 2 == 0 else SIDES[::-1] for r in range(rounds)]


def comparable(bakeoff_params: int, reference_params: int, tolerance: float = PARAM_TOLERANCE) -> bool:
    """Whether the two models' parameter counts agree within ``tolerance`` (relative to bakeoff's)."""
    return abs(bakeoff_params - reference_params) <= tolerance * bakeoff_params


@dataclass(frozen=True)
class Row:
    """One (framework, mode, preset): each side's examples/s per round, summarised."""

    bakeoff: Sequence[float]
    reference: Sequence[float]
    bakeoff_params: int
    reference_params: int

    @property
    def comparable(self) -> bool:
        return comparable(self.bakeoff_params, self.reference_params)

    @property
    def ratio(self) -> float | None:
        """bakeoff / reference of the median examples/s; None when the models are not comparable."""
        if not self.comparable:
            return None
        return statistics.median(self.bakeoff) / statistics.median(self.reference)

    @property
    def ratio_spread(self) -> tuple[float, float]:
        """The ratio's range over rounds, each round's bakeoff figure against the same round's reference."""
        ratios = [b / r for b, r in zip(self.bakeoff, self.reference, strict=True)]
        return min(ratios), max(ratios)


def spread(values: Sequence[float]) -> str:
    """``median (min–max)`` of examples/s."""
    return f"{statistics.median(values):7.1f} ({min(values):.1f}–{max(values):.1f})"


def format_row(framework: str, mode: str, preset: str, row: Row) -> str:
    head = f"{framework:<10} {mode:<13} {preset:<5}"
    params = f"{row.bakeoff_params:>9,} {row.reference_params:>9,}"
    if not row.comparable:
        return f"{head} {'':>24} {'':>24} {'not comparable':>16} {params}"
    lo, hi = row.ratio_spread
    ratio = f"{row.ratio:.2f}x ({lo:.2f}–{hi:.2f})"
    return f"{head} {spread(row.bakeoff):>24} {spread(row.reference):>24} {ratio:>16} {params}"


HEADER = (f"{'framework':<10} {'mode':<13} {'preset':<5} {'bakeoff ex/s med (min–max)':>24} "
          f"{'reference ex/s med (min–max)':>24} {'ratio (rounds)':>16} {'params b':>9} {'params r':>9}")


def time_steps(step: Callable[[dict], float], batches: Sequence[dict], warmup: int, steps: int) -> list[float]:
    """Seconds of each of ``steps`` timed steps after ``warmup`` untimed ones; the same loop for both sides."""
    for batch in batches[:warmup]:
        step(batch)
    times = []
    for i in range(steps):
        batch = batches[(warmup + i) % len(batches)]
        start = time.perf_counter()
        step(batch)  # returns a float: the loss copied to the host, so the step has finished
        times.append(time.perf_counter() - start)
    return times


def measure(side: str, framework: str, execution: str, preset: str) -> dict:
    """One side's steady step time in this (fresh) process."""
    from bakeoff.core import registry
    from bakeoff.core.spec import RunSpec
    from bakeoff.engines.base import threads_for

    warmup, steps = STEPS[preset]
    if side == "reference":
        from _references import REFERENCE_LIBRARY, REFERENCES

        if importlib.util.find_spec(REFERENCE_LIBRARY[framework]) is None:
            return {"missing": REFERENCE_LIBRARY[framework]}
        spec = RunSpec(workload="text_classifier", framework=framework, preset=preset, execution=execution,
                       batch_size=BATCH, max_steps=10**6, device="cpu")
        workload = registry.workload(spec)
        data = workload.load_data(spec)
        config = workload.config(preset, spec, data)
        ref = REFERENCES[framework](config, workload.output_units(config), execution, threads_for(spec))
        step, params = ref.step, ref.num_params
    else:
        engine, workload, data, spec = build_engine(framework, preset=preset, execution=execution, batch_size=BATCH)
        step, params = (lambda batch: engine.train_step([batch])), engine.num_params()
    batches = list(workload.batches(data.train, BATCH, spec.seed, 0))
    times = time_steps(step, batches, warmup, steps)
    return {"examples_per_s": BATCH / statistics.median(times), "params": params, "steps": steps}


def check_reference(framework: str, preset: str) -> dict:
    """In this (fresh) process: build ``framework``'s reference at ``preset``, take one step on 4 examples, and
    return its parameter count against bakeoff's, its output shape and that first loss."""
    from _references import REFERENCE_LIBRARY, REFERENCES
    from bakeoff.core import registry
    from bakeoff.core.spec import RunSpec

    if importlib.util.find_spec(REFERENCE_LIBRARY[framework]) is None:
        return {"missing": REFERENCE_LIBRARY[framework]}
    spec = RunSpec(workload="text_classifier", framework=framework, preset=preset, max_steps=1, device="cpu")
    workload = registry.workload("text_classifier")
    data = workload.load_data(spec)
    config = workload.config(preset, spec, data)
    ref = REFERENCES[framework](config, workload.output_units(config), "eager", 2)
    batch = {k: v[:4] for k, v in data.train.items()}
    loss = float(ref.step(batch))
    expected = int(sum(w.size for w in workload.init_weights(config, 0).values()))  # bakeoff's canonical weights
    return {"params": int(ref.num_params), "expected": expected, "shape": list(ref.logits(batch["tokens"]).shape),
            "out_units": int(workload.output_units(config)), "loss": loss}


def check_problems(r: dict) -> list[str]:
    """What makes a reference not bakeoff's configuration (empty: it is), from :func:`check_reference`'s result."""
    if "missing" in r:
        return [f"{MISSING} ({r['missing']} is missing)"]
    problems = []
    if r["params"] != r["expected"]:  # exactly: the ratio table's tolerance is for references that cannot match
        problems.append(f"{r['params']:,} parameters, bakeoff's {r['expected']:,}")
    if r["shape"] != [4, r["out_units"]]:
        problems.append(f"outputs of shape {r['shape']} for 4 examples, not [4, {r['out_units']}]")
    if not 0.3 < r["loss"] < 1.5:  # a sigmoid cross-entropy starts near ln 2
        problems.append(f"first loss {r['loss']:.4g}, not near ln 2")
    return problems


def check(presets: Sequence[str], frameworks: Sequence[str]) -> int:
    """Print one line per (framework, preset) reference checked in its own process; 1 if any is not bakeoff's."""
    failed = False
    for preset in presets:
        for framework in frameworks:
            r = in_child(__file__, "check", framework, preset)
            problems = check_problems(r)
            failed |= bool(problems) and "missing" not in r
            said = "; ".join(problems) if problems else f"bakeoff's configuration: {r['params']:,} parameters"
            sys.stdout.write(f"reference {framework:10} {preset:5} {said}\n")
    return 1 if failed else 0


def run(presets: Sequence[str], rounds: int | None, frameworks: Sequence[str]) -> None:
    """Measure every case of ``presets`` (``rounds`` ABBA rounds each, None: :data:`ROUNDS`) and print the table."""
    cases = [c for c in CASES if c[0] in frameworks]
    counts = ", ".join(f"{p} {rounds or ROUNDS[p]}" for p in presets)
    sys.stdout.write(f"reference efficiency: text_classifier, batch {BATCH}, fp32, ABBA rounds: {counts}, "
                     f"threads {os.environ.get('BAKEOFF_THREADS') or os.cpu_count()}, "
                     f"load average {os.getloadavg()[0]:.2f} at start\n")
    lines = []
    for preset in presets:
        samples = {(c, side): [] for c in cases for side in SIDES}
        params: dict = {}
        missing: dict = {}
        for order in abba_order(rounds or ROUNDS[preset]):
            for case in cases:  # cases interleaved within a round too
                if case in missing:
                    continue
                for side in order:
                    r = in_child(__file__, side, *case, preset)
                    if "missing" in r:
                        missing[case] = r["missing"]
                        break
                    samples[case, side].append(r["examples_per_s"])
                    params[case, side] = r["params"]
                    sys.stderr.write(f"  {preset} {case[0]}/{case[1]} {side}: {r['examples_per_s']:.1f} ex/s\n")
        for case in cases:
            name = MODE_NAMES[case]
            if case in missing:
                hint = INSTALL_HINT.get(case[0])
                lines.append(f"{case[0]:<10} {name:<13} {preset:<5} {MISSING} ({missing[case]} is missing"
                             + (f"; {hint})" if hint else ")"))
                continue
            row = Row(samples[case, "bakeoff"], samples[case, "reference"], params[case, "bakeoff"],
                      params[case, "reference"])
            lines.append(format_row(case[0], name, preset, row))
    sys.stdout.write(HEADER + "\n" + "\n".join(lines) + "\n")
    sys.stdout.write(f"examples/s: median over rounds of each process's median step (warm-up, timed steps per "
                     f"preset: {STEPS}); ratio > 1: bakeoff faster; load average {os.getloadavg()[0]:.2f} at end\n")


def main(argv: Sequence[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] == ["--child", "check"]:
        json.dump(check_reference(*argv[2:]), sys.stdout)
        return
    if argv[:1] == ["--child"]:
        json.dump(measure(*argv[1:]), sys.stdout)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Each (side, framework, mode, preset, round) runs in a fresh process; "
                                            "a missing reference library prints '" + MISSING + "'.")
    parser.add_argument("--presets", default="tiny,small", help="comma-separated presets (default: tiny,small)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="ABBA rounds per case, every preset (default: tiny 3, small 2); each round runs both "
                             "sides once, bakeoff first in even rounds, the reference first in odd ones")
    parser.add_argument("--frameworks", default="torch,tensorflow,jax",
                        help="comma-separated frameworks (default: torch,tensorflow,jax)")
    parser.add_argument("--check", action="store_true",
                        help="check that each reference is bakeoff's configuration instead of timing it")
    args = parser.parse_args(argv)
    presets = [p for p in args.presets.split(",") if p]
    unknown = sorted(set(presets) - set(STEPS))
    if unknown:
        parser.error(f"unknown preset(s) {unknown}; accepted: {', '.join(STEPS)}")
    frameworks = [f for f in args.frameworks.split(",") if f]
    if set(frameworks) - {c[0] for c in CASES}:
        parser.error(f"unknown framework(s) in {frameworks}; accepted: torch, tensorflow, jax")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.check:
        raise SystemExit(check(presets, frameworks))
    run(presets, args.rounds, frameworks)


if __name__ == "__main__":
    main()
