"""Never mixes without saying so: what the trials of one (workload, preset) differ in that should be equal.

Each successful trial is read for a few **aspects**. Two kinds:

* **Provenance** — the content of the data files (``RunSpec.content["data:<option>"]``), the bakeoff version,
  the machine (``environment["host"]``: an executor spreads trials over a cluster's nodes) and, within one
  framework, the framework's version. Any difference inside a section is a mix: the section holds
  results of different experiments, whatever the reason.
* **Settings** — batch size and accumulation, the training budget, evaluation cadence, warm-up, the resolved model
  configuration, the target, the device, and the data options that name no hashed file. A suite may vary these on
  purpose (4×8 against 32, padded against bucketed batches); it then varies them for every framework. So a setting
  is mixed only when the frameworks did not run the same set of values: PyTorch at batch 64 against TensorFlow at
  32, or every PyTorch trial with ``d_model 512``.

:func:`section_mixes` lists them for the report's warning; :func:`pair_note` says, for the verdict, what the two
compared configurations differ in: ``"compares different data sets: train 1a2b3c4d vs 9f8e7d6c"``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bakeoff.analysis.quantities import fmt
from bakeoff.analysis.stats import ConfigSummary, short_hash
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec


def data_hashes(spec: RunSpec) -> dict[str, str]:
    """Data option -> the short content hash of the file it names, for the options that name one."""
    content = dict(spec.content)
    return {k: short_hash(content[f"data:{k}"]) for k, _ in spec.data if f"data:{k}" in content}


def _data(r: TrialResult) -> str:
    hashes = data_hashes(r.run_spec)
    return ", ".join(f"{k} {h}" for k, h in hashes.items()) or "shipped data (no file)"


def _data_options(r: TrialResult) -> str:
    spec = r.run_spec
    hashed = data_hashes(spec)
    return ", ".join(f"{k}={v}" for k, v in spec.data if k not in hashed) or "none"


def _bakeoff(r: TrialResult) -> str:
    value = dict(r.run_spec.content).get("bakeoff")
    return short_hash(value) if value else "not recorded"


def framework_version(r: TrialResult) -> str:
    """The framework's version as the runner recorded it in the spec's content, else as the trial reported it."""
    spec = r.run_spec
    recorded = dict(spec.content).get(spec.framework.value)
    if recorded:
        return recorded
    version = r.environment.get("framework_version") or r.environment.get(spec.framework.value)
    return f"{spec.framework.value} {version}" if version else "not recorded"


def batch_text(spec: RunSpec) -> str:
    """Examples per optimizer step: ``32``, or ``4×8`` for 4 accumulated micro-batches of 8."""
    return f"{spec.grad_accum}×{spec.batch_size}" if spec.grad_accum > 1 else str(spec.batch_size)


def budget_text(spec: RunSpec) -> str:
    """``"100 steps"``, ``"2 epochs, stopping at the target"``, ``"100 steps or 60 s"``."""
    parts = []
    if spec.max_steps is not None:
        parts.append(f"{spec.max_steps:,} steps")
    if spec.max_epochs is not None:
        parts.append(f"{spec.max_epochs:g} epoch{'s' if spec.max_epochs != 1 else ''}")
    if spec.max_seconds is not None:
        parts.append(f"{spec.max_seconds:g} s of training")
    return " or ".join(parts) + (", stopping at the target" if spec.stop_at_target else "")


def config_of(r: TrialResult) -> dict[str, Any]:
    """The resolved model configuration the trial recorded; its spec's overrides when it recorded none."""
    config = r.setup.config
    return dict(config) if isinstance(config, Mapping) else dict(r.run_spec.config)


def _config(r: TrialResult) -> str:
    return json.dumps(config_of(r), sort_keys=True, default=str)


@dataclasses.dataclass(frozen=True)
class Aspect:
    """One thing the trials of a section should agree on."""

    name: str  # for people: "data", "batch size"
    provenance: bool  # True: any difference is a mix; False: a setting, mixed when the frameworks' sets differ
    get: Callable[[TrialResult], str | None]  # None: the trial did not record it (left out)
    per_framework: bool = False  # compared only between trials of the same framework (its version)


ASPECTS: tuple[Aspect, ...] = (
    Aspect("data", True, _data),
    Aspect("bakeoff version", True, _bakeoff),
    Aspect("machine", True, lambda r: r.environment.get("host") or None),
    Aspect("framework version", True, framework_version, per_framework=True),
    Aspect("data options", False, _data_options),
    Aspect("batch size", False, lambda r: batch_text(r.run_spec)),
    Aspect("budget", False, lambda r: budget_text(r.run_spec)),
    Aspect("evaluation", False, lambda r: f"every {r.run_spec.eval_every} steps"),
    Aspect("warm-up", False, lambda r: f"{r.run_spec.warmup_steps} steps"),
    Aspect("model config", False, _config),
    Aspect("target", False, lambda r: "none" if r.target is None else fmt(r.target)),
    Aspect("device", False, lambda r: r.run_spec.device.value),
)


@dataclasses.dataclass
class Mix:
    """An aspect on which the successful trials of a section differ: each value with the configurations that had
    it (a configuration may appear under more than one value)."""

    aspect: str
    values: dict[str, list[str]]  # shown value -> configuration labels
    note: str = ""  # e.g. "each found by the batch-size search"

    def text(self) -> str:
        """``"data: train 1a2b3c4d (torch/eager); train 9f8e7d6c (tensorflow/graph)"``."""
        listed = "; ".join(f"{value} ({', '.join(labels)})" for value, labels in self.values.items())
        return f"{self.aspect}: {listed}" + (f" — {self.note}" if self.note else "")


def _values(cs: ConfigSummary, aspect: Aspect) -> list[str]:
    out: list[str] = []
    for r in cs.ok:
        v = aspect.get(r)
        if v is not None and v not in out:
            out.append(v)
    return out


def _config_diff(configs: Sequence[ConfigSummary]) -> dict[str, str]:
    """Per configuration, the resolved model-config entries that differ across ``configs``: ``"d_model 512"``."""
    dicts = {c.label: config_of(c.ok[0]) for c in configs if c.ok}
    keys = sorted({k for d in dicts.values() for k in d
                   if len({json.dumps(x.get(k), default=str) for x in dicts.values()}) > 1})
    return {label: ", ".join(f"{k} {d.get(k, '(unset)')}" for k in keys) or "the same entries"
            for label, d in dicts.items()}


def _shown(aspect: Aspect, value: str, cs: ConfigSummary, diff: Mapping[str, str]) -> str:
    return diff.get(cs.label, value) if aspect.name == "model config" else value


def section_mixes(configs: Sequence[ConfigSummary]) -> list[Mix]:
    """The aspects on which the successful trials of one (workload, preset) mix (module docstring)."""
    scored = [c for c in configs if c.n_ok]
    diff = _config_diff(scored)
    mixes = []
    for aspect in ASPECTS:
        groups = ([[c for c in scored if c.framework == fw] for fw in sorted({c.framework for c in scored})]
                  if aspect.per_framework else [scored])
        for group in groups:
            per_config = {c.label: _values(c, aspect) for c in group}
            if aspect.provenance:
                mixed = len({v for vs in per_config.values() for v in vs}) > 1
            else:
                per_fw: dict[str, set[str]] = {}
                for c in group:
                    per_fw.setdefault(c.framework, set()).update(per_config[c.label])
                mixed = len(per_fw) > 1 and len({frozenset(v) for v in per_fw.values()}) > 1
            if not mixed:
                continue
            values: dict[str, list[str]] = {}
            for c in group:
                for v in per_config[c.label]:
                    values.setdefault(_shown(aspect, v, c, diff), []).append(c.label)
            name = f"{group[0].framework} version" if aspect.per_framework else aspect.name
            searched = aspect.name == "batch size" and any(r.batch_search is not None for c in group for r in c.ok)
            mixes.append(Mix(name, values, "each found by the batch-size search" if searched else ""))
    return mixes


_PAIR_WORDS = {"data": "compares different data sets", "bakeoff version": "different bakeoff versions",
               "batch size": "different batch sizes", "budget": "different budgets",
               "evaluation": "different evaluation cadences", "warm-up": "different warm-ups",
               "model config": "different model configs", "target": "different targets",
               "device": "different devices", "data options": "different data options",
               "machine": "ran on different machines"}


def pair_note(a: ConfigSummary, b: ConfigSummary, mixes: Sequence[Mix]) -> str:
    """What the verdict's two configurations differ in among the section's mixes, ``a``'s value first:
    ``"compares different data sets: train 1a2b3c4d vs train 9f8e7d6c; different bakeoff versions"``;
    "" when they agree on every mixed aspect."""
    parts = []
    for mix in mixes:
        if mix.aspect not in _PAIR_WORDS:  # a framework's version: the two sides are different frameworks
            continue
        mine = [v for v, labels in mix.values.items() if a.label in labels]
        theirs = [v for v, labels in mix.values.items() if b.label in labels]
        if not mine or not theirs or set(mine) == set(theirs):
            continue
        words = _PAIR_WORDS[mix.aspect]
        if mix.aspect == "bakeoff version":
            parts.append(words)
        else:
            parts.append(f"{words}: {' / '.join(mine)} vs {' / '.join(theirs)}")
    return "; ".join(parts)
