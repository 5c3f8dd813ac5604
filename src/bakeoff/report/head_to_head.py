"""The report's comparisons of one configuration against another for one (workload, preset): the head-to-head table
(the leader against the runner-up, per criterion, with its interval and outcome) and "What each mode buys" (each
mixed-precision, accumulation or compiled mode against its baseline in the same framework). Called by
:mod:`bakeoff.report.render`, which orders the sections."""

from __future__ import annotations

import math
from collections.abc import Sequence

from bakeoff.analysis.bootstrap import CONFIDENCE, TIE_BAND
from bakeoff.analysis.conditions import BUSY_MARK, busy_runs, display_name
from bakeoff.analysis.decide import Decision, against
from bakeoff.analysis.intervals import BLOCK_LEVEL
from bakeoff.analysis.quantities import QUANTITIES, Quantity
from bakeoff.analysis.stats import ConfigSummary, fmt
from bakeoff.analysis.verdict import interval_text, outcome_text, ratio_text
from bakeoff.measure.environment import OTHER_WORK_SHARE
from bakeoff.report.templates import Table


def head_to_head_table(decision: Decision) -> Table | None:
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


def mode_effects_table(configs: Sequence[ConfigSummary]) -> Table | None:
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
