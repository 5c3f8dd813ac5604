"""Like with like: whether each framework ran as its users train it, with which threads, under what machine load.

* **Modes.** A framework judged without any of its production modes (its record's ``production``,
  :mod:`bakeoff.core.frameworks`: TensorFlow in eager mode only) is not judged as it is used; one run only in a
  production mode that is not compiled (PyTorch eager, its default) has its compiled mode untried: the verdict says
  which.
* **Threads.** Intra-/inter-op thread pools per configuration, as the engines recorded them.
* **Load.** The 1-minute load average at a trial's start and end; a run's load is the larger of the two. Two
  configurations ran under clearly different load when their median run loads differ by more than
  :data:`LOAD_GAP_PER_CORE` × the machine's cores: then half the cores were busy with other work on one side and
  not the other — with thread pools sized to every core, enough oversubscription to skew step times by tens of
  percent, and well beyond the jitter of a lagging 1-minute average (a trial's own previous neighbour included).
* **Other work.** What other processes used of a trial's cores during its steady steps, measured step by step
  (:class:`bakeoff.measure.environment.CpuSharing`). Unlike the load average this is absolute and exact in time:
  a run whose cores other work used more than :data:`bakeoff.measure.environment.OTHER_WORK_SHARE` of is flagged
  whatever
  its rival saw, and ``bakeoff run --retry-busy`` measures it again (keeping the quieter of the two measurements).
  A verdict whose compared configurations include such a run is never robust: it names the busy runs of each side
  (:func:`busy_clause`), and the card marks it and the timings resting on them with :data:`BUSY_MARK`.
* **Targets.** Time to target is to a target a workload may only have declared, not measured
  (:data:`bakeoff.core.workload.TARGET_SOURCES`); a verdict that weighs it says so.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bakeoff.analysis.quantities import Quantity, fmt
from bakeoff.analysis.stats import ConfigSummary
from bakeoff.core import frameworks as records
from bakeoff.core.spec import Execution
from bakeoff.core.workload import TARGET_SOURCES
from bakeoff.measure.environment import OTHER_WORK_SHARE

FRAMEWORK_NAMES = {name: info.display for name, info in records.FRAMEWORKS.items()}

LOAD_GAP_PER_CORE = 0.5
"""Median run loads further apart than this many load units per core flag a comparison (module docstring)."""

_MODE_ORDER = [e.value for e in Execution]

BUSY_MARK = "§"
"""The mark of a figure or a verdict resting on runs measured on a busy machine (:func:`busy_runs`), wherever it
is shown: the report's conditions table, the card's cells and standing."""

RETRY_BUSY_HINT = "`bakeoff run --retry-busy` measures them again"


def display_name(label: str) -> str:
    """``"torch/graph/bf16"`` -> ``"PyTorch (graph, bf16)"``."""
    framework, *modes = label.split("/")
    name = FRAMEWORK_NAMES.get(framework, framework)
    return f"{name} ({', '.join(modes)})" if modes else name


def _either(modes: Sequence[str]) -> str:
    return " or ".join(modes)


def mode_notes(summaries: Sequence[ConfigSummary], frameworks: Sequence[str]) -> list[str]:
    """One sentence per framework in ``frameworks`` not judged as its users train it, or with its compiled mode untried.

    A mode counts as run when at least one of its trials succeeded; a mode tried whose trials all failed is named.
    """
    notes = []
    for fw in frameworks:
        mine = [s for s in summaries if s.framework == fw]
        ran = sorted({s.execution for s in mine if s.n_ok}, key=_MODE_ORDER.index)
        failed = sorted({s.execution for s in mine if not s.n_ok} - set(ran), key=_MODE_ORDER.index)
        info = records.FRAMEWORKS.get(fw)
        production = [e.value for e in info.production] if info else []
        compiled = [e.value for e in info.compiled] if info else []
        name = FRAMEWORK_NAMES.get(fw, fw)
        why = f" ({', '.join(failed)} failed)" if failed else ""
        if production and not set(ran) & set(production):
            modes = " and ".join(ran) or "no"
            notes.append(f"{name} ran only in {modes} mode{'s' if len(ran) > 1 else ''}{why}, not as its users "
                         f"train ({_either(production)})")
        elif compiled and not set(ran) & set(compiled):
            # Eager is how this framework's users train by default (PyTorch, Keras on PyTorch): not a defect of the
            # comparison, but its opt-in compiled mode was left untried.
            modes = " and ".join(ran)
            notes.append(f"{name} ran only in {modes} mode{'s' if len(ran) > 1 else ''}, one its users train in; "
                         f"its compiled mode ({_either(compiled)}) was not tried{why}")
    return notes


def run_load(environment: dict) -> float | None:
    """A run's machine load: the larger of the 1-minute load averages at its start and end."""
    loads = [environment.get(k) for k in ("load_average_1m_at_start", "load_average_1m_at_end")]
    loads = [float(v) for v in loads if isinstance(v, int | float)]
    return max(loads) if loads else None


def config_load(cs: ConfigSummary) -> tuple[float | None, float | None, float | None]:
    """Median over the configuration's successful runs of (load at start, load at end, run load)."""
    def median(key: str | None) -> float | None:
        vals = [run_load(r.environment) if key is None else r.environment.get(key) for r in cs.ok]
        vals = [float(v) for v in vals if isinstance(v, int | float)]
        return float(np.median(vals)) if vals else None

    return median("load_average_1m_at_start"), median("load_average_1m_at_end"), median(None)


def cores(configs: Sequence[ConfigSummary]) -> int | None:
    """The machine's core count as the trials recorded it (the smallest, if they differ)."""
    counts = [r.environment.get("cores") for c in configs for r in c.ok]
    counts = [int(v) for v in counts if isinstance(v, int | float) and v > 0]
    return min(counts) if counts else None


def load_gap(a: ConfigSummary, b: ConfigSummary, n_cores: int | None) -> str | None:
    """A sentence when ``a`` and ``b`` ran under clearly different load (module docstring); ``None`` otherwise."""
    la, lb = config_load(a)[2], config_load(b)[2]
    if la is None or lb is None or not n_cores or abs(la - lb) <= LOAD_GAP_PER_CORE * n_cores:
        return None
    return (f"the compared runs saw different machine load (1-minute load average {fmt(la)} vs {fmt(lb)} on "
            f"{n_cores} cores), which can skew their timings")


def loaded(configs: Sequence[ConfigSummary]) -> set[str]:
    """Labels of the configurations that ran under clearly more load than the least-loaded one."""
    n_cores = cores(configs)
    loads = {c.label: config_load(c)[2] for c in configs}
    known = [v for v in loads.values() if v is not None]
    if not known or not n_cores:
        return set()
    return {label for label, v in loads.items() if v is not None and v - min(known) > LOAD_GAP_PER_CORE * n_cores}


def other_work(environment: dict) -> float | None:
    """The share of a run's cores other processes used during its steady steps (``cpu_sharing``), if measured."""
    value = environment.get("cpu_sharing", {}).get("other_share")
    return float(value) if isinstance(value, int | float) else None


def busy_runs(cs: ConfigSummary) -> list[float]:
    """The other-work shares of the configuration's successful runs measured on a busy machine: other processes
    used more than :data:`OTHER_WORK_SHARE` of its cores during its steady steps (an absolute test, whatever the
    rival saw)."""
    return [v for r in cs.ok if (v := other_work(r.environment)) is not None and v > OTHER_WORK_SHARE]


def busy_note(cs: ConfigSummary) -> str | None:
    """A sentence when runs of ``cs`` were measured on a busy machine (:func:`busy_runs`); ``None`` otherwise."""
    busy = busy_runs(cs)
    if not busy:
        return None
    return (f"{len(busy)} of {cs.n_ok} {display_name(cs.label)} runs were measured while other processes used "
            f"{max(busy):.0%} of its cores (more than {OTHER_WORK_SHARE:.0%}), so their timings are suspect; "
            f"{RETRY_BUSY_HINT}")


def busy_clause(sides: Sequence[ConfigSummary]) -> str | None:
    """Why a verdict between ``sides`` is not robust when some of their runs were measured on a busy machine:
    ``"3 of 3 PyTorch (eager) runs were measured while other processes used 81% of its cores (§, more than 25%) —
    `bakeoff run --retry-busy` measures them again"``; each busy side named; ``None`` when no run was busy."""
    named = [(len(busy), cs, max(busy)) for cs in sides if (busy := busy_runs(cs))]
    if not named:
        return None
    parts = [f"{n} of {cs.n_ok} {display_name(cs.label)} runs " + ("were measured " if i == 0 else "")
             + f"while other processes used {worst:.0%} of its cores" for i, (n, cs, worst) in enumerate(named)]
    return (f"{' and '.join(parts)} ({BUSY_MARK}, more than {OTHER_WORK_SHARE:.0%}: their timings are suspect) — "
            f"{RETRY_BUSY_HINT}")


def _share(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.0%}"


def retry_note(record: dict) -> str:
    """What a ``--retry-busy`` measurement came to (:func:`bakeoff.results.store.busy_retry`'s record):
    ``"busy again (other processes used 70% of its cores, 81% the first time): kept the first measurement, 1,002
    ex/s; the retry (237 ex/s) stored beside it"``, or ``"quieter (12% of its cores used by other processes, 81% the
    first time): kept the retry, 980 ex/s; the first measurement (1,002 ex/s) stored beside it"``."""
    first, retry = record["stored"], record["retry"]
    now, before = retry.get("other_share"), first.get("other_share")
    again = now is not None and now > OTHER_WORK_SHARE

    def rate(m: dict) -> str:
        return f"{m['examples_per_s']:,.0f} ex/s" if isinstance(m.get("examples_per_s"), int | float) else m["status"]

    how = (f"busy again (other processes used {_share(now)} of its cores, {_share(before)} the first time)" if again
           else f"quieter ({_share(now)} of its cores used by other processes, {_share(before)} the first time)"
           if retry["status"] == "ok" else f"the retry did not succeed ({retry['status']})")
    if record["kept"] == "stored":
        return f"{how}: kept the first measurement, {rate(first)}; the retry ({rate(retry)}) stored beside it"
    return f"{how}: kept the retry, {rate(retry)}; the first measurement ({rate(first)}) stored beside it"


def timed(q: Quantity) -> bool:
    """Whether a busy machine skews ``q``: a time, a rate (throughput, MFU: figures read off step times) — not a
    memory, a metric or a count of steps."""
    return q.unit == "s" or q.unit.endswith("/s") or q.steps is not None


def threads(cs: ConfigSummary) -> str:
    """``"16 / 1"``: the intra-op / inter-op threads the runs recorded (every distinct pair, if they differ)."""
    pairs = sorted({(r.environment.get("intra_op_threads"), r.environment.get("inter_op_threads")) for r in cs.ok},
                   key=str)
    shown = [f"{'?' if a is None else a} / {'?' if b is None else b}" for a, b in pairs if (a, b) != (None, None)]
    return ", ".join(shown) or "—"


def declared_target_note(a: ConfigSummary, b: ConfigSummary) -> str | None:
    """A sentence when the target ``a`` and ``b`` were timed to was declared by the workload, as their trials
    recorded it (``training.target_source``), rather than measured, derived from the data or set by the user;
    ``None`` otherwise."""
    declared = [c for c in (a, b) if any(r.training.target_source == "declared" for r in c.ok)]
    if not declared or declared[0].target is None:
        return None
    c = declared[0]
    sign = "≥" if c.higher_is_better else "≤"
    return (f"time to target is to {c.metric_name or 'metric'} {sign} {fmt(c.target)}, a target "
            f"{TARGET_SOURCES['declared']}, not measured: it is only as telling as that choice")
