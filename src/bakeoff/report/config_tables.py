"""The report's tables of measured values for one (workload, preset), one row per configuration: Configurations
(every quantity of :data:`~bakeoff.analysis.quantities.QUANTITIES` in the "configurations" table, noisy values
marked, missing ones explained in footnotes, with the MFU, energy and graph-build notes), Memory, Scaling, Run
conditions (threads, machine load) and the batch-size search. Called by :mod:`bakeoff.report.render`, which orders
the sections."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bakeoff.analysis.bootstrap import CONFIDENCE, RESAMPLES
from bakeoff.analysis.conditions import (
    BUSY_MARK,
    LOAD_GAP_PER_CORE,
    busy_runs,
    config_load,
    loaded,
    other_work,
    threads,
)
from bakeoff.analysis.mixing import batch_text
from bakeoff.analysis.quantities import MIB, QUANTITIES, Quantity
from bakeoff.analysis.scaling import SCALING_COLUMNS, scaling_cells, scaling_rows
from bakeoff.analysis.stats import NOISY_THRESHOLD, ConfigSummary, fmt
from bakeoff.core.spec import Status
from bakeoff.measure import energy
from bakeoff.measure.ceiling import PRECISIONS, REPEATS, SIZE, size_note
from bakeoff.measure.environment import OTHER_WORK_SHARE
from bakeoff.report.templates import Table

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


def _header(q: Quantity, configs: Sequence[ConfigSummary]) -> str:
    """A column's header: the quantity's short one (:attr:`~bakeoff.analysis.quantities.Quantity.header`; what it
    means, with its unit, is in the legend under the table), else its full title."""
    return (q.header.format(metric=configs[0].metric_name or "metric") if q.header is not None
            else _title(q, configs))


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


def comparison_table(configs: Sequence[ConfigSummary]) -> Table:
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


def memory_table(configs: Sequence[ConfigSummary]) -> Table | None:
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


def scaling_table(configs: Sequence[ConfigSummary]) -> Table | None:
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


def conditions_table(configs: Sequence[ConfigSummary]) -> Table | None:
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


def batch_search_table(configs: Sequence[ConfigSummary]) -> Table | None:
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
