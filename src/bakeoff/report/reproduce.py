"""The "Reproduce" commands of a report's section (:mod:`bakeoff.report.what_ran` shows them under "What ran"): the
``bakeoff run`` flags that run the section's trials again, grouped by what they share, what those flags cannot set,
and the suites the trials came from."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bakeoff.analysis.stats import ConfigSummary
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import Device, Parallelism, RunSpec


def workload_flag(spec: RunSpec) -> str:
    """What ``--workload`` takes to run ``spec``'s workload again: its name, or for a workload found by reference
    (its own file or module, outside bakeoff) the file it is in as ``FILE.py:Class`` (an absolute path: it runs from
    any folder), else ``module:Class``."""
    if not spec.workload_class:
        return spec.workload
    module, _, cls = spec.workload_class.partition(":")
    if spec.workload_path:
        base = Path(spec.workload_path).joinpath(*module.split("."))
        file = base.with_suffix(".py") if base.with_suffix(".py").is_file() or not (base / "__init__.py").is_file() \
            else base / "__init__.py"
        return f"{file}:{cls}"
    return spec.workload_class


def _flags(spec: RunSpec) -> tuple[list[str], list[str]]:
    """The ``bakeoff run`` flags of everything but framework, execution, precision, seed and repeat; and the spec
    fields no flag sets."""
    flags = ["--workload", workload_flag(spec), "--preset", spec.preset, "--batch-size", str(spec.batch_size)]
    flags += ["--grad-accum", str(spec.grad_accum)] if spec.grad_accum > 1 else []
    if spec.parallelism is not Parallelism.NONE:
        flags += ["--parallelism", spec.parallelism.value, "--workers", str(spec.workers)]
    flags += ["--max-steps", str(spec.max_steps)] if spec.max_steps is not None else []
    flags += ["--max-epochs", f"{spec.max_epochs:g}"] if spec.max_epochs is not None else []
    flags += ["--max-seconds", f"{spec.max_seconds:g}"] if spec.max_seconds is not None else []
    flags += ["--eval-every", str(spec.eval_every)] + (["--stop-at-target"] if spec.stop_at_target else [])
    flags += ["--threads", str(spec.threads)] if spec.threads else []
    flags += ["--device", spec.device.value] if spec.device is not Device.AUTO else []
    flags += ["--checkpoint-every", str(spec.checkpoint_every)] if spec.checkpoint_every else []
    for k, v in spec.data:
        flags += ["--data", f"{k}={v}"]
    overrides = [*spec.config] + ([("learning_rate", f"{spec.learning_rate:g}")] if spec.learning_rate else [])
    for k, v in overrides:
        flags += ["--set", f"{k}={v}"]
    flags += ["--target", f"{spec.target:g}"] if spec.target is not None else []
    unflagged = [f"warmup_steps = {spec.warmup_steps}"] if spec.warmup_steps != 3 else []
    return flags, unflagged


def _seed_flags(trials: Sequence[TrialResult]) -> tuple[list[list[str]], str]:
    """``--seed S --repeats N`` when the trials' (seed, repeat) are (S + r, r) for r < N, as ``bakeoff run`` and
    suites make them; otherwise one ``--seed S --repeats 1`` per seed, and a note saying what that leaves out."""
    pairs = sorted({(r.run_spec.seed, r.run_spec.repeat) for r in trials}, key=lambda p: (p[1], p[0]))
    s0 = pairs[0][0] - pairs[0][1]
    if pairs == [(s0 + i, i) for i in range(len(pairs))]:
        return [["--seed", str(s0), "--repeats", str(len(pairs))]], ""
    seeds = sorted({p[0] for p in pairs})
    note = (f"{len(pairs)} runs with seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}, which "
            "`--repeats` cannot make (it gives repeat r the seed + r): one run per seed")
    return [["--seed", str(s), "--repeats", "1"] for s in seeds], note


def _modes(triples: set[tuple[str, str, str]]) -> list[list[tuple[str, str, str]]]:
    """Split (framework, execution, precision) triples into groups each of which is a full cross product, as
    ``--framework A,B --execution X,Y --precision P`` runs: all at once, else per framework, else one by one."""
    def crossed(group: set[tuple[str, str, str]]) -> bool:
        sizes = [len({t[i] for t in group}) for i in range(3)]
        return len(group) == sizes[0] * sizes[1] * sizes[2]

    if crossed(triples):
        return [sorted(triples)]
    by_fw = [{t for t in triples if t[0] == fw} for fw in sorted({t[0] for t in triples})]
    if all(crossed(g) for g in by_fw):
        return [sorted(g) for g in by_fw]
    return [[t] for t in sorted(triples)]


def _csv(values: Sequence[str]) -> str:
    return ",".join(dict.fromkeys(values))


def reproduce_commands(configs: Sequence[ConfigSummary]) -> tuple[list[str], list[str]]:
    """The ``bakeoff run`` lines that run these configurations again, and the settings no flag can set."""
    groups: dict[str, dict[str, Any]] = {}
    notes: dict[str, list[str]] = {}  # note -> configurations
    for c in configs:
        if not c.trials:
            continue
        spec = c.trials[0].run_spec
        flags, unflagged = _flags(spec)
        seed_flags_list, seed_note = _seed_flags(c.trials)
        for note in [f"{n}: not a flag, only a suite sets it" for n in unflagged] + ([seed_note] if seed_note else []):
            notes.setdefault(note, []).append(c.label)
        for seed_flags in seed_flags_list:
            key = json.dumps([flags, seed_flags])
            group = groups.setdefault(key, {"flags": flags, "seeds": seed_flags, "modes": set()})
            group["modes"].add((spec.framework.value, spec.execution.value, spec.precision.value))
    lines = []
    for group in groups.values():
        for modes in _modes(group["modes"]):
            flags = group["flags"][:2] + ["--framework", _csv([m[0] for m in modes]),
                                          "--execution", _csv([m[1] for m in modes]),
                                          "--precision", _csv([m[2] for m in modes])] + group["flags"][2:]
            lines.append(" ".join(["bakeoff", "run", *map(shlex.quote, flags + group["seeds"])]))
    return lines, [f"{note} ({', '.join(labels)})" for note, labels in notes.items()]


def suite_commands(configs: Sequence[ConfigSummary], suites: Mapping[str, str],
                   suite_files: Mapping[str, str] | None = None) -> list[str]:
    """``bakeoff run --suite NAME`` for the shipped suites the trials came from, ``--suite FILE`` for a suite file
    the store recorded (``suite_files``: name -> the file it was read from); a placeholder for other suite files.
    Ad-hoc runs (``adhoc-*``) and suites overridden from the command line (stored as ``NAME+HASH``) have none:
    the flag lines are their command."""
    from bakeoff.plan.suite import shipped_suites

    names = sorted({n for c in configs for r in c.trials if (n := suites.get(r.key) or r.execution.suite)})
    shipped = shipped_suites()
    lines = []
    for name in names:
        if name in shipped:
            lines.append(f"bakeoff run --suite {shlex.quote(name)}")
        elif not name.startswith("adhoc-") and "+" not in name:
            file = (suite_files or {}).get(name, "")
            lines.append(f"bakeoff run --suite {shlex.quote(file)}" if file.endswith(".toml") else
                         f"bakeoff run --suite SUITE.toml   # the suite file named {name!r}")
    return lines
