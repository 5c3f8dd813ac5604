"""The same configurations in two stores (two machines, two versions): B against A, with intervals.

Configurations are matched by :func:`bakeoff.core.identity.configuration`: every spec field but seed and repeat, a data
file counted by its content, the resolved model configuration by its hash, and *not* the bakeoff or framework
versions, so the same suite run by two releases, or on two machines, lines up. Per matched configuration:

* the ratio B / A of the medians over runs of steady throughput and of time to target (a run that never reached it,
  or did not finish, counts as never, +∞), with the 95% interval every verdict uses
  (:func:`bakeoff.analysis.decide.compare_runs`: Welch's t on the log of one value per run; none with one run a
  side), and its outcome (:attr:`~bakeoff.analysis.bootstrap.Difference.outcome`, B against A): B or A better when
  the whole interval lies beyond the ±5% band, equal when it lies wholly inside, unsettled otherwise — and always
  with one run a side (a bootstrap over one run's steps saw step-to-step noise only, and called one run a side
  "better");
* what differs between the two sides' environments: CPU, cores, device, Python, framework and bakeoff versions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.analysis.bootstrap import Difference
from bakeoff.analysis.decide import compare_runs
from bakeoff.analysis.quantities import quantity
from bakeoff.analysis.stats import run_values
from bakeoff.core.identity import configuration
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import SpecError, Status
from bakeoff.results.store import Store

QUANTITIES = ("examples_per_s", "time_to_target_s")
"""What a comparison shows per configuration."""

ENVIRONMENT = ("cpu", "cores", "device", "gpu", "python")
"""Environment fields compared as they are; framework and bakeoff versions are compared too."""


@dataclasses.dataclass
class Matched:
    """One configuration found in both stores."""

    workload: str
    preset: str
    label: str
    runs: tuple[int, int]  # successful runs in A and in B
    differences: dict[str, Difference]  # quantity -> B against A ("a" in the Difference is B)
    environment: dict[str, tuple[str, str]]  # field -> (A's, B's) where they differ


@dataclasses.dataclass
class Comparison:
    """Two stores compared: matched configurations and those only one of them has."""

    a: Path
    b: Path
    matched: list[Matched]
    only_a: list[str]
    only_b: list[str]


def _values(results: Sequence[TrialResult], field: str) -> str:
    found = sorted({str(v) for r in results if (v := _environment(r).get(field)) is not None})
    return ", ".join(found) or "—"


def _environment(result: TrialResult) -> dict[str, Any]:
    env = {k: result.environment.get(k) for k in ENVIRONMENT}
    content = dict(result.spec.get("content") or {})
    framework = result.spec["framework"]
    env[f"{framework} version"] = content.get(framework) or result.environment.get(framework)
    env["bakeoff version"] = content.get("bakeoff")
    return env


def _configs(results: Sequence[TrialResult]) -> dict[str, list[TrialResult]]:
    out: dict[str, list[TrialResult]] = {}
    for r in results:
        out.setdefault(configuration(r.spec), []).append(r)
    return out


def _name(results: Sequence[TrialResult]) -> tuple[str, str, str]:
    spec = results[0].run_spec
    return spec.workload, spec.preset_title(), spec.label()


def _difference(name: str, a: Sequence[TrialResult], b: Sequence[TrialResult]) -> Difference:
    """B against A on ``name``, as a verdict compares two configurations."""
    q = quantity(name)
    target = next((t.target for t in (*a, *b) if t.status is Status.OK and t.target is not None), None)
    runs_a, runs_b = run_values(q, a, target), run_values(q, b, target)
    va, vb = (float(np.median(r[0])) if r[0].size else None for r in (runs_a, runs_b))
    return compare_runs(q, (vb, runs_b), (va, runs_a), bool(q.higher_is_better))


def compare(a: Sequence[TrialResult], b: Sequence[TrialResult], a_path: Path = Path("A"),
            b_path: Path = Path("B")) -> Comparison:
    """Match ``a``'s and ``b``'s configurations and compare each (see the module docstring)."""
    configs_a, configs_b = _configs(a), _configs(b)
    matched = []
    for key in [k for k in configs_a if k in configs_b]:
        ta, tb = configs_a[key], configs_b[key]
        name = _name(ta)
        ok = [sum(t.status is Status.OK for t in side) for side in (ta, tb)]
        env = {field: (_values(ta, field), _values(tb, field)) for field in _environment(ta[0])}
        matched.append(Matched(*name, runs=(ok[0], ok[1]),
                               differences={q: _difference(q, ta, tb) for q in QUANTITIES},
                               environment={k: v for k, v in env.items() if v[0] != v[1]}))
    matched.sort(key=lambda m: (m.workload, m.preset, m.label))

    def names(configs: Mapping[str, list[TrialResult]], other: Mapping[str, list]) -> list[str]:
        return sorted("/".join(_name(t)[:2]) + " " + _name(t)[2] for k, t in configs.items() if k not in other)

    return Comparison(a_path, b_path, matched, names(configs_a, configs_b), names(configs_b, configs_a))


def compare_stores(a: Path, b: Path, suite: str | None = None) -> Comparison:
    """:func:`compare` of two stores' results (optionally one suite's), read without writing to either."""
    loaded = []
    for path in (a, b):
        with Store(path, readonly=True) as store:
            loaded.append(store.results(suite=suite))
    if not any(loaded):
        raise SpecError(f"no trials{f' of suite {suite!r}' if suite else ''} in {a} or {b}")
    return compare(*loaded, a_path=a, b_path=b)


def _ratio_text(d: Difference, unit: str) -> str:
    if d.ratio is None:
        return f"{unit}: not measured on {'either side' if d.a is None and d.b is None else 'one side'}"
    if not np.isfinite(d.a or 0) or not np.isfinite(d.b or 0):
        reached = "A only" if not np.isfinite(d.a or 0) and np.isfinite(d.b or 0) else (
            "B only" if np.isfinite(d.a or 0) else "neither")
        return f"{unit}: target reached by {reached}"
    verdict = {"better": "B better", "worse": "A better"}.get(d.outcome, d.outcome)
    if d.low is None or d.high is None:
        return f"{unit}: B/A {d.ratio:.2f}, no interval ({verdict})"
    high = f"{d.high:.2f}" if np.isfinite(d.high) else "∞"
    return f"{unit}: B/A {d.ratio:.2f} [{d.low:.2f}, {high}] ({verdict})"


def lines(c: Comparison) -> list[str]:
    """The comparison for people: what differs in every configuration's environment once, then one line per
    configuration (with the environment differences of its own)."""
    out = [f"A = {c.a}, B = {c.b}; ratios B / A of medians over runs, 95% intervals over runs (none with one run a "
           "side); better: the whole interval beyond ±5%; equal: the whole interval within ±5%; unsettled: neither"]
    common = dict(c.matched[0].environment) if c.matched else {}
    for m in c.matched[1:]:
        common = {k: v for k, v in common.items() if m.environment.get(k) == v}
    out += [f"environment, {field}: A {va}; B {vb}" for field, (va, vb) in common.items()]
    if not c.matched:
        out.append("no configuration is in both stores")
    for m in c.matched:
        d = m.differences
        out.append(f"{m.workload}/{m.preset} {m.label} (runs {m.runs[0]} vs {m.runs[1]}): "
                   f"{_ratio_text(d['examples_per_s'], 'throughput')}; "
                   f"{_ratio_text(d['time_to_target_s'], 'time to target')}")
        out += [f"    {field}: A {va}; B {vb}" for field, (va, vb) in m.environment.items() if field not in common]
    for side, names in (("A", c.only_a), ("B", c.only_b)):
        if names:
            out.append(f"only in {side}: {', '.join(names)}")
    return out


def to_dict(c: Comparison) -> dict[str, Any]:
    """The comparison as JSON-ready data (non-finite numbers as ``None``). Per quantity, ``outcome`` is B's against
    A's, as the ratio is (one of :data:`~bakeoff.analysis.bootstrap.OUTCOMES`); ``better`` and ``tie`` are kept for
    readers of older output."""
    def num(v: float | None) -> float | None:
        return None if v is None or not np.isfinite(v) else float(v)

    return {"a": str(c.a), "b": str(c.b), "only_a": c.only_a, "only_b": c.only_b, "configurations": [
        {"workload": m.workload, "preset": m.preset, "label": m.label, "runs": list(m.runs),
         "environment": {k: list(v) for k, v in m.environment.items()},
         **{q: {"a": num(d.b), "b": num(d.a), "ratio_b_over_a": num(d.ratio), "low": num(d.low),
                "high": num(d.high), "better": {"a": "b", "b": "a"}.get(d.better or ""), "tie": d.tie,
                "outcome": d.outcome}
            for q, d in m.differences.items()}} for m in c.matched]}
