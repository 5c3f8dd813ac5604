"""Every measured quantity as one record: unit, direction, how to read it from a trial, how the report shows it;
and every measured criterion the decision weighs as one record that reads a quantity.

The statistics (:mod:`bakeoff.analysis.stats`), the report's columns, the CSV export and MLflow read
:data:`QUANTITIES`; adding a quantity is one entry here. The decision (:mod:`bakeoff.analysis.decide`), the card
(:mod:`bakeoff.report.card`), the report's weights, scores and head-to-head tables, the decision JSON
(:mod:`bakeoff.results.ci`) and the calibration bench (:mod:`bakeoff.analysis.calibration`) read :data:`CRITERIA`;
adding a criterion is one :class:`Criterion` there — with a quantity of its own when no quantity reads its figure yet
(:data:`QUANTITIES` then lists that one too).

Two kinds of quantity need more than a getter:

* **step-based** ones (throughput, step time) are a function of the median steady step time of a trial; their
  ``steps`` maps resampled medians to values, so the bootstrap can resample steady steps within each trial;
* **censored** ones (time and steps to target): a trial that never reached the target has no value, yet it is
  a result — it counts as "never" (+∞), not as missing.

Quality is read at an **equal budget** (:func:`common_budget`): the number of training examples every compared
trial evaluated at, so a trial stopped at its target is not judged by the overshoot of a longer one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from bakeoff.core.result import TrialResult
from bakeoff.core.spec import Status

MIB = 2**20


def fmt(value: float | None, digits: int = 3) -> str:
    """A number for people: ``digits`` significant figures, thousands separated; "—" for missing."""
    if value is None or math.isnan(value):
        return "—"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if abs(value) >= 10**digits:
        return f"{value:,.0f}"
    return "0" if value == 0 else f"{value:.{digits}g}"


@dataclasses.dataclass(frozen=True)
class Quantity:
    """One measured quantity.

    ``label`` may name ``{metric}``, ``{target}`` and ``{budget}`` (training examples), filled in per workload.
    """

    name: str  # the key in summaries, criteria and the CSV export
    unit: str  # as stored: "examples/s", "s", "bytes"; "" for the workload's metric
    higher_is_better: bool | None  # None: the workload metric's direction
    get: Callable[[TrialResult, float | None], float | None]  # (trial, budget in examples) -> value or None
    label: str  # for people, in columns and verdicts
    table: str | None = "configurations"  # the report table it is a column of: "configurations", "memory"; None
    shown_unit: str | None = None  # the unit the report shows (MiB, ms); None: ``unit``
    scale: float = 1.0  # stored value × scale = shown value
    interval: bool = False  # the report shows the bootstrap 95% interval next to the median
    optional: bool = False  # a column only when some configuration measured it
    # (trial, median steady step times) -> values: the trial's value had its steady steps been these
    steps: Callable[[TrialResult, np.ndarray], np.ndarray] | None = None
    censored: bool = False  # a trial without a value (target set, never reached) counts as +inf
    # Comparisons count values below this as this: what the probe resolves (a 0 vs 3 MiB increment is no 0x ratio)
    resolution: float = 0.0
    # trial -> why it has no value, where the trial itself recorded why (MFU without a ceiling, say)
    why_missing: Callable[[TrialResult], str | None] | None = None
    # censored: trial -> what its value is at least when it never got there (the training it did), None unknown
    bound: Callable[[TrialResult], float | None] | None = None
    # censored: trial -> whether it measured the quantity at all (energy needs counters); None: every trial does
    measured: Callable[[TrialResult], bool] | None = None
    # the report's short column header (may name {metric}); None: the full title, which the legend under the table
    # gives for every column either way
    header: str | None = None

    @property
    def display_unit(self) -> str:
        return self.unit if self.shown_unit is None else self.shown_unit

    def higher(self, metric_higher_is_better: bool) -> bool:
        """Whether higher is better, given the workload metric's direction for metric quantities."""
        return metric_higher_is_better if self.higher_is_better is None else self.higher_is_better

    def floored(self, values: np.ndarray | float) -> np.ndarray:
        """Values as comparisons see them: at least :attr:`resolution` (NaN and +inf kept)."""
        v = np.asarray(values, dtype=float)
        return np.where(v < self.resolution, self.resolution, v) if self.resolution else v

    def value(self, trial: TrialResult, budget: float | None = None) -> float | None:
        """The trial's value as statistics use it: ``None`` when unmeasured, +inf when censored (never reached)."""
        if trial.status is not Status.OK:
            return None
        v = self.get(trial, budget)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            never = self.censored and trial.target is not None and (self.measured is None or self.measured(trial))
            return math.inf if never else None
        return float(v)

    def title(self, metric: str = "metric", target: float | None = None, budget: float | None = None) -> str:
        """``label`` with the workload's metric, target and budget filled in."""
        return self.label.format(metric=metric or "metric", target=fmt(target) if target is not None else "target",
                                 budget=fmt(budget) if budget is not None else "the common budget")


def steady_steps(trial: TrialResult) -> np.ndarray:
    """The steady step times: every step after the first and the warm-up steps."""
    warmup = int(trial.spec.get("warmup_steps", 3))
    return np.asarray(trial.step_times_s[1 + warmup:], dtype=float)


def examples_seen(trial: TrialResult) -> np.ndarray:
    """Training examples seen at each point of the quality curve (step × examples per step)."""
    return np.asarray([p["step"] for p in trial.curve], dtype=float) * trial.examples_per_step


def metric_at(trial: TrialResult, examples: float | None) -> float | None:
    """The quality curve read at ``examples`` training examples, linear between evaluations; ``None`` outside it."""
    if examples is None or not trial.curve or trial.examples_per_step <= 0:
        return None
    seen = examples_seen(trial)
    order = np.argsort(seen, kind="stable")
    seen, metric = seen[order], np.asarray([trial.curve[i]["metric"] for i in order], dtype=float)
    if not seen[0] <= examples <= seen[-1]:
        return None
    return float(np.interp(examples, seen, metric))


def common_budget(trials: Sequence[TrialResult]) -> float | None:
    """The largest number of training examples at which every successful trial with a curve can be read.

    That is the smallest of the trials' last evaluations, provided no trial's first evaluation comes after it;
    ``None`` when there is no such budget (or no curve at all).
    """
    ends, starts = [], []
    for r in trials:
        if r.status is Status.OK and r.curve and r.examples_per_step > 0:
            seen = examples_seen(r)
            starts.append(seen.min())
            ends.append(seen.max())
    if not ends or max(starts) > min(ends):
        return None
    return float(min(ends))


def _field(name: str) -> Callable[[TrialResult, float | None], float | None]:
    return lambda r, _budget: getattr(r, name)


def _rate(key: str) -> Callable[[TrialResult, float | None], float | None]:
    return lambda r, _budget: r.throughput.get(key)


def _distributed(*path: str) -> Callable[[TrialResult, float | None], float | None]:
    """A figure of the result's :class:`~bakeoff.core.result.Distributed` section (its field, then keys within
    it: ``("sync", "per_step_s")``), ``None`` when not recorded."""
    def get(r: TrialResult, _budget: float | None) -> float | None:
        value: object = getattr(r.distributed, path[0], None)
        for key in path[1:]:
            value = value.get(key) if isinstance(value, dict) else None
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    return get


def _sync_share(r: TrialResult, budget: float | None) -> float | None:
    """The gradients' all-reduce, timed alone, against the steady step. None under parameter servers: their steps
    overlap (up to one per worker in flight), so a step's time is not a step's length and the share is no share."""
    if r.run_spec.parallelism.value == "parameter_server":
        return None
    sync = _distributed("sync", "per_step_s")(r, budget)
    return sync / r.steady_step_s if sync is not None and r.steady_step_s else None


def _sync_in_step(r: TrialResult, budget: float | None) -> float | None:
    """Synchronisation per optimizer step as the training step itself spent it (``sync.in_step``, rank 0): the
    gradient all-reduce's part the backward pass did not hide, and the loss totals' all-reduce."""
    return _distributed("sync", "in_step", "per_step_s")(r, budget)


def _sync_per_example(r: TrialResult, budget: float | None) -> float | None:
    """:func:`_sync_in_step` over the examples one optimizer step trains on (every micro-batch of every replica)."""
    sync = _sync_in_step(r, budget)
    return sync / r.examples_per_step if sync is not None and r.examples_per_step else None


def _sync_in_step_missing(r: TrialResult) -> str | None:
    if r.distributed is None or not r.distributed.sync:
        return "not a data-parallel trial: nothing synchronises"
    why = r.distributed.sync.get("in_step_missing")
    if why:
        return str(why)
    if r.distributed.strategy.startswith("DistributedDataParallel"):
        return "not timed in the training step: stored before bakeoff timed it there"
    return (f"not timed in the training step under {r.distributed.strategy or 'this strategy'}, whose reductions "
            "run inside its compiled step (only the all-reduce timed alone, sync_s)")


def _graph_build(r: TrialResult, _budget: float | None) -> float | None:
    """What the steps that built a graph took beyond a steady step (first step included); 0 in eager mode."""
    return r.training.graph_build_s


def _worker_peak(r: TrialResult, _budget: float | None) -> float | None:
    """The largest peak of the group's training processes: each rank's own figure, and the resident peak the
    launcher read of each worker and parameter server it started (torchrun's agents, which do not train, left out)."""
    if r.distributed is None:
        return None
    peaks = [rank.get("peak_memory_bytes") for rank in r.distributed.ranks]
    peaks += [v for name, v in r.distributed.member_peak_rss_bytes.items() if name.startswith(("worker", "ps"))]
    peaks = [p for p in peaks if p]
    return float(max(peaks)) if peaks else None


def _mfu(r: TrialResult, _budget: float | None) -> float | None:
    """Model-FLOPs utilisation, recorded at store time (:func:`bakeoff.measure.ceiling.utilisation`)."""
    value = r.mfu.value if r.mfu is not None else None
    return float(value) if isinstance(value, int | float) else None


def _mfu_missing(r: TrialResult) -> str | None:
    return "stored before bakeoff measured MFU" if r.mfu is None else r.mfu.missing or None


def _energy(key: str) -> Callable[[TrialResult, float | None], float | None]:
    """A figure of the result's energy section (:class:`~bakeoff.core.result.Energy`), None when not measured."""
    return lambda r, _budget: getattr(r.energy, key) if r.energy is not None else None


def _energy_missing(r: TrialResult) -> str | None:
    return "stored before bakeoff measured energy" if r.energy is None else r.energy.missing or None


def _energy_measured(r: TrialResult) -> bool:
    return r.energy is not None and r.energy.train_j is not None


def _rate_from_steps(key: str) -> Callable[[TrialResult, np.ndarray], np.ndarray]:
    # Units per step vary (valid tokens, audio frames): the trial's rate scaled by its median step time.
    return lambda r, t: r.throughput[key] * r.steady_step_s / t


_LISTED: dict[str, Quantity] = {q.name: q for q in (
    Quantity("examples_per_s", "examples/s", True, _rate("examples_per_s"), "steady throughput", interval=True,
             steps=lambda r, t: r.examples_per_step / t, header="throughput"),
    Quantity("tokens_per_s", "tokens/s", True, _rate("tokens_per_s"), "steady token throughput", interval=True,
             optional=True, steps=_rate_from_steps("tokens_per_s"), header="tokens/s"),
    Quantity("frames_per_s", "frames/s", True, _rate("frames_per_s"), "steady audio throughput (10 ms frames)",
             interval=True, optional=True, steps=_rate_from_steps("frames_per_s"), header="frames/s"),
    # MFU ∝ 1 / step time: the trial's MFU scaled by its median step time, as throughput is
    Quantity("mfu", "share", True, _mfu, "MFU (model FLOPs / matmul ceiling)", shown_unit="%", scale=100,
             interval=True, optional=True, steps=lambda r, t: _mfu(r, None) * r.steady_step_s / t,
             why_missing=_mfu_missing, header="MFU"),
    Quantity("first_step_s", "s", False, _field("first_step_s"), "first step (graph build / compile)",
             header="first step"),
    # What graph building cost: the steps that traced or compiled, less a steady step each (Training.graph_build_s)
    Quantity("graph_build_s", "s", False, _graph_build, "graph build (build steps beyond a steady step)", table=None,
             optional=True),
    Quantity("steady_step_s", "s", False, _field("steady_step_s"), "steady step", shown_unit="ms", scale=1000,
             steps=lambda r, t: t, header="step"),
    Quantity("time_to_target_s", "s", False, _field("time_to_target_s"), "time to {metric} {target}",
             censored=True, bound=lambda r: r.train_s, header="to target"),
    Quantity("steps_to_target", "steps", False, _field("steps_to_target"), "steps to {metric} {target}",
             table=None, censored=True, bound=lambda r: float(len(r.step_times_s)) or None, header="steps to target"),
    Quantity("metric_at_budget", "", None, lambda r, budget: metric_at(r, budget), "{metric} at {budget} examples",
             header="{metric} at budget"),
    Quantity("final_metric", "", None, _field("final_metric"), "final {metric}", header="final"),
    Quantity("best_metric", "", None, _field("best_metric"), "best {metric}", table=None),
    # Energy from the machine's counters (bakeoff.measure.energy: RAPL packages and DRAM, NVML GPUs), never estimated
    Quantity("energy_per_example_j", "J", False, _energy("per_example_j"),
             "energy per training example (steady steps, measured by counters)", shown_unit="mJ", scale=1000,
             optional=True, why_missing=_energy_missing, header="energy / example"),
    Quantity("energy_to_target_j", "J", False, _energy("to_target_j"), "energy to {metric} {target}",
             optional=True, censored=True, bound=lambda r: r.energy.train_j if r.energy is not None else None,
             measured=_energy_measured, why_missing=_energy_missing, header="energy to target"),
    Quantity("power_w", "W", False, _energy("mean_w"), "mean power over the steady steps (measured by counters)",
             table=None, optional=True, why_missing=_energy_missing),
    Quantity("import_s", "s", False, _field("import_s"), "framework import", header="import"),
    Quantity("build_s", "s", False, _field("build_s"), "model build", header="build"),
    Quantity("memory_baseline_bytes", "bytes", False, _field("memory_baseline_bytes"),
             "baseline after import and build", table="memory", shown_unit="MiB", scale=1 / MIB, header="baseline"),
    # 8 MiB: below that, an RSS increment is allocator arenas and page-fault timing, not the model's training state
    Quantity("memory_increment_bytes", "bytes", False, _field("memory_increment_bytes"),
             "training memory increment", table="memory", shown_unit="MiB", scale=1 / MIB, resolution=8 * MIB,
             header="training increment"),
    Quantity("memory_train_peak_bytes", "bytes", False, _field("memory_train_peak_bytes"),
             "peak during training steps", table=None, shown_unit="MiB", scale=1 / MIB),
    Quantity("peak_memory_bytes", "bytes", False, _field("peak_memory_bytes"), "peak over the whole trial",
             table="memory", shown_unit="MiB", scale=1 / MIB, header="peak"),
    # Distributed trials (TrialResult.distributed): one step's gradient synchronisation, timed alone after training
    # by one method in every framework (bakeoff.measure.sync; what each framework's call ran is its "how"): in
    # training it may overlap the backward pass, so this is what it costs when nothing hides it, not a share of the
    # measured step
    Quantity("sync_s", "s", False, _distributed("sync", "per_step_s"),
             "one step's gradient all-reduce, timed alone after training", table="distributed", shown_unit="ms",
             scale=1000, optional=True),
    Quantity("sync_share", "share", False, _sync_share, "that all-reduce against the steady step",
             table="distributed", shown_unit="%", scale=100, optional=True),
    # The same synchronisation timed inside the training step (bakeoff.frameworks.torch.distributed.DataParallel):
    # what the step waited for, not an all-reduce run alone, so accumulation, overlap and stragglers all show in it
    Quantity("sync_in_step_s", "s", False, _sync_in_step,
             "synchronisation per optimizer step, timed in the training step", table="distributed", shown_unit="ms",
             scale=1000, optional=True, why_missing=_sync_in_step_missing),
    Quantity("sync_per_example_s", "s", False, _sync_per_example,
             "synchronisation per training example, timed in the training step", table="distributed",
             shown_unit="µs", scale=1e6, optional=True, why_missing=_sync_in_step_missing),
    Quantity("startup_s", "s", False, _distributed("startup_s"),
             "start-up before the first step (launch, import, rendezvous, set-up)", table="distributed",
             optional=True),
    Quantity("launch_s", "s", False, _distributed("launch_s"), "process-group launch", table="distributed",
             optional=True),
    Quantity("worker_peak_memory_bytes", "bytes", False, _worker_peak, "peak memory of the largest worker",
             table="distributed", shown_unit="MiB", scale=1 / MIB, optional=True),
    Quantity("train_s", "s", False, _field("train_s"), "training clock", table=None),
    Quantity("wall_s", "s", False, _field("wall_s"), "whole process", table=None),
)}
"""The quantities read from a trial whatever the decision weighs, in the order of the report's columns and the CSV
export (:data:`QUANTITIES` adds those the criteria bring of their own)."""


@dataclasses.dataclass(frozen=True)
class Criterion:
    """A measured criterion: what the decision weighs, the card shows and the report explains, read from one quantity.

    Its unit, direction, scale, resolution and how it is read from a trial are its quantity's. ``legend`` may name
    ``{unit}`` (the quantity's shown unit) and ``{metric}`` (the workload's metric; the card lists the metrics of
    its workloads where they differ).
    """

    name: str  # the key in weights, decisions, the card, the decision JSON and ``--weight``
    quantity: Quantity  # a record of _LISTED, or one of its own (QUANTITIES then lists it after them)
    description: str  # what it scores, in the report's weights table
    weight: float  # its weight unless the user gives one; 0: counted only when the user weighs it
    short: str = ""  # the card's column header; "": the name, its underscores spaced
    legend: str = "{unit}"  # what the card's legend says of it after its header

    @property
    def header(self) -> str:
        """The card's column header."""
        return self.short or self.name.replace("_", " ")

    def explained(self, metric: str) -> str:
        """The card legend's text: ``header: legend`` with its unit and ``metric`` filled in."""
        return f"{self.header}: {self.legend.format(unit=self.quantity.display_unit, metric=metric)}"


CRITERIA: dict[str, Criterion] = {c.name: c for c in (
    Criterion("throughput", _LISTED["examples_per_s"], "steady examples/s (median over runs)", 0.3),
    Criterion("time_to_target", _LISTED["time_to_target_s"],
              "training seconds to reach the target (median over runs; a run that never reached it counts as never)",
              0.3),
    Criterion("first_step", _LISTED["first_step_s"], "first step seconds: graph build / compile (median)", 0.1),
    Criterion("memory", _LISTED["memory_increment_bytes"],
              "training memory increment: peak during training steps minus the baseline after build (median)", 0.1,
              legend="{unit} of training increment"),
    Criterion("quality", _LISTED["metric_at_budget"],
              "the metric after the largest number of training examples every configuration evaluated at "
              "(median; direction from the workload)", 0.2,
              legend="{metric} at the largest training budget every configuration reached"),
    # Few machines have counters: a default weight would leave energy out, with a note, of most decisions
    Criterion("energy", _LISTED["energy_per_example_j"],
              "joules per training example over the steady steps, read from RAPL / NVML counters where the machine "
              "has them (median; off by default: --weight energy=0.2)", 0.0,
              legend="{unit} per training example, measured by RAPL / NVML counters"),
)}
"""The measured criteria, in the order of the card's columns, the weights and the head-to-head comparisons."""


class _Quantities(Mapping[str, Quantity]):
    """:data:`_LISTED`, then the quantity of each criterion that brings its own; read at each use, so that a
    criterion added to :data:`CRITERIA` is a summary, a report column and a CSV field with nothing else to add."""

    def __getitem__(self, name: str) -> Quantity:
        if name in _LISTED:
            return _LISTED[name]
        for c in CRITERIA.values():
            if c.quantity.name == name:
                return c.quantity
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        yield from _LISTED
        yield from dict.fromkeys(c.quantity.name for c in CRITERIA.values() if c.quantity.name not in _LISTED)

    def __len__(self) -> int:
        return sum(1 for _ in self)


QUANTITIES: Mapping[str, Quantity] = _Quantities()
"""Every quantity, in the order of the report's columns and the CSV export."""


def quantity(name: str) -> Quantity:
    """The record named ``name``; ``KeyError`` naming the accepted ones otherwise."""
    if name not in QUANTITIES:
        raise KeyError(f"unknown quantity {name!r}; accepted: {', '.join(QUANTITIES)}")
    return QUANTITIES[name]
