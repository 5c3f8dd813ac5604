"""What ran, per (workload, preset): the data, the model, the budget and what was trained, the target, the modes,
the machine settings and versions, the machines (when its trials ran on several), the command that reproduces it —
and a warning when the section's trials differ in what a comparison needs equal (:mod:`bakeoff.analysis.mixing`).

A fact the configurations share is one value; one that differs lists each value with its configurations:
``32 (torch/eager); 64 (tensorflow/graph)``. Everything is read from the stored results (spec, ``setup.data``,
``setup.config``, ``training.steady_steps``, ``training.epochs``, ``order``); a fact the trials
did not record is left out rather than guessed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from bakeoff.analysis.conditions import threads
from bakeoff.analysis.mixing import Mix, budget_text, config_of, data_hashes, framework_version
from bakeoff.analysis.quantities import fmt, steady_steps
from bakeoff.analysis.stats import ConfigSummary, short_hash
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import Device, RunSpec
from bakeoff.core.workload import TARGET_NOT_RECORDED, TARGET_SOURCES
from bakeoff.report.reproduce import reproduce_commands, suite_commands
from bakeoff.report.templates import Block, Code, Facts, Heading, Para

MAX_CLASS_NAMES = 8
"""Class names listed before "…"."""

_DATA_KEYS_SHOWN = ("source", "classes", "majority_rate", "baseline_mse", "rows", "target", "target_source",
                    "vocab_size_used", "class_counts", "reading")

IMBALANCE = 1.5
"""Test classes whose largest is more than this many times the smallest are imbalanced: the report gives balanced
accuracy beside accuracy."""

FILE_OPTIONS = ("train", "test", "dir")
"""Data options that name files, for results stored before content hashes (newer ones: the hashed options)."""


def _first(c: ConfigSummary) -> TrialResult:
    return (c.ok or c.trials)[0]


def per_config(configs: Sequence[ConfigSummary], text: Callable[[ConfigSummary], str | None]) -> str | None:
    """One value when every configuration gives the same, else ``"v1 (a, b); v2 (c)"``; ``None`` when none does."""
    values: dict[str, list[str]] = {}
    for c in configs:
        v = text(c)
        if v is not None:
            values.setdefault(v, []).append(c.label)
    if not values:
        return None
    if len(values) == 1:
        return next(iter(values))
    return "; ".join(f"{v} ({', '.join(labels)})" for v, labels in values.items())


def _span(values: Sequence[float], digits: int = 3) -> str:
    """``"71"``, or ``"63–71"`` when the runs differ."""
    lo, hi = min(values), max(values)
    return fmt(lo, digits) if lo == hi else f"{fmt(lo, digits)}–{fmt(hi, digits)}"


def _info(c: ConfigSummary) -> dict[str, Any]:
    info = _first(c).setup.data
    return dict(info) if isinstance(info, Mapping) else {}


def data_files(spec: RunSpec) -> dict[str, str]:
    """The data options that name files: those with a content hash (or, stored before hashes, :data:`FILE_OPTIONS`)."""
    hashes = data_hashes(spec)
    return {k: v for k, v in spec.data if k in hashes or (not spec.content and k in FILE_OPTIONS)}


def data_text(c: ConfigSummary) -> str:
    """Where the data came from: ``"shipped"``, or ``"train=reviews.csv (content 1a2b3c4d)"``; then the data
    options that name no file (``batching=bucket``)."""
    spec = _first(c).run_spec
    hashes, files = data_hashes(spec), data_files(spec)
    head = ", ".join(f"{k}={v} " + (f"(content {hashes[k]})" if k in hashes else "(no content hash recorded)")
                     for k, v in files.items()) or "shipped with bakeoff"
    options = [f"{k}={v}" for k, v in spec.data if k not in files]
    return head + (f"; options {', '.join(options)}" if options else "")


def imbalanced(configs: Sequence[ConfigSummary]) -> bool:
    """Whether the test split's classes are imbalanced (:data:`IMBALANCE`), as the trials' data described them."""
    for c in configs:
        test = (_info(c).get("class_counts") or {}).get("test")
        if isinstance(test, list) and test and min(test) >= 0:
            return max(test) > IMBALANCE * max(min(test), 1)
    return False


def balanced_text(c: ConfigSummary) -> str | None:
    """``"0.71 (median of 3 runs' last evaluation; accuracy 0.80)"``: the mean per-class recall, beside accuracy."""
    last = [r.curve[-1] for r in c.ok if r.curve and "balanced_accuracy" in r.curve[-1]]
    if not last:
        return None
    balanced = float(np.median([p["balanced_accuracy"] for p in last]))
    accuracy = float(np.median([p["metric"] for p in last]))
    return (f"{fmt(balanced)} (median of {len(last)} run{'s' if len(last) > 1 else ''}' last evaluation; accuracy "
            f"{fmt(accuracy)}): each class's recall averaged, so the small classes count as much as the large")


def data_set_text(c: ConfigSummary) -> str | None:
    """What the data set held, as the workload described it: ``"<source> · 2 classes (great, other) · majority
    class 0.658 of the test split"``."""
    info = _info(c)
    if not info:
        return None
    source = str(info.get("source", ""))
    parts = [source] if source else []
    rows = info.get("rows")
    if isinstance(rows, Mapping) and " train" not in source:
        parts.append(" / ".join(f"{int(n):,} {split}" for split, n in rows.items()) + " rows")
    classes = info.get("classes")
    n_classes = len(classes) if isinstance(classes, list) else config_of(_first(c)).get("num_classes")
    if n_classes:
        names = ""
        if isinstance(classes, list):
            shown = ", ".join(map(str, classes[:MAX_CLASS_NAMES])) + (", …" if len(classes) > MAX_CLASS_NAMES else "")
            names = f" ({shown})"
        parts.append(f"{n_classes} classes{names}")
    counts = info.get("class_counts")
    if isinstance(classes, list) and isinstance(counts, Mapping) and counts and all(
            isinstance(v, list) and len(v) == len(classes) for v in counts.values()):
        splits = list(counts)
        per_class = [f"{name} " + " / ".join(f"{int(counts[split][i]):,}" for split in splits)
                     for i, name in enumerate(classes[:MAX_CLASS_NAMES])]
        more = ", …" if len(classes) > MAX_CLASS_NAMES else ""
        parts.append(f"rows per class ({' / '.join(splits)}): {', '.join(per_class)}{more}")
    if isinstance(info.get("majority_rate"), int | float):
        parts.append(f"majority class {fmt(info['majority_rate'])} of the test split")
    read = info.get("reading")
    if isinstance(read, Mapping) and "seq_len" in read:
        parts.append(f"texts of {fmt(read['mean_tokens'])} tokens on average (median {fmt(read['median_tokens'])}); "
                     f"the model reads the first {read['seq_len']}: {read['texts_cut']:.0%} of texts cut, "
                     f"{read['tokens_unread']:.0%} of all tokens unread")
    if isinstance(info.get("baseline_mse"), int | float):
        parts.append(f"predicting zeros scores mse {fmt(info['baseline_mse'])}")
    parts += [f"{k} {v}" for k, v in info.items() if k not in _DATA_KEYS_SHOWN and isinstance(v, str | int | float)]
    return " · ".join(parts) or None


def preset_text(c: ConfigSummary) -> str:
    """``"tiny, no overrides"`` or ``"tiny, overridden: d_model=512, learning_rate=0.003"``."""
    spec = _first(c).run_spec
    overrides = [f"{k}={v}" for k, v in spec.config]
    if spec.learning_rate is not None:
        overrides.append(f"learning_rate={spec.learning_rate:g}")
    return f"{spec.preset}, " + (f"overridden: {', '.join(overrides)}" if overrides else "no overrides")


def model_text(c: ConfigSummary) -> str | None:
    """The resolved configuration, compact: ``"vocab_size 4000 · d_model 64 · ..."``."""
    config = _first(c).setup.config
    if not isinstance(config, Mapping) or not config:
        return None
    return " · ".join(f"{k} {json.dumps(v) if isinstance(v, list | dict) else v}" for k, v in config.items())


def params_text(c: ConfigSummary) -> str | None:
    counts = sorted({r.num_params for r in c.ok if r.num_params is not None})
    return ", ".join(f"{n:,}" for n in counts) if counts else None


def batch_fact(c: ConfigSummary) -> str:
    spec = _first(c).run_spec
    text = (f"{spec.batch_size * spec.grad_accum} examples per optimizer step: {spec.grad_accum} accumulated "
            f"micro-batches of {spec.batch_size}" if spec.grad_accum > 1 else f"{spec.batch_size} per step")
    return text + (", found by the batch-size search" if any(r.batch_search is not None for r in c.trials) else "")


def trained_text(c: ConfigSummary) -> str | None:
    """``"71 steps, 0.6 epochs, 67 steady, stopped at the target in 3/3 runs"`` (ranges when the runs differ)."""
    ok = c.ok
    if not ok:
        return "nothing: no successful trial"
    steps = [len(r.step_times_s) for r in ok]
    steady = [r.training.steady_steps if r.training.steady_steps is not None else len(steady_steps(r)) for r in ok]
    epochs = [r.training.epochs for r in ok if r.training.epochs is not None]
    parts = [f"{_span(steps)} steps"] + ([f"{_span(epochs, 2)} epochs"] if epochs else [])
    warmup = ok[0].run_spec.warmup_steps
    parts.append(f"{_span(steady)} steady" if max(steady) > 0 else
                 f"no steady step (the first step and {warmup} warm-up steps are not timed as steady)")
    text = ", ".join(parts)
    spec = ok[0].run_spec
    if spec.stop_at_target and c.target is not None:
        text += f", stopped at the target in {c.reached}/{c.n_ok} runs"
    return text


def target_rule(r: TrialResult) -> str | None:
    """How the trial's target was set, as recorded: ``training.target_rule``, or the rule of the target the
    workload derived from user data (``setup.data["target"]``)."""
    info = r.setup.data if isinstance(r.setup.data, Mapping) else {}
    derived = info.get("target")
    for rule in (r.training.target_rule, derived.get("rule") if isinstance(derived, Mapping) else None,
                 info.get("target_source")):
        if rule:
            return str(rule)
    return None


def target_source(r: TrialResult) -> str | None:
    """Where the trial's target came from, a key of :data:`~bakeoff.core.workload.TARGET_SOURCES`: as recorded
    (``training.target_source``); for a result stored before it was, only what its record settles — a target the
    user set, or one derived from user data — and ``None`` otherwise: such a result called a workload's declared
    target "measured" too, so its word is not taken."""
    if r.training.target_source in TARGET_SOURCES:
        return r.training.target_source
    info = r.setup.data if isinstance(r.setup.data, Mapping) else {}
    rule = r.training.target_rule
    if r.run_spec.target is not None or rule.startswith(TARGET_SOURCES["user"]):
        return "user"
    if isinstance(info.get("target"), Mapping) or rule.startswith("derived"):
        return "derived"
    return None


def target_origin(r: TrialResult) -> str:
    """``"measured for preset tiny on the shipped data"``, ``"declared by the workload for preset tiny, not
    measured"``: where the trial's target came from (:data:`~bakeoff.core.workload.TARGET_SOURCES`), with how it
    was set when the record says more; for an older result that did not record it, ``"the workload's for preset
    tiny, source not recorded"``."""
    source, rule = target_source(r), target_rule(r)
    if source is None:
        return (f"the workload's for preset {r.run_spec.preset}, {TARGET_NOT_RECORDED} (stored before bakeoff "
                "recorded whether a target was measured or declared)")
    words = TARGET_SOURCES[source]
    if not rule:
        return words + (" (--target or the suite)" if source == "user" else "")
    return rule if rule.split()[0] == words.split()[0] else f"{words} ({rule})"


def target_text(c: ConfigSummary) -> str | None:
    """``"accuracy ≥ 0.75, measured for preset tiny on the shipped data"``: the target and where it came from
    (:func:`target_origin`)."""
    first = _first(c)
    target = next((r.target for r in c.trials if r.target is not None), None)
    if target is None:
        return "none: time to target not measured"
    return f"{first.metric_name or 'metric'} {'≥' if first.higher_is_better else '≤'} {fmt(target)}, " \
           f"{target_origin(first)}"


def threads_text(c: ConfigSummary) -> str:
    """``"all 16 cores"`` or ``"4 of 16 cores"``: the threads the spec asked for, on the machine's cores."""
    spec = _first(c).run_spec
    cores = next((r.environment.get("cores") for r in c.trials if r.environment.get("cores")), None)
    if spec.threads == 0:
        return f"all {cores} cores" if cores else "all cores"
    return f"{spec.threads} of {cores} cores" if cores else str(spec.threads)


def pools_text(c: ConfigSummary) -> str | None:
    """``"16 / 1"``: the intra- / inter-op pools the engine set, as recorded."""
    recorded = threads(c)
    return None if recorded == "—" else recorded


def device_text(c: ConfigSummary) -> str:
    spec = _first(c).run_spec
    seen = sorted({str(r.environment["device"]) for r in c.trials if r.environment.get("device")})
    return spec.device.value + (f" → {', '.join(seen)}" if seen and spec.device is Device.AUTO else "")


def machines_text(c: ConfigSummary) -> str | None:
    """``"node-a (2 trials), node-b (1 trial)"``: the machines (hosts) the configuration's trials ran on."""
    hosts: dict[str, int] = {}
    for r in c.trials:
        if r.environment.get("host"):
            hosts[str(r.environment["host"])] = hosts.get(str(r.environment["host"]), 0) + 1
    return ", ".join(f"{h} ({n} trial{'s' if n != 1 else ''})" for h, n in sorted(hosts.items())) or None


def machines(configs: Sequence[ConfigSummary]) -> set[str]:
    """Every machine (host) the section's trials ran on, as recorded."""
    return {str(r.environment["host"]) for c in configs for r in c.trials if r.environment.get("host")}


def seeds_text(c: ConfigSummary) -> str:
    seeds = sorted({r.run_spec.seed for r in c.trials})
    trials = f"{c.n_total} trial{'s' if c.n_total != 1 else ''}"
    return f"{trials}, {c.n_ok} successful, seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def versions_text(configs: Sequence[ConfigSummary]) -> str:
    bakeoff = sorted({short_hash(v) for c in configs for r in c.trials
                      if (v := dict(r.run_spec.content).get("bakeoff"))})
    frameworks = sorted({framework_version(r) for c in configs for r in c.ok})
    head = f"bakeoff {', '.join(bakeoff)}" if bakeoff else "bakeoff version not recorded"
    return "; ".join([head, *frameworks])


def order_text(configs: Sequence[ConfigSummary]) -> str | None:
    seeds = sorted({r.order.seed for c in configs for r in c.trials if r.order is not None})
    if not seeds:
        return None
    return (f"frameworks take turns within each repeat, shuffled with order seed {', '.join(map(str, seeds))}")


def retries_text(configs: Sequence[ConfigSummary]) -> str | None:
    """The trials ``bakeoff run --retry-busy`` measured again, and which of each one's two measurements the report
    reads (the quieter): ``"torch/eager repeat 1 (--retry-busy): busy again (...): kept the first measurement ..."``.
    """
    from bakeoff.analysis.conditions import retry_note
    from bakeoff.results.store import busy_retry

    said = [f"{c.label} repeat {r.run_spec.repeat} (--retry-busy): {retry_note(record)}"
            for c in configs for r in c.trials if (record := busy_retry(r)) is not None]
    return "; ".join(said) or None


# ---------------------------------------------------------------------------------------------------------------
# Blocks


def mix_warning(mixes: Sequence[Mix]) -> Para | None:
    """The warning before the tables when the section mixes (:func:`bakeoff.analysis.mixing.section_mixes`)."""
    if not mixes:
        return None
    return Para("these trials differ in what a comparison needs equal — " + " · ".join(m.text() for m in mixes)
                + ". Their numbers come from different experiments: re-run the configurations so that they match "
                  "(the same data files, bakeoff version and settings), or read each part on its own.",
                "warning")


def what_ran_blocks(configs: Sequence[ConfigSummary], suites: Mapping[str, str] | None = None,
                    suite_files: Mapping[str, str] | None = None) -> list[Block]:
    """The "What ran" facts and the "Reproduce" commands of one (workload, preset)."""
    facts = [
        ("Data", per_config(configs, data_text)),
        ("Data set", per_config(configs, data_set_text)),
        ("Preset", per_config(configs, preset_text)),
        ("Model", per_config(configs, model_text)),
        ("Parameters", per_config(configs, params_text)),
        ("Batch", per_config(configs, batch_fact)),
        ("Budget", per_config(configs, lambda c: "at most " + budget_text(_first(c).run_spec))),
        ("Trained", per_config(configs, trained_text)),
        ("Evaluation", per_config(configs, lambda c: f"every {_first(c).run_spec.eval_every} steps on the test "
                                                     "split, off the training clock")),
        ("Target", per_config(configs, target_text)),
        ("Balanced accuracy", per_config(configs, balanced_text) if imbalanced(configs) else None),
        ("Precision", per_config(configs, lambda c: _first(c).run_spec.precision.value)),
        ("Execution", per_config(configs, lambda c: _first(c).run_spec.execution.value)),
        ("Threads", per_config(configs, threads_text)),
        ("Thread pools, intra / inter-op", per_config(configs, pools_text)),
        ("Device", per_config(configs, device_text)),
        ("Machines", per_config(configs, machines_text) if len(machines(configs)) > 1 else None),
        ("Runs", per_config(configs, seeds_text)),
        ("Versions", versions_text(configs) if configs else None),
        ("Order", order_text(configs)),
        ("Measured again", retries_text(configs)),
    ]
    blocks: list[Block] = [Heading(3, "What ran"), Facts([(k, v) for k, v in facts if v])]
    commands, notes = reproduce_commands(configs)
    suite_lines = suite_commands(configs, suites or {}, suite_files)
    if commands:
        blocks += [Heading(3, "Reproduce"), Para("Run from the directory the trials ran in (data paths are as "
                                                 "given then):" if any(_first(c).run_spec.data for c in configs)
                                                 else "The trials of this section, again:"),
                   Code(commands)]
        if suite_lines:
            blocks += [Para("Or the whole suite they came from:"), Code(suite_lines)]
        if notes:
            blocks.append(Para("Not set by these flags: " + "; ".join(notes) + "."))
    return blocks
