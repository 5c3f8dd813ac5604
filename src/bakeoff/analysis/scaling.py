"""Scaling: throughput against the number of replicas, per framework and strategy, and what synchronising costs.

For each distributed configuration, its **baseline** is the same configuration (workload, preset, framework, mode,
precision, global batch, accumulation, budget, data) with one replica: the same strategy at ``workers = 1`` when
that ran (the strategy's own overhead is then in both), else the single-device trial (``parallelism = none``).

* **scaling efficiency** = throughput(N) / (N × throughput(baseline)), medians over repeats, with a 95% bootstrap
  interval from the two configurations' replicates (at two runs a side at least: none from one run's steps). The
  global batch is the same at every N (each replica takes
  ``batch / N``), so this is strong scaling: 1.0 is linear speed-up.
* **all-reduce alone / step** = one optimizer step's gradient synchronisation, timed alone after training, over
  the steady step, by one method in every framework (:mod:`bakeoff.measure.sync`: the step's reductions, gradients
  and loss totals, blocking, from a barrier, median of 20 after 3 untimed; each engine says what its call ran in
  ``TrialResult.distributed.sync["method"]``). In training
  the frameworks overlap it with the backward pass (DDP's buckets, XLA's scheduling), so it is what
  synchronisation costs when nothing hides it; what it adds to a training step was not measured (overlap can hide
  some of it, contention for the cores can add to it), so it is not a share of the step.
* **parameter servers** are not strong scaling: each step is one whole global batch, run on whichever worker is
  free, up to one step per worker in flight (asynchronous updates). Their efficiency is N workers' throughput
  against N times one device's; their "sync" is a pull and push of every variable, timed alone, and has no share
  of a step (steps overlap).
* **start-up** = process launch + framework import + rendezvous and strategy set-up, before the first step, apart
  from training.

With more replicas than cores, replicas share cores: the efficiency then measures overhead, not speed-up, and
:func:`scaling_sentence` says so.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import numpy as np

from bakeoff.analysis.bootstrap import percentile_interval
from bakeoff.analysis.conditions import FRAMEWORK_NAMES, cores
from bakeoff.analysis.quantities import fmt
from bakeoff.analysis.stats import ConfigSummary
from bakeoff.analysis.verdict import MIN_RUNS
from bakeoff.core import frameworks
from bakeoff.core.result import Distributed
from bakeoff.core.spec import Parallelism

STRATEGY_NAMES = {(name, parallelism.value): strategy for name, info in frameworks.FRAMEWORKS.items()
                  for parallelism, strategy in info.strategies.items()}


def strategy_name(framework: str, parallelism: str) -> str:
    """What users call the strategy: ``("torch", "data_parallel")`` -> ``"DDP"``."""
    if parallelism == "none":
        return "single device"
    return STRATEGY_NAMES.get((framework, parallelism), parallelism)


@dataclasses.dataclass
class ScalingRow:
    """One distributed configuration against its one-replica baseline."""

    config: ConfigSummary
    baseline: ConfigSummary | None
    framework: str
    parallelism: str
    workers: int
    efficiency: float | None
    efficiency_interval: tuple[float, float] | None
    replicas_identical: bool | None  # every run's replicas identical (None: not checked, one replica)
    allreduces_per_step: float | None
    sync_method: str  # what the framework's timed call ran (the whole method for results stored before one method)
    warnings: list[str]
    xla_scope: str = ""  # what XLA compiled under the strategy, when less than the whole step
    sync_definition: str = ""  # the method common to every framework (bakeoff.measure.sync), when recorded

    @property
    def strategy(self) -> str:
        return strategy_name(self.framework, self.parallelism)


def _identity(c: ConfigSummary, *, drop: tuple[str, ...] = ("parallelism", "workers"), **fixed: object) -> str:
    """The configuration without the ``drop``ped fields (a baseline shares everything else with it), with
    ``fixed`` fields set (``grad_accum=1``: the configuration an accumulating one is compared with)."""
    spec = c.trials[0].run_spec
    raw = {k: v for k, v in spec.to_dict().items() if k not in ("seed", "repeat", "content", *drop)}
    raw["content"] = {k: v for k, v in spec.content if k.startswith("data:")}
    return json.dumps({**raw, **fixed}, sort_keys=True, default=str)


def accumulation_sentence(rows: Sequence[ScalingRow]) -> str | None:
    """How accumulating k micro-batches per optimizer step changes the share of the step spent synchronising
    gradients, for each distributed configuration that ran with and without accumulation."""
    plain = {_identity(r.config, drop=()): r for r in rows if r.config.trials[0].run_spec.grad_accum == 1}
    parts = []
    for r in rows:
        k = r.config.trials[0].run_spec.grad_accum
        other = plain.get(_identity(r.config, drop=(), grad_accum=1)) if k > 1 else None
        if other is None:
            continue
        a, b = other.config.value("sync_share"), r.config.value("sync_share")
        if a is None or b is None:
            continue
        n = r.allreduces_per_step
        rounds = f", {fmt(n)} all-reduce{'' if n == 1 else 's'} per step" if n is not None else ""
        parts.append(f"{FRAMEWORK_NAMES.get(r.framework, r.framework)} {r.strategy} at {r.workers} replicas: "
                     f"{_pct(a)} with 1 micro-batch per step, {_pct(b)} with {k}{rounds}")
    if not parts:
        return None
    return ("One step's gradient all-reduce timed alone, against the step, accumulating micro-batches: "
            + "; ".join(parts) + ".")


def _spec_of(c: ConfigSummary) -> tuple[str, int]:
    spec = c.trials[0].run_spec
    return spec.parallelism.value, spec.workers


def _efficiency(c: ConfigSummary, base: ConfigSummary, workers: int
                ) -> tuple[float | None, tuple[float, float] | None]:
    v, b = c.value("examples_per_s"), base.value("examples_per_s")
    if v is None or not b:
        return None, None
    value = v / (workers * b)
    if c.n_ok >= 2 and base.n_ok >= 2:  # one run a side: its steps' spread is no interval over runs
        reps = c.replicates("examples_per_s") / (workers * base.replicates("examples_per_s"))
        return value, percentile_interval(reps[np.isfinite(reps)])
    return value, None


def _xla_scope(c: ConfigSummary) -> str:
    """What XLA compiled in this configuration's trials when it was not the whole step ('' otherwise)."""
    scopes = {r.distributed.xla_scope for r in c.ok if r.distributed is not None}
    return "; ".join(sorted(s for s in scopes if s and s != "whole step"))


def _figures(c: ConfigSummary) -> tuple[bool | None, float | None, str, str, list[str]]:
    identical, allreduces, hows, definitions, warnings = [], [], set(), set(), []
    for r in c.ok:
        dist = r.distributed or Distributed()
        if dist.replicas_identical is not None:
            identical.append(bool(dist.replicas_identical))
        sync = dist.sync
        if isinstance(sync.get("allreduces_per_step"), int | float):
            allreduces.append(float(sync["allreduces_per_step"]))
        if sync.get("how") or sync.get("method"):
            hows.add(str(sync.get("how") or sync["method"]))
        if sync.get("definition"):
            definitions.add(str(sync["definition"]))
        warnings += [w for w in dist.warnings if w not in warnings]
    return (all(identical) if identical else None, float(np.median(allreduces)) if allreduces else None,
            "; ".join(sorted(hows)), "; ".join(sorted(definitions)), warnings)


def scaling_rows(configs: Sequence[ConfigSummary]) -> list[ScalingRow]:
    """Every distributed configuration of one (workload, preset), with its baseline and efficiency; sorted by
    framework, strategy, mode and replicas."""
    by_base: dict[str, dict[tuple[str, int], ConfigSummary]] = {}
    for c in configs:
        by_base.setdefault(_identity(c), {})[_spec_of(c)] = c
    rows = []
    for group in by_base.values():
        for (parallelism, workers), c in group.items():
            if parallelism == Parallelism.NONE.value:
                continue
            single = group.get((Parallelism.NONE.value, 1))
            base = single if workers == 1 else group.get((parallelism, 1)) or single
            eff, interval = _efficiency(c, base, workers) if base is not None else (None, None)
            identical, allreduces, how, definition, warnings = _figures(c)
            rows.append(ScalingRow(c, base, c.framework, parallelism, workers, eff, interval, identical,
                                   allreduces, how, warnings, _xla_scope(c), definition))
    return sorted(rows, key=lambda r: (r.framework, r.parallelism, r.config.label, r.workers))


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%" if abs(x) >= 0.1 else f"{fmt(100 * x, 2)}%"


def _runs(r: ScalingRow) -> str:
    """``n = 3 vs 3`` (the configuration's runs and its baseline's), provisional below the verdict's minimum."""
    n = (r.config.n_ok, r.baseline.n_ok if r.baseline is not None else 0)
    text = f"n = {n[0]} vs {n[1]}"
    return f"provisional ({text}; {MIN_RUNS} runs per side needed)" if min(n) < MIN_RUNS else text


def scaling_sentence(rows: Sequence[ScalingRow], configs: Sequence[ConfigSummary]) -> str | None:
    """The verdict's line on scaling: each framework's strategies at their largest replica count, with efficiency
    and the all-reduce timed alone, and what shared cores mean for the figures. ``None`` without distributed trials."""
    measured = [r for r in rows if r.efficiency is not None]
    if not measured:
        return None
    top: dict[tuple[str, str], ScalingRow] = {}
    for r in measured:
        key = (r.framework, r.parallelism)
        if key not in top or (r.workers, r.config.n_ok) > (top[key].workers, top[key].config.n_ok):
            top[key] = r
    parts = []
    for r in top.values():
        share = r.config.value("sync_share")
        interval = (f" (95% CI {_pct(r.efficiency_interval[0])}–{_pct(r.efficiency_interval[1])})"
                    if r.efficiency_interval else "")
        sync = f", one step's gradient all-reduce timed alone {_pct(share)} of a step" if share is not None else ""
        if r.parallelism == Parallelism.PARAMETER_SERVER.value:
            sync = ", each worker taking whole global batches, steps in flight at once (not strong scaling)"
        base = "one replica" if r.baseline and _spec_of(r.baseline)[0] != "none" else "one device"
        parts.append(f"{FRAMEWORK_NAMES.get(r.framework, r.framework)} {r.strategy} ({r.config.execution}) at "
                     f"{r.workers} replicas runs at {_pct(r.efficiency)} scaling efficiency against {base}"
                     f"{interval}{sync}, {_runs(r)}")
    sentence = "Scaling: " + "; ".join(parts) + "."
    n_cores = cores(list(configs))
    most = max(r.workers for r in measured)
    if n_cores is not None and most >= n_cores:
        sentence += (f" On {n_cores} CPU cores shared by {most} replicas, efficiency measures the frameworks' "
                     "distribution overhead more than speed-up.")
    accumulation = accumulation_sentence(rows)
    if accumulation:
        sentence += " " + accumulation
    partial = sorted({r.config.label for r in rows if r.xla_scope})
    if partial:
        sentence += (f" XLA compiled less than the whole step in {', '.join(partial)} (see the scaling table), "
                     "unlike XLA on one device: not the same compiled scope.")
    if any(r.replicas_identical is False for r in rows):
        sentence += " Some runs ended with replicas holding different weights (see the scaling table)."
    return sentence


def scaling_cells(r: ScalingRow) -> list[str]:
    """The scaling table's row for ``r`` (see :data:`SCALING_COLUMNS`)."""
    c = r.config

    def shown(name: str, scale: float = 1.0, digits: int = 3) -> str:
        v = c.value(name)
        return fmt(v * scale, digits) if v is not None else "—"

    thr = c.get("examples_per_s")
    spread = f" ({fmt(thr.min)}–{fmt(thr.max)})" if thr is not None and thr.n > 1 else ""
    eff = _pct(r.efficiency) + (f" ({_pct(r.efficiency_interval[0])}–{_pct(r.efficiency_interval[1])})"
                                if r.efficiency_interval else "")
    base = r.baseline.label if r.baseline is not None else "— (no one-replica run)"
    identical = {True: "yes", False: "**no**", None: "—"}[r.replicas_identical]
    return [c.label, r.strategy, str(r.workers), f"{shown('examples_per_s')}{spread}", eff, base,
            shown("sync_s", 1000), shown("sync_share", 100, 2),
            fmt(r.allreduces_per_step) if r.allreduces_per_step is not None else "—", shown("startup_s"),
            shown("worker_peak_memory_bytes", 1 / 2**20), identical, f"{c.n_ok}/{c.n_total}"]


SCALING_COLUMNS = ["configuration", "strategy", "replicas", "examples/s (range)", "scaling efficiency (95% CI)",
                   "baseline", "all-reduce alone (ms)", "all-reduce alone / step (%)", "all-reduces per step",
                   "start-up (s)",
                   "largest worker peak (MiB)", "replicas identical", "runs ok"]
