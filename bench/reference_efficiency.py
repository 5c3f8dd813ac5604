"""Implementation efficiency (#12 item 3, #25): bakeoff's training step against a well-known public implementation
of the same text-classifier configuration in the same framework, in each framework's production mode.

References (bench/_references.py, which says what differs): PyTorch — Hugging Face ``transformers`` ``BertEncoder``
(eager, and a plain ``torch.compile(model)`` against bakeoff's compiled step); TensorFlow —
``keras_hub.layers.TransformerEncoder`` in a ``tf.function`` step (and with ``jit_compile=True`` against bakeoff's
XLA mode); JAX — a Flax Linen encoder as ``flax/examples``
write it (``nn.MultiHeadDotProductAttention``, ``TrainState``, ``jax.jit``). JAX's reference is Flax rather than
keras-hub on the JAX backend because bakeoff's JAX model is Flax: the question is whether bakeoff's Flax code is as
fast as the Flax that Flax's own authors write, not how Keras compares with Flax.

One question per row: the same architecture on both sides. BERT's and keras-hub's blocks have no dropout after the
feed-forward activation, where bakeoff's (``nn.TransformerEncoderLayer``'s) has one, so the headline variant
``same`` sets dropout to 0 on both sides — then the two models are the same computation in every framework. The
``preset`` variant keeps the preset's dropout (0.1) beside it: bakeoff's dropout code is timed too, and the JAX
reference matches its placement exactly; the PyTorch and TensorFlow rows of that variant are marked as carrying
the reference's missing dropout.

Both sides: the same batches (the workload's shipped data, batch 32), sequence length, Adam (lr of the preset,
β 0.9/0.999, ε 1e-8), loss (sigmoid cross-entropy, 2 classes), fp32, thread count (bakeoff's ``threads_for``).

How it is timed, and why: each round of a (framework, mode, preset, variant) is one fresh process holding both
sides, built in alternating order (bakeoff first in even rounds); after untimed warm-up steps (compilation
included) the two sides take their timed steps in alternation (A B B A ...), each step closed by a host copy of
the loss. Adjacent steps of the two sides see the same machine, so drift, other load and the process's own luck
(memory placement, thread start-up) fall on both alike: a pair's ratio is far steadier than the ratio of two
processes' figures, which moved by ±10% between runs of the earlier, one-side-per-process design. Reported per
row: each side's examples/s (batch / median step), the ratio bakeoff/reference (> 1: bakeoff faster; the geometric
mean of the rounds' ratios of median steps) and its 95% interval by a two-level bootstrap (rounds, then the step
pairs within each round, resampled together so the pairing is kept). The verdict column: ``par`` when the ratio is
≥ 0.97 and the interval reaches above 1.0, ``gap`` when the whole interval is below 0.97, ``unsure`` otherwise (run
more rounds).

Parameter counts are printed for both sides. They must agree within PARAM_TOLERANCE (0.1%): the models are
built to be equal (they are, exactly), and a step's time on CPU follows its weights' matmuls, so a difference
below 0.1% moves it by far less than the noise; a larger one (BERT's pooler alone is 1.3% of tiny) would be a
different model, and the row says "not comparable" instead of a ratio.

Run: .venv/bin/python bench/reference_efficiency.py [--presets tiny,small] [--variants same,preset] [--rounds N]
[--frameworks torch,...] [--store PATH] (measured on 2 cores, 3 rounds, 5 cases: tiny with both variants 9 minutes,
small 12 minutes a variant). With ``--store`` the rows are kept in bakeoff's store for this machine, where
``bakeoff env`` shows them (the report does not read them yet).
``--check`` instead builds each reference in its own process and checks that it is bakeoff's configuration
(parameter count exactly bakeoff's canonical one, output shape, a first loss near ln 2), exiting 1 if one is not;
``make bench`` runs it first. It was tests/test_reference_bench.py's until CI, which has no ``bench`` extra, skipped it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from _common import build_engine, in_child
from _references import INSTALL_HINT

CASES = [("torch", "eager"), ("torch", "graph"), ("tensorflow", "graph"), ("tensorflow", "xla"), ("jax", "graph")]
MODE_NAMES = {("torch", "eager"): "eager", ("torch", "graph"): "torch.compile", ("tensorflow", "graph"): "tf.function",
              ("tensorflow", "xla"): "tf.function+XLA", ("jax", "graph"): "jax.jit"}
# Variant -> the dropout both sides train with (None: the preset's).
VARIANTS: dict[str, float | None] = {"same": 0.0, "preset": None}
# The references whose blocks lack the dropout after the feed-forward activation (bench/_references.py).
FFN_DROPOUT_MISSING = {"torch", "tensorflow"}
# (untimed warm-up steps per side, timed step pairs): small's step is ~1-3 s on 2 cores, its compile tens of seconds.
STEPS = {"tiny": (3, 30), "small": (2, 8)}
ROUNDS = {"tiny": 3, "small": 3}
BATCH = 32
PARAM_TOLERANCE = 1e-3
PAR, MARGIN = 0.97, 1.0  # at par: the ratio at least PAR and its interval reaching above MARGIN
RESAMPLES = 2000
SIDES = ("bakeoff", "reference")
MISSING = "not measured: install bakeoff[bench]"


def abba_order(rounds: int) -> list[tuple[str, str]]:
    """Which side is built (and steps) first in each round: bakeoff in even rounds, the reference in odd ones."""
    return [SIDES if r % 2 == 0 else SIDES[::-1] for r in range(rounds)]


def comparable(bakeoff_params: int, reference_params: int, tolerance: float = PARAM_TOLERANCE) -> bool:
    """Whether the two models' parameter counts agree within ``tolerance`` (relative to bakeoff's)."""
    return abs(bakeoff_params - reference_params) <= tolerance * bakeoff_params


def round_ratio(bakeoff: Sequence[float], reference: Sequence[float]) -> float:
    """One round's bakeoff / reference speed: the reference's median step time over bakeoff's."""
    return statistics.median(reference) / statistics.median(bakeoff)


def mean_ratio(rounds: Sequence[tuple[Sequence[float], Sequence[float]]]) -> float:
    """The geometric mean of the rounds' ratios. Not the ratio of medians pooled over rounds: a round that ran
    slower on both sides (another process on the machine) would then pull the two pooled medians apart."""
    return math.exp(statistics.fmean(math.log(round_ratio(b, r)) for b, r in rounds))


def ratio_interval(rounds: Sequence[tuple[Sequence[float], Sequence[float]]], resamples: int = RESAMPLES,
                   seed: int = 0) -> tuple[float, float]:
    """The 95% percentile interval of :func:`mean_ratio` by a two-level bootstrap: rounds drawn with replacement,
    then within each drawn round its step pairs (the same indices for both sides: pairs stay pairs), so both
    round-to-round and step-to-step noise show. Every round has the same number of pairs."""
    rng = np.random.default_rng(seed)
    bak, ref = (np.asarray([pair[i] for pair in rounds], float) for i in (0, 1))  # (rounds, pairs) each
    n_rounds, n_pairs = bak.shape
    picked = rng.integers(n_rounds, size=(resamples, n_rounds, 1))
    steps = rng.integers(n_pairs, size=(resamples, n_rounds, n_pairs))  # the same draw for both sides
    logs = np.log(np.median(ref[picked, steps], axis=2) / np.median(bak[picked, steps], axis=2))  # (resamples, rounds)
    lo, hi = np.exp(np.quantile(logs.mean(axis=1), [0.025, 0.975]))
    return float(lo), float(hi)


@dataclass(frozen=True)
class Row:
    """One (framework, mode, preset, variant): each round's paired step times, summarised."""

    rounds: Sequence[tuple[Sequence[float], Sequence[float]]]  # per round: (bakeoff's, the reference's) seconds
    bakeoff_params: int
    reference_params: int

    @property
    def comparable(self) -> bool:
        return comparable(self.bakeoff_params, self.reference_params)

    def examples_per_s(self, side: str) -> float:
        times = [t for pair in self.rounds for t in pair[SIDES.index(side)]]
        return BATCH / statistics.median(times)

    @property
    def ratio(self) -> float | None:
        """bakeoff / reference speed (> 1: bakeoff faster); None when the models are not comparable."""
        return mean_ratio(self.rounds) if self.comparable else None

    @cached_property
    def interval(self) -> tuple[float, float]:
        return ratio_interval(self.rounds)

    @property
    def verdict(self) -> str:
        """``par``, ``gap`` or ``unsure`` (module docstring)."""
        lo, hi = self.interval
        if self.ratio >= PAR and hi > MARGIN:
            return "par"
        return "gap" if hi < PAR else "unsure"

    def record(self) -> dict:
        """What the store keeps of the row: the figures, and every raw step time."""
        out = {"bakeoff_examples_per_s": self.examples_per_s("bakeoff"),
               "reference_examples_per_s": self.examples_per_s("reference"),
               "bakeoff_params": self.bakeoff_params, "reference_params": self.reference_params,
               "rounds": [[list(b), list(r)] for b, r in self.rounds]}
        if self.comparable:
            out.update(ratio=self.ratio, interval=list(self.interval), verdict=self.verdict)
        return out


def format_row(framework: str, mode: str, preset: str, variant: str, row: Row) -> str:
    head = f"{framework:<10} {mode:<15} {preset:<5} {variant:<6}"
    params = f"{row.bakeoff_params:>9,} {row.reference_params:>9,}"
    speeds = f"{row.examples_per_s('bakeoff'):>8.1f} {row.examples_per_s('reference'):>8.1f}"
    if not row.comparable:
        return f"{head} {speeds} {'not comparable':>20} {'':>7} {params}"
    lo, hi = row.interval
    note = " (reference lacks the FFN dropout)" if variant == "preset" and framework in FFN_DROPOUT_MISSING else ""
    return f"{head} {speeds} {f'{row.ratio:.3f}x ({lo:.3f}–{hi:.3f})':>20} {row.verdict:>7} {params}{note}"


HEADER = (f"{'framework':<10} {'mode':<15} {'preset':<5} {'arch':<6} {'bakeoff':>8} {'ref':>8} "
          f"{'ratio (95% interval)':>20} {'verdict':>7} {'params b':>9} {'params r':>9}")


def time_pairs(steps: dict[str, Callable[[dict], float]], order: Sequence[str], batches: Sequence[dict],
               warmup: int, pairs: int) -> dict[str, list[float]]:
    """``warmup`` untimed steps of each side, then ``pairs`` timed steps of each, alternating A B B A ... (the
    first of a pair is ``order[0]`` in even pairs, ``order[1]`` in odd ones); both sides take the same batch."""
    for side in order:
        for batch in batches[:warmup]:
            steps[side](batch)
    times: dict[str, list[float]] = {side: [] for side in order}
    for i in range(pairs):
        batch = batches[(warmup + i) % len(batches)]
        for side in (order if i % 2 == 0 else order[::-1]):
            start = time.perf_counter()
            steps[side](batch)  # returns a float: the loss copied to the host, so the step has finished
            times[side].append(time.perf_counter() - start)
    return times


def overrides(variant: str) -> tuple[tuple[str, str], ...]:
    dropout = VARIANTS[variant]
    return () if dropout is None else (("dropout", str(dropout)),)


def measure(framework: str, execution: str, preset: str, variant: str, first: str) -> dict:
    """One round in this (fresh) process: both sides built (``first`` first) and timed in alternation."""
    from _references import REFERENCE_LIBRARY, REFERENCES
    from bakeoff.core import registry
    from bakeoff.core.spec import RunSpec
    from bakeoff.engines.base import threads_for

    if importlib.util.find_spec(REFERENCE_LIBRARY[framework]) is None:
        return {"missing": REFERENCE_LIBRARY[framework]}
    warmup, pairs = STEPS[preset]
    config = overrides(variant)
    spec = RunSpec(workload="text_classifier", framework=framework, preset=preset, execution=execution,
                   batch_size=BATCH, max_steps=10**6, device="cpu", config=config)
    workload = registry.workload(spec.workload)
    data = workload.load_data(spec)
    steps: dict[str, Callable[[dict], float]] = {}
    params: dict[str, int] = {}
    order = (first, *(s for s in SIDES if s != first))
    for side in order:
        if side == "reference":
            cfg = workload.config(preset, spec, data)
            ref = REFERENCES[framework](cfg, workload.output_units(cfg), execution, threads_for(spec))
            steps[side], params[side] = ref.step, ref.num_params
        else:
            engine, *_ = build_engine(framework, preset=preset, execution=execution, batch_size=BATCH, config=config)
            steps[side], params[side] = (lambda batch, e=engine: e.train_step([batch])), engine.num_params()
    batches = list(workload.batches(data.train, BATCH, spec.seed, 0))
    times = time_pairs(steps, order, batches, warmup, pairs)
    return {"times": times, "params": params, "threads": threads_for(spec)}


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


def run(presets: Sequence[str], variants: Sequence[str], rounds: int | None, frameworks: Sequence[str],
        store: Path | None = None) -> None:
    """Measure every case (``rounds`` rounds each, None: :data:`ROUNDS`), print the table, keep the rows in
    ``store`` when given."""
    cases = [c for c in CASES if c[0] in frameworks]
    counts = ", ".join(f"{p} {rounds or ROUNDS[p]}" for p in presets)
    sys.stdout.write(f"reference efficiency: text_classifier, batch {BATCH}, fp32, rounds: {counts}, "
                     f"load average {os.getloadavg()[0]:.2f} at start\n")
    lines, kept = [], []
    threads = 0
    for preset in presets:
        for variant in variants:
            samples: dict = {c: [] for c in cases}
            params: dict = {}
            missing: dict = {}
            for order in abba_order(rounds or ROUNDS[preset]):
                for case in cases:  # cases interleaved within a round too
                    if case in missing:
                        continue
                    r = in_child(__file__, *case, preset, variant, order[0])
                    if "missing" in r:
                        missing[case] = r["missing"]
                        continue
                    samples[case].append((r["times"]["bakeoff"], r["times"]["reference"]))
                    params[case] = (r["params"]["bakeoff"], r["params"]["reference"])
                    threads = r["threads"]  # both sides' (bakeoff's threads_for), the same in every child
                    b, ref = (statistics.median(r["times"][s]) for s in SIDES)
                    sys.stderr.write(f"  {preset} {variant} {case[0]}/{case[1]} first {order[0]}: "
                                     f"ratio {ref / b:.3f}\n")
            for case in cases:
                name = MODE_NAMES[case]
                if case in missing:
                    hint = INSTALL_HINT.get(case[0])
                    lines.append(f"{case[0]:<10} {name:<15} {preset:<5} {variant:<6} {MISSING} "
                                 f"({missing[case]} is missing" + (f"; {hint})" if hint else ")"))
                    continue
                row = Row(samples[case], *params[case])
                lines.append(format_row(case[0], name, preset, variant, row))
                kept.append({"framework": case[0], "execution": case[1], "mode": name, "preset": preset,
                             "variant": variant, **row.record()})
    sys.stdout.write(HEADER + "\n" + "\n".join(lines) + "\n")
    sys.stdout.write(f"examples/s: batch / median step, every round's steps pooled; ratio: geometric mean of the "
                     f"rounds' ratios of median steps (warm-up, timed pairs per preset: "
                     f"{STEPS}); {threads} threads each side; ratio > 1: bakeoff faster; arch 'same': dropout 0 on "
                     f"both sides; "
                     f"load average {os.getloadavg()[0]:.2f} at end\n")
    if store is not None and kept:
        keep(store, kept, threads)


def keep(path: Path, rows: Sequence[dict], threads: int) -> None:
    """Keep the rows in bakeoff's store under this machine's fingerprint (:mod:`bakeoff.results.efficiency`)."""
    from bakeoff.results import efficiency
    from bakeoff.results.store import Store

    with Store(path) as store:
        efficiency.keep(store, rows, threads=threads)
    sys.stdout.write(f"kept {len(rows)} rows in {path} (bakeoff env shows them)\n")


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
                                     epilog="Each (framework, mode, preset, variant, round) runs in a fresh process "
                                            "holding both sides; a missing reference library prints '"
                                            + MISSING + "'.")
    parser.add_argument("--presets", default="tiny,small", help="comma-separated presets (default: tiny,small)")
    parser.add_argument("--variants", default="same,preset",
                        help="comma-separated: same (dropout 0 on both sides: the same architecture), preset (the "
                             "preset's dropout; the PyTorch and TensorFlow references lack one of bakeoff's "
                             "dropouts) (default: both)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds (fresh processes) per case, every preset (default: 3); even rounds build "
                             "and step bakeoff first, odd ones the reference")
    parser.add_argument("--frameworks", default="torch,tensorflow,jax",
                        help="comma-separated frameworks (default: torch,tensorflow,jax)")
    parser.add_argument("--store", type=Path, default=None,
                        help="keep the rows in this bakeoff store (e.g. results/bakeoff.sqlite), where bakeoff "
                             "env shows them")
    parser.add_argument("--check", action="store_true",
                        help="check that each reference is bakeoff's configuration instead of timing it")
    args = parser.parse_args(argv)
    presets = [p for p in args.presets.split(",") if p]
    unknown = sorted(set(presets) - set(STEPS))
    if unknown:
        parser.error(f"unknown preset(s) {unknown}; accepted: {', '.join(STEPS)}")
    variants = [v for v in args.variants.split(",") if v]
    if not variants or set(variants) - set(VARIANTS):
        parser.error(f"unknown variant(s) in {variants}; accepted: {', '.join(VARIANTS)}")
    frameworks = [f for f in args.frameworks.split(",") if f]
    if set(frameworks) - {c[0] for c in CASES}:
        parser.error(f"unknown framework(s) in {frameworks}; accepted: torch, tensorflow, jax")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.check:
        raise SystemExit(check(presets, frameworks))
    run(presets, variants, args.rounds, frameworks, args.store)


if __name__ == "__main__":
    main()
