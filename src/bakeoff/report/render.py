"""Render trial results as a decision report: ``report.md``, a self-contained ``report.html``, and two PNGs.

First the decision card across every workload (:mod:`bakeoff.report.card`), then the plots. Then per (workload,
preset), in this order: the verdict, a warning when the trials differ in what a comparison needs equal (data,
versions, settings), what ran and the command that reproduces it (:mod:`bakeoff.report.what_ran`), one row per
configuration with every measured quantity of :data:`~bakeoff.analysis.quantities.QUANTITIES` (noisy values
marked, missing ones explained), memory, run conditions (threads, machine load), the head-to-head differences with
their intervals, the scores of every mode, the weights, the robustness of the verdict, the trials that did not
succeed, and the environment (folded away).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.analysis.bootstrap import CONFIDENCE, RESAMPLES, TIE_BAND
from bakeoff.analysis.conditions import (
    BUSY_MARK,
    LOAD_GAP_PER_CORE,
    busy_runs,
    config_load,
    display_name,
    loaded,
    other_work,
    threads,
)
from bakeoff.analysis.decide import MEASURED, Decision, Qualitative, against, decide_each
from bakeoff.analysis.intervals import BLOCK_LEVEL, ROBUST_CONFIDENCE
from bakeoff.analysis.mixing import batch_text
from bakeoff.analysis.quantities import MIB, QUANTITIES, Quantity
from bakeoff.analysis.scaling import SCALING_COLUMNS, scaling_cells, scaling_rows, scaling_sentence
from bakeoff.analysis.stats import NOISY_THRESHOLD, ConfigSummary, fmt, short_reason, summarise_groups
from bakeoff.analysis.verdict import MIN_RUNS, ROBUST_SHARE, interval_text, outcome_text, percent, ratio_text
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import SpecError, Status
from bakeoff.measure import energy
from bakeoff.measure.ceiling import PRECISIONS, REPEATS, SIZE, size_note
from bakeoff.measure.environment import OTHER_WORK_SHARE
from bakeoff.report import card, claims, declared, deployment, plots
from bakeoff.report.templates import Block, Details, Heading, Image, Para, Table, to_html, to_markdown
from bakeoff.report.what_ran import mix_warning, what_ran_blocks

NOISY_MARK = "†"
LOAD_MARK = "‡"


class _Footnotes:
    """Numbered footnotes; the same text gets the same number."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def ref(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return f"[{self.texts.index(text) + 1}]"

    def lines(self) -> list[str]:
        return [f"[{i}] {t}" for i, t in enumerate(self.texts, 1)]


def _columns(configs: Sequence[ConfigSummary], table: str) -> list[Quantity]:
    """The quantities shown as columns of ``table``; optional ones only when some configuration measured them."""
    return [q for q in QUANTITIES.values() if q.table == table
            and (not q.optional or any(c.get(q.name) is not None for c in configs))]


SHORT = {"examples_per_s": "throughput", "tokens_per_s": "tokens/s", "frames_per_s": "frames/s", "mfu": "MFU",
         "first_step_s": "first step", "steady_step_s": "step", "time_to_target_s": "to target",
         "steps_to_target": "steps to target", "metric_at_budget": "{metric} at budget", "final_metric": "final",
         "import_s": "import", "build_s": "build", "memory_baseline_bytes": "baseline",
         "memory_increment_bytes": "training increment", "peak_memory_bytes": "peak",
         "energy_per_example_j": "energy / example", "energy_to_target_j": "energy to target"}
"""Column headers of the configuration and memory tables; what each means, with its unit, is in the legend under
the table (a quantity without one here is headed by its full title)."""


def _header(q: Quantity, configs: Sequence[ConfigSummary]) -> str:
    """A short column header (:data:`SHORT`)."""
    return SHORT[q.name].format(metric=configs[0].metric_name or "metric") if q.name in SHORT else _title(q, configs)


def _title(q: Quantity, configs: Sequence[ConfigSummary]) -> str:
    """What a column holds, in full: ``steady throughput, examples/s median (95% CI)``."""
    text = configs[0].title(q.name) + (f", {q.display_unit}" if q.display_unit else "")
    if q.interval:
        text += " median (95% CI)"
    return text + (" (reached)" if q.censored else "")


def _legend(columns: Sequence[Quantity], configs: Sequence[ConfigSummary]) -> str:
    """``Columns: throughput: steady throughput, examples/s median (95% CI); ...``: each short header's meaning."""
    return "Columns: " + "; ".join(f"{_header(q, configs)}: {_title(q, configs)}" for q in columns) + "."


def _cell(c: ConfigSummary, q: Quantity, notes: _Footnotes) -> str:
    """One table cell: the median (with its interval), "†" when noisy across runs; "—" and a footnote when missing;
    for a censored quantity, the runs that got there."""
    value, summary = c.value(q.name), c.get(q.name)
    reach = f" ({c.reached}/{c.n_ok})" if q.censored and c.n_ok else ""
    if value is None or (math.isinf(value) and not c.reached):
        if value is not None and (best := c.get("best_metric")) is not None:
            return f"not reached, best {fmt(best.median)}{reach} {notes.ref(f'{c.label}: {c.missing[q.name]}')}"
        return f"—{reach} {notes.ref(f'{c.label}: {c.missing[q.name]}')}"
    if math.isinf(value):
        return f"not in most runs{reach}"
    text = fmt(value * q.scale)
    if q.interval and (iv := c.interval(q.name)) is not None and iv[0] != iv[1]:
        text += f" ({fmt(iv[0] * q.scale)}–{fmt(iv[1] * q.scale)})"
    return text + reach + (f" {NOISY_MARK}" if summary is not None and summary.noisy else "")


def _comparison_table(configs: Sequence[ConfigSummary]) -> Table:
    notes = _Footnotes()
    columns = _columns(configs, "configurations")
    batches = {c.label: _batch(c) for c in configs}
    builds = any(r.training.graph_builds for c in configs for r in c.trials)
    header = ["configuration", *(["batch"] if len(set(batches.values())) > 1 else []), "ok / trials"]
    header += [_header(q, configs) for q in columns]
    header += ["graph builds (their extra s)"] if builds else []
    rows = []
    for c in configs:
        row = [c.label] + ([batches[c.label]] if "batch" in header else []) + [f"{c.n_ok}/{c.n_total}"]
        row += [_cell(c, q, notes) for q in columns]
        row += [_graph_builds(c)] if builds else []
        rows.append(row)
    footnotes = [_legend(columns, configs), *notes.lines()]
    if any(NOISY_MARK in cell for row in rows for cell in row):
        footnotes.insert(1, f"{NOISY_MARK} noisy: spread across runs above {NOISY_THRESHOLD:.0%} of the median (IQR, "
                            "or the full range with fewer than 4 runs) — treat differences in it with suspicion")
    footnotes.append(f"Medians over successful runs. The {CONFIDENCE:.0%} CI is a bootstrap ({RESAMPLES:,} "
                     "resamples) over runs and, within each run, over its steady steps.")
    if any(q.censored for q in columns):
        footnotes.append("Time to target: the median over all successful runs, a run that never reached the target "
                         "counting as never — so it is finite only when more than half the runs reached it; "
                         "(k/n): the runs that reached it.")
    budget = next((c.budget_examples for c in configs if c.budget_examples is not None), None)
    if budget is not None and any(q.name == "metric_at_budget" for q in columns):
        footnotes.append(f"Quality is read at {fmt(budget)} training examples, the largest number every "
                         "configuration evaluated at (linear between evaluations), so trials stopped at the target "
                         "and trials that trained on are compared at an equal budget.")
    if any(q.name == "mfu" for q in columns):
        footnotes.append(_mfu_note(configs))
    footnotes += [note] if (note := _energy_note(configs)) else []
    if builds:
        footnotes.append("Graph builds: training steps that traced (tf.function) or compiled (torch.compile, "
                         "jax.jit) a graph, each new input shape adding one; \"×3 graphs\": each build made 3 "
                         "graphs, the pieces between graph breaks; their extra seconds are what those steps took "
                         "beyond a steady step, the first step included.")
        footnotes += [note] if (note := _graph_break_note(configs)) else []
    return Table(header, rows, footnotes)


def _graph_break_note(configs: Sequence[ConfigSummary]) -> str | None:
    """Where torch.compile broke each configuration's graph, as its first successful run recorded it."""
    said = []
    for c in configs:
        sites = next((r.extras["dynamo_graph_breaks_at"] for r in c.ok if r.extras.get("dynamo_graph_breaks_at")), [])
        where = ", ".join(f"{Path(str(s.get('at'))).name}{f' ({reason})' if (reason := s.get('reason')) else ''}"
                          f"{f' ×{n}' if (n := s.get('count', 1)) > 1 else ''}" for s in sites)
        said += [f"{c.label} at {where}"] if where else []
    return f"Graph breaks, where torch.compile stopped tracing (a run's own record): {'; '.join(said)}." \
        if said else None


def _energy_note(configs: Sequence[ConfigSummary]) -> str | None:
    """Where the energy figures came from, and each configuration without one: ``energy: not measured — why``
    (:func:`bakeoff.measure.energy.describe`, as its first successful run recorded it)."""
    missing: dict[str, list[str]] = {}
    measured = False
    for c in configs:
        r = next(iter(c.ok), None)
        if r is None:
            continue
        if r.energy is not None and not r.energy.missing:
            measured = True
        else:
            missing.setdefault(energy.describe(r.energy), []).append(c.label)
    if not measured:
        if len(missing) == 1:
            return f"{next(iter(missing))}."
        return "; ".join(f"{', '.join(labels)}: {line}" for line, labels in missing.items()) + "." if missing else None
    return ("Energy: joules read from the machine's cumulative counters at the step clock's points, never estimated "
            "(RAPL: each CPU package and its DRAM, the whole package, other processes on it included; NVML: the "
            "trial's GPUs); per example over the steady steps; to target interpolated between evaluations, as time "
            "to target is" + "".join(f"; {', '.join(labels)}: {line}" for line, labels in missing.items()) + ".")


def _mfu_note(configs: Sequence[ConfigSummary]) -> str:
    """What MFU counts, and each ceiling it was measured against."""
    ceilings: dict[tuple, set[str]] = {}
    for c in configs:
        for r in c.ok:
            m = r.mfu
            if m is not None and m.value is not None:
                low, high = m.ceiling_range or [m.ceiling_flops_per_s] * 2
                what = (m.ceiling_version, m.precision, m.device_kind, m.threads, m.ceiling_where,
                        m.ceiling_measured_at, f"{fmt(m.ceiling_flops_per_s / 1e9)} GFLOP/s (samples "
                                               f"{fmt(low / 1e9)}–{fmt(high / 1e9)}{size_note(m.ceiling_n)})")
                ceilings.setdefault(what, set()).add(c.label)
    kept = "; ".join(f"{v} {p} on {d}, {t} threads: {g}, measured {when} in a {where} ("
                     f"{', '.join(sorted(labels))})"
                     for (v, p, d, t, where, when, g), labels in sorted(ceilings.items()))
    return ("MFU: model FLOPs per second (the workload's FLOPs per example × steady examples/s; what a training step "
            "computes in matmuls and convolutions, attention's score and value products and padding included: the "
            "forward, the weight gradients and the input gradients but the data's, within 2% of torch's "
            "FlopCounterMode; embeddings, norms, activations and the optimizer not counted) over "
            "the framework's own dense matmul "
            f"ceiling in the trial's precision ({SIZE}×{SIZE} products, median of {REPEATS}; the probe measures "
            f"{' and '.join(PRECISIONS)}; the highest median measured is kept, as interference only lowers a rate, "
            f"and `bakeoff env --reprobe` measures again): {kept}.")


def _memory_table(configs: Sequence[ConfigSummary]) -> Table | None:
    columns = _columns(configs, "memory")
    if not any(c.get(q.name) is not None for c in configs for q in columns):
        return None
    notes = _Footnotes()
    rows = [[c.label, c.memory_kind or "—", *(_cell(c, q, notes) for q in columns)] for c in configs]
    header = ["configuration", "probe", *(_header(q, configs) for q in columns)]
    footnotes = [_legend(columns, configs), *notes.lines()] + [
        "Read by each engine's probe: rss is the process's resident set (CPU); on GPU, the framework allocator's "
        "peak. Baseline: in use after the framework import and model build. Training increment: the peak during "
        "training steps minus that baseline — what training costs, and what the memory criterion scores. The peak "
        "over the whole trial includes the import and evaluation."]
    return Table(header, rows, footnotes, align="ll" + "r" * len(columns))


def _scaling_table(configs: Sequence[ConfigSummary]) -> Table | None:
    """Distributed configurations against their one-replica baselines (:mod:`bakeoff.analysis.scaling`)."""
    rows = scaling_rows(configs)
    if not rows:
        return None
    notes = ["Scaling efficiency = throughput(N) / (N × throughput of the baseline), the global batch the same at "
             "every N (strong scaling; 100% is linear speed-up); baseline: the same strategy with one replica, "
             "else the single-device run; interval: 95% bootstrap. Start-up: process launch, framework import, "
             "rendezvous and strategy set-up, before the first step and off the training clock. All-reduces per "
             "step, counted during training (with accumulation, non-final micro-batches do not synchronise): "
             "PyTorch counts DDP's gradient-bucket all-reduces (the loss sum and count add one more); TensorFlow "
             "counts the all-reduce ops of its traced step (graph mode packs the gradients into one, plus one for "
             "the loss sum and count; eager mode reduces each tensor on its own)."]
    methods = {f"{r.strategy}: {r.sync_method}" for r in rows if r.sync_method}
    definitions = sorted({r.sync_definition for r in rows if r.sync_definition})
    how = (f"The same method in every framework: {'; '.join(definitions)}. What each one's timed call ran:"
           if definitions else "Each framework's way of timing it:")
    notes.append("All-reduce alone: one step's gradient synchronisation, timed on its own after training; in training "
                 "it overlaps the backward pass (DDP's buckets, XLA's scheduling), so this is its cost when nothing "
                 "hides it, not what it adds to a training step (overlap hides some, contention for cores can add); "
                 "PyTorch's DDP on CPU also times that in the step (the CSV export's sync_in_step_s and "
                 f"sync_per_example_s, which `bakeoff claims` judges accumulation on). {how}")
    notes += [f"{m.rstrip('.')}." for m in sorted(methods)]
    notes += sorted({w for r in rows for w in r.warnings})
    notes += sorted({f"{r.config.label}: XLA compiled {r.xla_scope}, not the whole step as on one device."
                     for r in rows if r.xla_scope})
    if any(r.parallelism == "parameter_server" for r in rows):
        notes.append("ParameterServerStrategy trains asynchronously: workers apply their own updates, so its losses "
                     "and quality are not those of synchronous training with the same global batch. Each of its "
                     "steps is a whole global batch on whichever worker is free, up to one step per worker in "
                     "flight: its efficiency is N workers' throughput against N times one device's, not strong "
                     "scaling, and its all-reduce column is a pull and push of every variable, with no share of "
                     "a step (steps overlap).")
    return Table(SCALING_COLUMNS, [scaling_cells(r) for r in rows], notes, align="ll" + "r" * 11)


def _conditions_table(configs: Sequence[ConfigSummary]) -> Table | None:
    """Threads (when they differ between configurations) and machine load per configuration."""
    pools = {c.label: threads(c) for c in configs if c.n_ok}
    loads = {c.label: config_load(c) for c in configs if c.n_ok}
    others = {c.label: [v for r in c.ok if (v := other_work(r.environment)) is not None] for c in configs if c.n_ok}
    flagged = {c.label: busy_runs(c) for c in configs if c.n_ok}
    show_threads = len(set(pools.values())) > 1
    show_load = any(v[2] is not None for v in loads.values())
    show_other = any(others.values())
    if not (show_threads or show_load or show_other):
        return None
    busy = loaded(configs)
    header = ["configuration"] + (["threads intra / inter-op"] if show_threads else [])
    header += ["1-min load average, start → end (median)"] if show_load else []
    header += ["other work on its cores, steady steps (share, max over runs)"] if show_other else []
    rows = []
    for label in pools:
        row = [label] + ([pools[label]] if show_threads else [])
        if show_load:
            start, end, _ = loads[label]
            row.append(f"{fmt(start)} → {fmt(end)}" + (f" {LOAD_MARK}" if label in busy else ""))
        if show_other:
            worst = max(others[label], default=None)
            marked = f" {BUSY_MARK} ({len(flagged[label])} of {len(others[label])} runs)" if flagged[label] else ""
            row.append(("—" if worst is None else f"{worst:.0%}") + marked)
        rows.append(row)
    notes = []
    if show_threads:
        notes.append("Thread pools differ between configurations: a framework with more threads may win on them, "
                     "not on its kernels.")
    if busy:
        notes.append(f"{LOAD_MARK} ran under clearly more load than the least-loaded configuration: median run load "
                     f"(the larger of start and end) above it by more than {LOAD_GAP_PER_CORE:g} × the cores — other "
                     "work competed for the CPU, so its timings may be pessimistic.")
    if any(flagged.values()):
        notes.append(f"{BUSY_MARK} measured while other processes used more than {OTHER_WORK_SHARE:.0%} of the "
                     "trial's cores during its steady steps: its timings are suspect. `bakeoff run --retry-busy` "
                     "(same options) measures those runs again.")
    return Table(header, rows, notes, align="l" * len(header))


def _head_to_head_table(decision: Decision) -> Table | None:
    if not decision.head_to_head or len(decision.ranking) < 2:
        return None
    lead, runner = decision.ranking[0].label, decision.ranking[1].label
    rows = []
    for criterion, d in decision.head_to_head.items():
        q = QUANTITIES[d.quantity]
        has_interval = d.low is not None and d.high is not None
        outcome = {"better": f"{display_name(lead)} better", "worse": f"{display_name(runner)} better",
                   "equal": f"equal: the whole interval within ±{TIE_BAND:.0%}",
                   "unsettled": (f"unsettled: the interval is neither within nor beyond ±{TIE_BAND:.0%}"
                                 if has_interval else "unsettled: one run a side, no interval")}[d.outcome]
        if d.ratio is None:
            outcome = "—"

        def shown(v: float | None, q: Quantity = q) -> str:
            return "—" if v is None else "never" if math.isinf(v) else fmt(v * q.scale)

        rows.append([criterion, shown(d.a), shown(d.b), ratio_text(d.ratio),
                     (interval_text(d.low, d.high, d.confidence) + (", paired" if d.pairs else ""))
                     if has_interval else "—", outcome])
    notes = [f"Ratio {lead} / {runner} of the medians over runs. Its {CONFIDENCE:.0%} interval is Welch's t interval "
             "on the log of one value per run (a run's throughput from its own median step), exponentiated: the "
             "ratio of geometric means; \"paired\" where the runs made in the same repeat (the frameworks take "
             f"turns in each) shared what slowed their repeat beyond chance (a block test at {BLOCK_LEVEL:.0%}): "
             "then it is Student's t over the pairs' log ratios, in which that shared slowdown cancels. A run that "
             "never reached the target, or did not finish, counts as never: "
             "it can only show its side slower, never faster. With one run a side there is no interval, and the "
             f"outcome is unsettled whatever the ratio. Band [{1 / (1 + TIE_BAND):.3f}, {1 + TIE_BAND:.2f}]: "
             "better when the whole interval lies beyond it, equal when the whole interval lies inside it (no "
             "difference a framework choice should turn on), unsettled otherwise; equal and unsettled ones are "
             "named, never cited with their numbers as a reason for a win."]
    return Table(["criterion", lead, runner, "ratio", "interval", "outcome"], rows, notes, align="lrrrll")


def _batch(c: ConfigSummary) -> str:
    """Examples per optimizer step: ``32``, or ``4×8`` for accumulated micro-batches."""
    return batch_text(c.trials[0].run_spec)


def _graph_builds(c: ConfigSummary) -> str:
    """Median steps that built graphs (their extra seconds); with graph breaks, the graphs those steps made."""
    ok = [r for r in c.trials if r.status is Status.OK]
    steps = [len(r.training.graph_build_steps) or r.training.graph_builds for r in ok]
    graphs = [r.training.graph_builds for r in ok]
    if not steps or not any(steps):
        return "0" if steps else "—"
    extra = [r.training.graph_build_s for r in ok if r.training.graph_build_s is not None]
    text = fmt(float(np.median(steps)))
    if np.median(graphs) > np.median(steps):
        text += f" ×{fmt(float(np.median(graphs)) / float(np.median(steps)))} graphs"
    return text + (f" ({fmt(float(np.median(extra)))})" if extra else "")


def _mode_effects_table(configs: Sequence[ConfigSummary]) -> Table | None:
    """What each mode buys within one framework: each mixed-precision or accumulation configuration against its
    plain baseline (the same execution in fp32, no accumulation, as many examples per optimizer step), and each
    compiled configuration (graph, XLA) against eager (the same precision and accumulation). Ratios are compared
    as the verdict compares two frameworks (:func:`bakeoff.analysis.decide.against`), in its outcome words."""

    def shape(c: ConfigSummary) -> tuple:
        s = c.trials[0].run_spec
        return (s.framework, s.execution.value, s.precision.value, s.grad_accum, s.batch_size * s.grad_accum,
                s.parallelism.value, s.workers)

    by_shape = {shape(c): c for c in configs if c.trials}
    pairs = []
    for c in configs:
        if not c.trials:
            continue
        framework, execution, precision, accum, per_step, parallelism, workers = shape(c)
        if precision != "fp32" or accum != 1:
            pairs.append((c, by_shape.get((framework, execution, "fp32", 1, per_step, parallelism, workers))))
        if execution != "eager":
            pairs.append((c, by_shape.get((framework, "eager", precision, accum, per_step, parallelism, workers))))
    rows, busy = [], False
    for mode, base in pairs:
        if base is None or not (mode.n_ok and base.n_ok):
            continue
        marked = bool(busy_runs(mode) or busy_runs(base))
        busy |= marked
        rows.append([mode.label + _skipped_steps(mode) + (f" {BUSY_MARK}" if marked else ""), base.label,
                     outcome_text(against("throughput", mode, base)), outcome_text(against("memory", mode, base)),
                     _values("metric_at_budget", mode, base), _time_to_target(mode, base)])
    if not rows:
        return None
    quality = configs[0].title("metric_at_budget")
    notes = [f"Each mode against its baseline in the same framework: a precision or accumulation mode against fp32 "
             "without accumulation, a compiled mode (graph, xla) against eager, each with as many examples per "
             "step. Outcome, ratio mode / baseline of the medians over runs and its interval, compared as the "
             f"verdict compares frameworks (Welch's t interval on the log of one value per run, {CONFIDENCE:.0%}, over "
             "the pairs of runs made in the same repeat where they share a slowdown): "
             f"better or worse when the whole interval lies beyond ±{TIE_BAND:.0%}, equal when it lies wholly "
             "inside, unsettled otherwise or with one run a side (no interval). Throughput above 1× is faster; a "
             "memory increment or a time to target below 1× is smaller."]
    if any(max(m.looks, b.looks) > 1 for m, b in pairs if b is not None):
        notes.append("Adaptive repeats: an interval over runs made so is read at the level of the look reached "
                     "in their run's group-sequential design, as the verdict's are.")
    if busy:
        notes.append(f"{BUSY_MARK} rests on runs measured while other processes used more than "
                     f"{OTHER_WORK_SHARE:.0%} of the trial's cores during its steady steps (see Run conditions): its "
                     "timings are suspect. `bakeoff run --retry-busy` (same options) measures those runs again.")
    return Table(["mode", "against", "throughput", "training memory increment", f"{quality} (mode vs baseline)",
                  "time to target s (mode vs baseline)"], rows, notes, align="llllll")


def _values(name: str, a: ConfigSummary, b: ConfigSummary, never: str = "—") -> str:
    """``"0.79 vs 0.8"``: ``a``'s median against ``b``'s; ``never`` for a side that never got there."""
    def one(v: float | None) -> str:
        return never if v is not None and math.isinf(v) else fmt(v)

    return f"{one(a.value(name))} vs {one(b.value(name))}"


def _time_to_target(mode: ConfigSummary, base: ConfigSummary) -> str:
    """``"2.5 vs 3: unsettled 0.83x (0.71–0.97x)"``; with one side never there, no point ratio but the interval
    its runs allow (``"4.1 vs not reached: better (0–0.43x)"``); the values alone when neither side got there."""
    values = _values("time_to_target_s", mode, base, "not reached")
    a, b = mode.value("time_to_target_s"), base.value("time_to_target_s")
    if a is None or b is None or (math.isinf(a) and math.isinf(b)):
        return values
    d = against("time_to_target", mode, base)
    if math.isfinite(a) and math.isfinite(b):
        return f"{values}: {outcome_text(d)}"
    if d.low is None or d.high is None:
        return f"{values}: {d.outcome} (one run a side: no interval)"
    return f"{values}: {d.outcome} ({ratio_text(d.low, '')}–{ratio_text(d.high)})"


def _skipped_steps(c: ConfigSummary) -> str:
    """fp16's loss scaling over a configuration's trials: `` (loss scaling skipped k of n steps)``, or nothing
    when no trial scaled its loss. A skipped step trains nothing but is on the clock, as in the framework."""
    scaled = [t for t in c.trials if t.loss_scaling is not None]
    if not scaled:
        return ""
    skipped, steps = sum(t.loss_scaling.skipped_steps for t in scaled), sum(len(t.losses) for t in scaled)
    return f" (loss scaling skipped {skipped} of {steps} steps)"


def _batch_search_table(configs: Sequence[ConfigSummary]) -> Table | None:
    rows = []
    for c in configs:
        search = next((r.batch_search for r in c.trials if r.batch_search is not None), None)
        if search:
            peak = search.peak_memory_bytes
            tried = ", ".join(f"{p['batch_size']} {p['status']}" for p in search.probes)
            rows.append([c.label, str(search.batch_size), fmt(peak / MIB) if peak else "—", search.memory_kind,
                         tried])
    if not rows:
        return None
    return Table(["configuration", "batch size found", "peak memory MiB at it", "memory probe", "probes"], rows,
                 ["Each probe ran a few steps in its own process; the largest that stayed under the memory cap won."],
                 align="lrrll")


def _scores_table(decision: Decision) -> Table:
    criteria = list(decision.weights)
    best = {f.label for f in decision.ranking}
    header = ["configuration", "score", *criteria]
    rows = []
    for cs in sorted(decision.configs, key=lambda c: -c.score):
        mark = " ◀ judged by" if cs.label in best else ""
        parts = [fmt(cs.parts[c], 2) if cs.parts.get(c) is not None else "—" for c in criteria]
        rows.append([cs.label + mark, f"{cs.score:.3f}", *parts])
    notes = ["Each criterion is scaled to 0..1 against the best configuration (higher-better: v/best, lower-better: "
             "best/v; not reaching the target in most runs scores 0); a framework is judged by its best "
             "configuration (◀)."]
    return Table(header, rows, notes)


def _weights_table(decision: Decision, qualitative: Qualitative) -> Table:
    rows = []
    for c, given in decision.given.items():
        if c in MEASURED:
            kind, what = "measured", MEASURED[c].description
        elif c in deployment.CRITERIA:
            scores = {cfg.framework: cfg.parts.get(c) for cfg in decision.configs}
            kind, what = "measured (deployment)", f"{deployment.CRITERIA[c]}, 5 x best/v, /5: " + ", ".join(
                f"{display_name(fw)} {5 * v:.2g}" for fw, v in sorted(scores.items()) if v is not None)
        elif c in declared.CRITERIA and c not in qualitative:
            kind, what = declared.describe(c, decision)
        else:
            kind, what = "qualitative", "your score 0..5 per framework, /5: " + ", ".join(
                f"{display_name(fw)} {v:g}" for fw, v in sorted(qualitative.get(c, {}).items()))
        if c in decision.weights:
            used = f"{decision.weights[c]:.3f}"
        elif c in decision.excluded and given > 0:
            used = f"0 (excluded: {decision.excluded[c]})"
        else:
            used = "0"
        rows.append([c, kind, what, f"{given:g}", used])
    return Table(["criterion", "kind", "what it scores", "weight given", "weight used (normalised)"], rows,
                 align="lllrr")


def _robustness_blocks(decision: Decision) -> list[Block]:
    if not decision.sensitivity:
        return [Para("No sensitivity analysis: fewer than two frameworks have a score.")]
    shares = ", ".join(f"{display_name(fw)} leads in {percent(share)}" for fw, share in
                       sorted(decision.win_share.items(), key=lambda kv: -kv[1]))
    if decision.provisional and decision.runs:
        why = f"not robust: fewer than {MIN_RUNS} runs on a side (n = {decision.runs[0]} vs {decision.runs[1]})."
        if min(decision.runs) < 2:
            return [Para(f"No joint resampling: one run on a side has no spread to draw from. The verdict is {why}"),
                    _sensitivity_table(decision)]
    elif decision.robust:
        why = (f"robust: the leader leads in at least {ROBUST_SHARE:.0%} of them, its lead holds with every interval "
               f"at {ROBUST_CONFIDENCE:.0%}, no more than a third of either side's runs failed, none was measured on "
               "a busy machine, and it leads under every single weight halved or doubled.")
    elif any(decision.busy):
        why = (f"not robust {BUSY_MARK}: {decision.busy[0]} of the leader's and {decision.busy[1]} of the "
               f"runner-up's runs were measured while other processes used more than {OTHER_WORK_SHARE:.0%} of "
               "their cores (their timings are suspect, so no share of draws over them is evidence); `bakeoff run "
               "--retry-busy` measures them again.")
    else:
        why = (f"not robust: that needs a winner leading in at least {ROBUST_SHARE:.0%} of them, its lead holding "
               f"with every interval at {ROBUST_CONFIDENCE:.0%}, no more than a third of either side's runs failed, "
               "none measured on a busy machine, and every single weight halved or doubled.")
    joint = Para(f"Noise and weights together, over {decision.resamples:,} joint draws (for every configuration and "
                 "measured criterion, a plausible value from its runs: their geometric mean with Student-t noise of "
                 "its standard error, as the intervals assume; each weight scaled by its own log-uniform factor "
                 f"in [½, 2]): {shares}. The verdict is {why}" if shares else
                 "No joint resampling: there is no head-to-head comparison.")
    return [joint, _sensitivity_table(decision)]


def _sensitivity_table(decision: Decision) -> Table:
    def who(framework: str | None) -> str:
        return display_name(framework) if framework else "—"

    rows = [[r.criterion, f"{r.weight:.3f}", who(r.winner_if_zero), who(r.winner_if_halved),
             who(r.winner_if_doubled), f"×{r.flips_at:g} → {who(r.flips_to)}" if r.flips_at is not None else "never"]
            for r in decision.sensitivity]
    grid = "0, 0.1, 0.25, 0.5, 0.75, 1.25, 1.5, 2, 3 … 10"
    flips = any(r.winner_if_halved != decision.ranking[0].framework
                or r.winner_if_doubled != decision.ranking[0].framework for r in decision.sensitivity)
    notes = [f"One weight scaled at a time, the others fixed, then renormalised. \"flips at\": the multiplier "
             f"nearest ×1 on the grid {grid} at which another framework leads. "
             + ("Some weight halved or doubled changes the leader." if flips
                else "No single weight halved or doubled changes the leader.")]
    return Table(["criterion", "weight", "leader if ×0", "leader if ×0.5", "leader if ×2", "flips at"], rows, notes,
                 align="lrllll")


def _failures_block(configs: Sequence[ConfigSummary]) -> Block:
    rows = [[c.label, str(r.run_spec.seed), str(r.run_spec.repeat), r.status.value, short_reason(r.reason, 300)]
            for c in configs for r in c.trials if r.status is not Status.OK]
    if not rows:
        return Para("Every trial succeeded.")
    return Table(["configuration", "seed", "repeat", "status", "reason"], rows, align="lrrll")


def _flatten(env: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in env.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = str(v)
    return out


def environment_line(configs: Sequence[ConfigSummary]) -> str:
    """Every environment key the trials recorded; a key whose value differs lists each value with its framework.

    The load averages and the other work on a trial's cores, which differ from trial to trial, are in the
    run-conditions table instead.
    """
    seen: dict[str, dict[str, list[str]]] = {}  # key -> value -> frameworks
    for c in configs:
        for r in c.trials:
            for k, v in _flatten(r.environment).items():
                if k.startswith(("load_average", "cpu_sharing")):
                    continue
                frameworks = seen.setdefault(k, {}).setdefault(v, [])
                if c.framework not in frameworks:
                    frameworks.append(c.framework)
    parts = []
    for key, values in seen.items():
        if len(values) == 1:
            parts.append(f"{key} {next(iter(values))}")
        else:
            parts.append(f"{key} " + ", ".join(f"{v} ({'/'.join(fws)})" for v, fws in values.items()))
    return "Environment: " + (" · ".join(parts) if parts else "not recorded")


def _section(configs: Sequence[ConfigSummary], decision: Decision, qualitative: Qualitative,
             suites: Mapping[str, str], suite_files: Mapping[str, str] | None = None) -> list[Block]:
    warning = mix_warning(decision.mixes)
    scaling = scaling_sentence(scaling_rows(configs), configs)
    blocks: list[Block] = [
        Heading(2, f"{decision.workload} / {decision.preset}"),
        Para(decision.verdict, "verdict"),
        *([Para(scaling, "verdict")] if scaling else []),
        *([warning] if warning else []),
        *what_ran_blocks(configs, suites, suite_files),
        Heading(3, "Configurations"),
        _comparison_table(configs),
    ]
    for heading, table in (("Memory", _memory_table(configs)), ("Scaling", _scaling_table(configs)),
                           ("Run conditions", _conditions_table(configs)),
                           ("Head to head", _head_to_head_table(decision))):
        if table is not None:
            blocks += [Heading(3, heading), table]
    effects = _mode_effects_table(configs)
    if effects is not None:
        blocks += [Heading(3, "What each mode buys"), effects]
    searched = _batch_search_table(configs)
    if searched is not None:
        blocks += [Heading(3, "Batch-size search"), searched]
    if decision.configs:
        blocks += [Heading(3, "Scores (every mode)"), _scores_table(decision)]
    blocks += [Heading(3, "Weights"), _weights_table(decision, qualitative),
               Heading(3, "Robustness of the verdict"), *_robustness_blocks(decision),
               Heading(3, "Trials that did not succeed"), _failures_block(configs),
               Details("Environment", [Para(environment_line(configs), "env")])]
    return blocks


def render_report(results: Sequence[TrialResult], out_dir: Path, weights: Mapping[str, float] | None = None,
                  qualitative: Qualitative | None = None, title: str = "bakeoff report",
                  suites: Mapping[str, str] | None = None,
                  decisions: Mapping[tuple[str, str], Decision] | None = None,
                  deployments: Sequence[Mapping[str, Any]] = (),
                  declared_section: Sequence[Block] = (), plan_section: Sequence[Block] = (),
                  covers: str = "", suite_files: Mapping[str, str] | None = None,
                  again: str = "bakeoff report") -> dict[str, Path]:
    """Write ``report.md``, ``report.html``, ``throughput.png`` and ``quality_vs_time.png`` into ``out_dir``.

    Args:
        results: every trial, any mix of workloads, presets, configurations and statuses.
        out_dir: created if missing; existing report files in it are overwritten.
        weights: criterion -> weight, merged over :data:`bakeoff.analysis.decide.DEFAULT_WEIGHTS`.
        qualitative: ``{criterion: {framework: 0..5}}`` for criteria that cannot be measured.
        title: the report's heading.
        suites: trial key -> the suite it was stored under, for the ``bakeoff run --suite NAME`` line of "Reproduce"
            (a result's ``execution.suite`` is read when a key is missing).
        decisions: :func:`bakeoff.analysis.decide.decide_each` of these results with these weights, when the caller
            already has them (the bootstrap is not run twice); computed here otherwise.
        deployments: stored deployment rows (:meth:`bakeoff.results.store.Store.deployments`) for the Deployment
            section.
        declared_section: the "Declared criteria" section (:func:`bakeoff.report.declared.blocks`), before Deployment.
        plan_section: the "Capacity plan" section (:func:`bakeoff.report.capacity.blocks`), before Claims.
        covers: what the results are, when they are more than one command's (the report's first sentence).
        suite_files: suite name -> the file it was read from, as the store recorded it (the "Reproduce" line).
        again: the command that writes this report again, for the error when the disk is full (the store and
            folder the user gave, not the defaults).

    Returns:
        ``{"markdown", "html", "throughput", "quality_vs_time"}`` (and ``"scaling"`` when distributed trials
        ran) -> the path written.
    """
    out_dir = report_folder(out_dir)
    qualitative = qualitative or {}
    summaries = summarise_groups(results)
    if decisions is None:
        decisions = decide_each(summaries, weights, qualitative)
    groups = {key: [s for s in summaries if (s.workload, s.preset) == key] for key in decisions}

    images = {"throughput": Image("throughput.png", "steady throughput per configuration",
                                  plots.throughput_png(groups)),
              "quality_vs_time": Image("quality_vs_time.png", "quality against training time, one line per trial",
                                       plots.quality_png(groups))}
    scaled = {key: rows for key, configs in groups.items() if (rows := scaling_rows(configs))}
    if scaled:
        images["scaling"] = Image("scaling.png", "throughput and scaling efficiency against replicas",
                                  plots.scaling_png(scaled))
    n_ok = sum(r.status is Status.OK for r in results)
    blocks: list[Block] = [Para(f"{covers} {len(results)} trials ({n_ok} successful) in {len(summaries)} "
                                f"configurations on {len(decisions)} workload/preset "
                                f"pair{'s' if len(decisions) != 1 else ''}.".lstrip())]
    blocks += card.blocks(card.build(decisions, summaries))
    blocks += [Heading(2, "Plots"), *images.values()]
    for key, decision in decisions.items():
        blocks += _section(groups[key], decision, qualitative, suites or {}, suite_files)
    blocks += [*declared_section, *deployment.blocks(deployments), *plan_section]
    blocks += claims.section(results, deployments)

    paths = {"markdown": out_dir / "report.md", "html": out_dir / "report.html"}
    contents = {"markdown": to_markdown(title, blocks).encode(), "html": to_html(title, blocks).encode()}
    for name, image in images.items():
        paths[name], contents[name] = out_dir / image.filename, image.png
    write_all({paths[name]: data for name, data in contents.items()}, again)
    return paths


def report_folder(out_dir: Path | str) -> Path:
    """``out_dir``, created if missing; a clear error when it is a file or cannot be made."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise SpecError(f"--out {out_dir} is a file; a report is a folder (report.html, report.md, its plots): "
                        "name a folder")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"cannot create the report folder {out_dir}: {exc.strerror or exc}") from None
    return out_dir


def write_all(files: dict[Path, bytes], again: str = "bakeoff report") -> None:
    """Write every file or none: each to a temporary beside it first, then all renamed into place, so a full disk
    leaves the previous report as it was, not half of a new one; the error names ``again``, the command that
    writes them again."""
    written: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            temporary = path.with_name(f".{path.name}.part")
            written.append((temporary, path))
            temporary.write_bytes(data)
    except OSError as exc:
        for temporary, _ in written:
            temporary.unlink(missing_ok=True)
        folder = next(iter(files)).parent
        raise SpecError(f"could not write the report in {folder} ({exc.strerror or exc}); nothing in it was "
                        f"replaced: make room and run `{again}`") from None
    for temporary, path in written:
        temporary.replace(path)
