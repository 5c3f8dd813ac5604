"""Robust summaries of repeated measurements, and per-configuration summaries with bootstrap replicates.

A :class:`Summary` is order statistics (median, quartiles), because timing samples are skewed by stragglers and a
handful of repeats cannot support a normal model. A :class:`ConfigSummary` holds, per quantity of
:data:`bakeoff.analysis.quantities.QUANTITIES`, that summary, the value decisions use (the median over runs, a
never-reached target counting as +∞) and, on demand, bootstrap replicates (:mod:`bakeoff.analysis.bootstrap`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from bakeoff.analysis.bootstrap import RESAMPLES, Resampler, percentile_interval, rng_for
from bakeoff.analysis.quantities import QUANTITIES, Quantity, common_budget, fmt, quantity, steady_steps
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec, Status

__all__ = ["HASH_CHARS", "NOISY_THRESHOLD", "ConfigSummary", "Summary", "fmt", "group_results", "short_hash",
           "short_reason", "summarise", "summarise_groups"]

NOISY_THRESHOLD = 0.10
"""A sample whose relative spread across runs exceeds this is flagged noisy."""


@dataclasses.dataclass(frozen=True)
class Summary:
    """Order statistics of one quantity over repeated trials. ``values`` keeps every sample, sorted."""

    n: int
    median: float
    q1: float
    q3: float
    min: float
    max: float
    rel_spread: float  # IQR / median, or (max - min) / median when n < 4; 0 for n == 1
    noisy: bool  # rel_spread > NOISY_THRESHOLD
    values: tuple[float, ...]

    @property
    def interval(self) -> tuple[float, float]:
        """The spread across runs: q1–q3, or min–max when n < 4."""
        return (self.q1, self.q3) if self.n >= 4 else (self.min, self.max)


def _clean(values: Sequence[float | None]) -> list[float]:
    return sorted(float(v) for v in values if v is not None and math.isfinite(float(v)))


def summarise(values: Sequence[float | None]) -> Summary | None:
    """Summarise samples, ignoring ``None``, NaN and infinities; ``None`` when nothing is left.

    Quartiles are numpy's linear interpolation. With fewer than four samples the quartiles say little, so the
    spread is the full range instead.
    """
    xs = _clean(values)
    if not xs:
        return None
    arr = np.asarray(xs)
    median = float(np.median(arr))
    q1, q3 = (float(q) for q in np.percentile(arr, [25, 75]))
    width = (q3 - q1) if len(xs) >= 4 else (xs[-1] - xs[0])
    if len(xs) == 1 or width == 0:
        rel = 0.0
    else:
        rel = width / abs(median) if median != 0 else math.inf
    return Summary(n=len(xs), median=median, q1=q1, q3=q3, min=xs[0], max=xs[-1], rel_spread=rel,
                   noisy=rel > NOISY_THRESHOLD, values=tuple(xs))


# ---------------------------------------------------------------------------------------------------------------
# Per-configuration summaries

UNFINISHED = (Status.FAILED, Status.TIMEOUT, Status.OUT_OF_MEMORY)
"""Runs that started and did not finish: for a censored quantity (time to target) each counts as never."""

_STATUS_WORDS = {Status.FAILED: "failed", Status.TIMEOUT: "timed out", Status.OUT_OF_MEMORY: "ran out of memory",
                 Status.UNSUPPORTED: "unsupported"}


def short_reason(reason: str, limit: int = 160) -> str:
    """The informative line of a reason (a traceback's last line), capped at ``limit`` characters."""
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()]
    text = lines[-1] if lines else "no reason given"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _counted(q: Quantity, trials: Sequence[TrialResult], target: float | None,
             budget: float | None) -> list[tuple[TrialResult, float, float | None]]:
    ok = [r for r in trials if r.status is Status.OK]
    counted = ok + ([r for r in trials if r.status in UNFINISHED] if q.censored and target is not None else [])
    return [(r, math.inf if r.status is not Status.OK else v, (q.bound(r) if q.bound else None)) for r in counted
            if r.status is not Status.OK or (v := q.value(r, budget)) is not None]


def run_values(q: Quantity, trials: Sequence[TrialResult], target: float | None,
               budget: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One value of ``q`` per run of ``trials``, as verdicts compare them, and each run's lower bound where it is
    censored: the successful runs that measured it; for a censored quantity with a ``target`` also every unfinished
    run, as never (+∞, bound unknown unless it recorded its training time)."""
    values, bounds, _ = runs_by_repeat(q, trials, target, budget)
    return values, bounds


def runs_by_repeat(q: Quantity, trials: Sequence[TrialResult], target: float | None,
                   budget: float | None = None) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """:func:`run_values` and which repeat each run was made in, in the same order: (repeat, seed) of its spec.
    Within a repeat the frameworks take turns (:mod:`bakeoff.plan.order`), so two configurations' runs of one
    repeat were made side by side, on the machine as it was then."""
    counted = _counted(q, trials, target, budget)
    values = np.array([v for _, v, _ in counted], dtype=float)
    bounds = np.array([math.nan if b is None else float(b) for _, _, b in counted], dtype=float)
    return values, bounds, [(int(r.spec.get("repeat", 0)), int(r.spec.get("seed", 0))) for r, _, _ in counted]


@dataclasses.dataclass
class ConfigSummary:
    """Every repeat and seed of one configuration (workload, preset, :meth:`RunSpec.label`), summarised.

    Per quantity: :meth:`get` (order statistics of the finite values), :meth:`value` (what decisions use) and
    :meth:`replicates` (the bootstrap). A quantity nobody measured has no summary; :attr:`missing` says why.
    """

    workload: str
    preset: str
    label: str
    framework: str
    execution: str
    n_ok: int
    n_total: int
    statuses: dict[str, int]
    reasons: list[str]  # "2 trials failed: <reason>", one line per distinct (status, reason)
    summaries: dict[str, Summary | None]  # quantity -> summary of its finite values over the successful trials
    values: dict[str, float | None]  # quantity -> median over the successful trials, never reached = +inf
    reached: int  # successful trials that reached the target
    metric_name: str
    target: float | None
    higher_is_better: bool  # of the quality metric
    memory_kind: str
    budget_examples: float | None  # the common budget quality is read at (see quantities.common_budget)
    missing: dict[str, str]  # quantity -> why it has no value
    trials: list[TrialResult]
    _resampler: Resampler | None = dataclasses.field(default=None, repr=False, compare=False)
    _replicates: dict[str, np.ndarray] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def get(self, name: str) -> Summary | None:
        """Order statistics of ``name`` over the successful trials that measured it (reached, if censored)."""
        quantity(name)
        return self.summaries[name]

    def value(self, name: str) -> float | None:
        """The value decisions use: the median over successful trials, a never-reached target counting as +inf."""
        quantity(name)
        return self.values[name]

    @property
    def ok(self) -> list[TrialResult]:
        return [r for r in self.trials if r.status is Status.OK]

    @property
    def unfinished(self) -> list[TrialResult]:
        """Runs that failed, timed out or ran out of memory (:data:`UNFINISHED`)."""
        return [r for r in self.trials if r.status in UNFINISHED]

    @property
    def looks(self) -> int:
        """How many times the run that made these trials could look at the verdict before stopping: 1, or with
        adaptive repeats (``--repeats auto``) what each trial recorded (``adaptive_repeats.looks``)."""
        return max((r.adaptive_repeats.looks if r.adaptive_repeats else 1 for r in self.trials), default=1)

    @property
    def plan(self) -> tuple[int, int] | None:
        """(first, most) runs a side of the adaptive run that made these trials, as they recorded it; ``None`` for
        fixed repeats, or runs recorded before the plan was (their looks alone: :attr:`looks`)."""
        plans = [(p.first, p.max) for r in self.trials
                 if (p := r.adaptive_repeats) is not None and p.first is not None and p.max is not None]
        return max(plans, key=lambda plan: (plan[1], -plan[0])) if plans else None

    def runs(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """One value per run, as the verdict compares them, and each run's lower bound where it is censored.

        The successful runs that measured ``name``; for a censored quantity (time to target, with a target set)
        also every unfinished run, as never (+∞, bound unknown unless it recorded its training time).
        """
        return run_values(quantity(name), self.trials, self.target, self.budget_examples)

    def runs_by_repeat(self, name: str) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
        """:meth:`runs` and the repeat (and seed) each was made in (:func:`runs_by_repeat`)."""
        return runs_by_repeat(quantity(name), self.trials, self.target, self.budget_examples)

    def replicates(self, name: str) -> np.ndarray:
        """:data:`~bakeoff.analysis.bootstrap.RESAMPLES` bootstrap replicates of :meth:`value`, seeded by the
        configuration's name (the same results always give the same replicates)."""
        if name not in self._replicates:
            if self._resampler is None:
                self._resampler = Resampler(self.ok, rng_for(self.workload, self.preset, self.label), RESAMPLES)
            self._replicates[name] = self._resampler.replicates(quantity(name), self.budget_examples)
        return self._replicates[name]

    def interval(self, name: str) -> tuple[float, float] | None:
        """The 95% bootstrap interval of :meth:`value`; ``None`` when it has none."""
        if self.values[name] is None:
            return None
        return percentile_interval(self.replicates(name))

    def title(self, name: str) -> str:
        """The quantity's label with this workload's metric, target and budget filled in."""
        return quantity(name).title(self.metric_name, self.target, self.budget_examples)

    def higher(self, name: str) -> bool:
        """Whether higher is better for ``name`` here (metric quantities: the workload's direction)."""
        return quantity(name).higher(self.higher_is_better)


HASH_CHARS = 8
"""Characters of a content hash shown to people (16 are stored)."""


def short_hash(value: str) -> str:
    """``"0.1.0+9f8e7d6c5b4a3210"`` -> ``"0.1.0+9f8e7d6c"``; a bare hash -> its first :data:`HASH_CHARS`."""
    head, plus, tail = value.rpartition("+")
    return f"{head}+{tail[:HASH_CHARS]}" if plus else value[:HASH_CHARS]


def _comparable(spec: RunSpec) -> dict[str, Any]:
    """The spec as configurations are told apart: without seed and repeat, a data option whose file content is
    hashed counted by that hash (as :meth:`RunSpec.key` does: one file through two paths is one configuration),
    and the content entries as fields of their own: ``data:train`` and ``bakeoff`` (short hashes),
    ``config_hash`` (of the resolved configuration) and ``torch_version``."""
    raw = {k: v for k, v in spec.to_dict().items() if k not in ("seed", "repeat", "content")}
    content = dict(spec.content)
    raw["data"] = {k: v for k, v in spec.data if f"data:{k}" not in content}
    for k, v in content.items():
        if k.startswith("data:") or k == "bakeoff":
            raw[k] = short_hash(v)
        elif k == "config":
            raw["config_hash"] = short_hash(v)
        else:  # a framework: "torch 2.13.0+cpu"
            raw[f"{k}_version"] = v.removeprefix(f"{k} ")
    return raw


def _identity(spec: RunSpec) -> str:
    """What makes a configuration (see :func:`_comparable`)."""
    return json.dumps(_comparable(spec), sort_keys=True, default=str)


def distinct_labels(specs: Sequence[RunSpec]) -> list[str]:
    """:meth:`RunSpec.label` of each spec, extended with ``field=value`` for the fields (and data options) that
    tell apart configurations sharing a label: ``torch/graph/batching=bucket``, ``torch/eager/batch_size=16``,
    ``torch/eager/data:train=1a2b3c4d`` (another file content), ``torch/eager/bakeoff=0.1.0+9f8e7d6c``."""
    dicts = [{k: v for k, v in _comparable(s).items() if k != "data"} for s in specs]
    data = [_comparable(s)["data"] for s in specs]
    fields = [k for k in dict.fromkeys(k for d in dicts for k in d)
              if len({json.dumps(d.get(k), default=str) for d in dicts}) > 1]
    if len(fields) > 1 and "config_hash" in fields:  # the overrides or the version that changed it say more
        fields.remove("config_hash")
    options = sorted({k for d in data for k in d if len({d.get(k) for d in data}) > 1})
    labels = []
    for spec, d, opts in zip(specs, dicts, data, strict=True):
        extra = [f"{k}={d.get(k, '(none)')}" for k in fields] + [f"{k}={opts.get(k, '(default)')}" for k in options]
        labels.append("/".join([spec.label(), *extra]))
    return labels


def data_set(spec: RunSpec) -> str:
    """The data a trial trained and was tested on, by content: ``"train 1a2b3c4d, test 9f8e7d6c"`` (the short hash
    of each file a data option names), or ``"shipped data"``."""
    content = dict(spec.content)
    hashed = [f"{k} {short_hash(content[f'data:{k}'])}" for k, _ in spec.data if f"data:{k}" in content]
    return ", ".join(hashed) or "shipped data"


def section_preset(spec: RunSpec, data_sets: int) -> str:
    """A section's preset as reports and verdicts name it: the preset, with the overrides of its fields the trials
    trained (``"tiny (d_model=128, num_layers=2)"``: another model, another section), and the data set when the
    results of this model hold more than one (``"tiny · data train 1a2b3c4d"``)."""
    preset = spec.preset_title()
    return preset if data_sets < 2 else f"{preset} · data {data_set(spec)}"


def section_order(section: tuple[str, str]) -> tuple[str, list[str | int]]:
    """A (workload, section preset) sort key in reading order: numbers in the preset's overrides compare as numbers,
    so a model's sizes read smallest first (``d_ff=256`` before ``d_ff=1024``)."""
    workload, preset = section
    return workload, [int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", preset))]


def sections(summaries: Iterable[ConfigSummary]) -> list[tuple[str, str]]:
    """The (workload, section preset) sections of ``summaries``, each once, in :func:`section_order`."""
    return sorted({(s.workload, s.preset) for s in summaries}, key=section_order)


def group_results(results: Sequence[TrialResult]) -> dict[tuple[str, str, str], list[TrialResult]]:
    """Results keyed by (workload, section preset, configuration label), so repeats and seeds share a group; in
    :func:`section_order`, then by label.

    A configuration is everything in the spec but seed and repeat; configurations that :meth:`RunSpec.label`
    alone cannot tell apart (two batch sizes, padded against bucketed batches) get the differences in the label.
    Results that trained different models or data are never one comparison: a preset with other overrides of its
    fields (``--set``, a suite's ``config``) and each data set (files of different content) are sections of their
    own, their preset naming the overrides and the data (:func:`section_preset`), each with its own target and
    verdict.
    """
    sets: dict[str, set[str]] = {}
    for r in results:
        sets.setdefault(r.run_spec.model(), set()).add(data_set(r.run_spec))
    by_identity: dict[str, list[TrialResult]] = {}
    for r in results:
        by_identity.setdefault(_identity(r.run_spec), []).append(r)
    by_label: dict[tuple[str, str, str], list[list[TrialResult]]] = {}
    for trials in by_identity.values():
        spec = trials[0].run_spec
        preset = section_preset(spec, len(sets[spec.model()]))
        by_label.setdefault((spec.workload, preset, spec.label()), []).append(trials)
    groups: dict[tuple[str, str, str], list[TrialResult]] = {}
    for (workload, preset, label), clashing in by_label.items():
        labels = distinct_labels([t[0].run_spec for t in clashing]) if len(clashing) > 1 else [label]
        for name, trials in zip(labels, clashing, strict=True):
            groups[(workload, preset, name)] = trials
    return dict(sorted(groups.items(), key=lambda kv: (section_order(kv[0][:2]), kv[0][2])))


def _failure_lines(trials: Sequence[TrialResult]) -> list[str]:
    counts = Counter((r.status, short_reason(r.reason)) for r in trials if r.status is not Status.OK)
    return [f"{k} trial{'s' if k > 1 else ''} {_STATUS_WORDS.get(status, status.value)}: {reason}"
            for (status, reason), k in counts.items()]


def _median(values: list[float]) -> float | None:
    return float(np.median(values)) if values else None


def _missing(q: Quantity, ok: Sequence[TrialResult], reasons: list[str], target: float | None,
             budget: float | None) -> str:
    if not ok:
        return "not measured: " + "; ".join(reasons)
    if q.censored:
        return "no target set" if target is None else f"target not reached in {len(ok)}/{len(ok)} trials"
    if q.name == "metric_at_budget" and budget is None:
        return "no number of training examples at which every trial evaluated"
    if q.steps is not None and all(len(steady_steps(r)) == 0 for r in ok):
        trained = sorted({len(r.step_times_s) for r in ok})
        warmup = sorted({int(r.spec.get("warmup_steps", 3)) for r in ok})
        steps = str(trained[0]) if len(trained) == 1 else f"{trained[0]}–{trained[-1]}"
        return (f"no steady steps: {steps} step{'s' if trained[-1] != 1 else ''} trained left nothing after the "
                f"first step and {'/'.join(map(str, warmup))} warm-up steps")
    why = sorted({w for r in ok if (w := q.why_missing(r))}) if q.why_missing else []
    if why:
        return "; ".join(why)
    return f"not recorded by the {len(ok)} successful trial{'s' if len(ok) > 1 else ''}"


def _summarise_group(key: tuple[str, str, str], trials: list[TrialResult], budget: float | None) -> ConfigSummary:
    ok = [r for r in trials if r.status is Status.OK]
    reasons = _failure_lines(trials)
    target = next((r.target for r in ok if r.target is not None), None)
    per_trial = {name: [v for r in ok if (v := q.value(r, budget)) is not None] for name, q in QUANTITIES.items()}
    summaries = {name: summarise(vs) for name, vs in per_trial.items()}
    # A run that did not finish never reached the target: it counts in the median as never
    unfinished = sum(r.status in UNFINISHED for r in trials) if target is not None else 0
    values = {name: _median(vs + [math.inf] * unfinished if QUANTITIES[name].censored and vs else vs)
              for name, vs in per_trial.items()}
    missing = {name: _missing(QUANTITIES[name], ok, reasons, target, budget)
               for name, s in summaries.items() if s is None}
    first = (ok or trials)[0]
    spec = first.run_spec
    return ConfigSummary(
        workload=key[0], preset=key[1], label=key[2], framework=spec.framework.value,
        execution=spec.execution.value, n_ok=len(ok), n_total=len(trials),
        statuses=dict(Counter(r.status.value for r in trials)), reasons=reasons, summaries=summaries,
        values=values, reached=sum(r.time_to_target_s is not None for r in ok), metric_name=first.metric_name,
        target=target, higher_is_better=first.higher_is_better, memory_kind=first.memory_kind,
        budget_examples=budget, missing=missing, trials=list(trials))


def summarise_groups(results: Sequence[TrialResult]) -> list[ConfigSummary]:
    """One :class:`ConfigSummary` per (workload, preset, configuration), in :func:`group_results` order.

    Quality is read at the common budget of all the configurations of the same (workload, preset).
    """
    groups = group_results(results)
    budgets = {pair: common_budget([r for key, trials in groups.items() if key[:2] == pair for r in trials])
               for pair in {key[:2] for key in groups}}
    return [_summarise_group(key, trials, budgets[key[:2]]) for key, trials in groups.items()]
