"""Suites: TOML files that expand into RunSpecs.

A suite names default spec fields, a matrix of values to cross, and how many repeats::

    name = "quick"
    description = "..."
    repeats = 1                 # each repeat gets seed = defaults.seed + repeat
    timeout_s = 600             # per trial

    [defaults]                  # any RunSpec field
    workload = "text_classifier"
    max_epochs = 3

    [matrix]                    # lists of values; every combination is one configuration
    framework = ["torch", "tensorflow"]
    execution = ["eager", "graph"]

    [batch_search]              # with defaults.batch_size = "auto": the largest batch that fits, searched per
    memory_cap = "6GiB"         # configuration in fresh processes (CPU: resident-memory cap, default half the RAM)
    step = 16                   # optional: grow by this step instead of doubling

    [[variant]]                 # optional: sets of fields that go together, crossed with the matrix
    precision = "bf16"          # (e.g. fp32 / bf16 / 4 micro-batches of 8 against one batch of 32)
    [[variant]]
    batch_size = 8
    grad_accum = 4
    repeats = 3                 # a variant may repeat more or less often than the suite
    data = {batching = "bucket"}  # data options, as with --data KEY=VALUE

    [[exclude]]                 # optional: drop combinations matching all the given fields
    framework = "torch"
    execution = "xla"

    [weights]                   # optional: decision weights, see bakeoff.analysis.decide
    throughput = 0.3

    [qualitative.team_familiarity]   # optional: scores 0-5 per framework for criteria nobody can measure
    torch = 4
    tensorflow = 2

Shipped suites live in ``bakeoff/suites``; ``quick`` is the embedded default.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import tomllib
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from bakeoff.spec import Framework, RunSpec, SpecError

TOP_LEVEL = ("name", "description", "repeats", "timeout_s", "defaults", "matrix", "variant", "exclude",
             "weights", "qualitative", "batch_search")
SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(RunSpec))


@dataclasses.dataclass
class Suite:
    name: str
    description: str
    specs: list[RunSpec]
    timeout_s: float
    weights: dict[str, float]
    qualitative: dict[str, dict[str, float]]
    source: str
    auto_batch: dict[str, Any] | None = None  # batch_size = "auto": {"memory_cap": bytes|None, "step": int|None}


def shipped_suites() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("bakeoff.suites").iterdir() if p.name.endswith(".toml"))


def _line_of(text: str, key: str) -> str:
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*\[*\s*{re.escape(key)}\s*[\]=.]", line):
            return f"line {number}"
    return "somewhere"


def load_suite(name_or_path: str) -> Suite:
    """Read a shipped suite by name (``quick``) or a TOML file by path; errors name the line and the problem."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise SpecError(f"suite file {path} does not exist")
        text, source = path.read_text(), str(path)
    else:
        names = shipped_suites()
        if name_or_path not in names:
            raise SpecError(f"unknown suite {name_or_path!r}; shipped suites: {', '.join(names)} "
                            "(or give the path of a .toml file)")
        text = resources.files("bakeoff.suites").joinpath(f"{name_or_path}.toml").read_text()
        source = f"bakeoff/suites/{name_or_path}.toml"
    return parse_suite(text, source)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_weights(weights: Mapping[str, object], qualitative: Mapping[str, Mapping[str, float]] | None = None
                  ) -> dict[str, float]:
    """Decision weights as numbers, checked against the criteria of :mod:`bakeoff.analysis.decide`.

    Values may be numbers or numeric strings (``--weight throughput=0.5``). Raises :class:`SpecError` naming the
    bad criterion or value and the accepted criteria.
    """
    from bakeoff.analysis.decide import resolve_weights

    accepted = ", ".join(resolve_weights({}, qualitative))  # every measured criterion, then the qualitative ones
    out: dict[str, float] = {}
    for name, weight in weights.items():
        try:
            if not (isinstance(weight, str) or _is_number(weight)):
                raise ValueError(weight)
            out[name] = float(weight)
        except ValueError:
            raise SpecError(f"weight of {name!r} must be a number >= 0, got {weight!r}; "
                            f"accepted criteria: {accepted}") from None
    try:
        resolve_weights(out, qualitative)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    return out


def _weights_and_scores(raw: dict[str, Any], fail: Callable[[str, str], SpecError]
                        ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """``[weights]`` and ``[qualitative.*]``, checked now so that a typo fails before any trial runs."""
    frameworks = [f.value for f in Framework]
    table = raw.get("qualitative", {})
    if not isinstance(table, dict) or not all(isinstance(s, dict) for s in table.values()):
        raise fail("qualitative", "use [qualitative.CRITERION] tables of framework = score (0 to 5)")
    qualitative: dict[str, dict[str, float]] = {}
    for criterion, scores in table.items():
        where = f"qualitative.{criterion}"
        for framework, score in scores.items():
            if framework not in frameworks:
                raise fail(where, f"unknown framework {framework!r} in [{where}]; accepted: {', '.join(frameworks)}")
            if not (_is_number(score) and 0 <= score <= 5):
                raise fail(where, f"score of {framework} in [{where}] must be a number from 0 to 5, got {score!r}")
        qualitative[criterion] = {f: float(s) for f, s in scores.items()}
    weights = raw.get("weights", {})
    if not isinstance(weights, dict):
        raise fail("weights", "[weights] must be a table of criterion = weight")
    try:
        return check_weights(weights, qualitative), qualitative
    except SpecError as exc:
        raise fail("weights", f"[weights]: {exc}") from None


def parse_suite(text: str, source: str = "<suite>") -> Suite:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: not valid TOML: {exc}") from None

    def fail(key: str, problem: str) -> SpecError:
        return SpecError(f"{source}, {_line_of(text, key)}: {problem}")

    for key in raw:
        if key not in TOP_LEVEL:
            raise fail(key, f"unknown key {key!r}; accepted: {', '.join(TOP_LEVEL)}")
    defaults: dict[str, Any] = raw.get("defaults", {})
    matrix: dict[str, Any] = raw.get("matrix", {})
    variants: list[dict[str, Any]] = raw.get("variant", [{}])
    if not isinstance(variants, list) or not all(isinstance(v, dict) for v in variants):
        raise fail("variant", "use [[variant]] tables")
    for table, fields in (("defaults", defaults), ("matrix", matrix), *(("variant", v) for v in variants)):
        if not isinstance(fields, dict):
            raise fail(table, f"[{table}] must be a table")
        for key in fields:
            if table == "variant" and key == "repeats":
                continue
            if key not in SPEC_FIELDS or key == "repeat":
                raise fail(key, f"unknown field {key!r} in [{table}]; accepted: "
                                f"{', '.join(f for f in SPEC_FIELDS if f != 'repeat')}")
    for key, values in matrix.items():
        if not isinstance(values, list) or not values:
            raise fail(key, f"[matrix] {key} must be a non-empty list, got {values!r}")
    repeats = raw.get("repeats", 1)
    for value in [repeats, *(v["repeats"] for v in variants if "repeats" in v)]:
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise fail("repeats", f"repeats must be a positive integer, got {value!r}")
    excludes = raw.get("exclude", [])
    if not isinstance(excludes, list) or not all(isinstance(e, dict) for e in excludes):
        raise fail("exclude", "use [[exclude]] tables")

    auto_batch = None
    if defaults.get("batch_size") == "auto":
        options = raw.get("batch_search", {})
        unknown = sorted(set(options) - {"memory_cap", "step"})
        if unknown:
            raise fail("batch_search", f"unknown key(s) {', '.join(unknown)} in [batch_search]; "
                                       "accepted: memory_cap, step")
        from bakeoff.batch_search import parse_size

        cap = options.get("memory_cap")
        auto_batch = {"memory_cap": parse_size(cap) if cap is not None else None, "step": options.get("step")}
        defaults = {**defaults, "batch_size": 1}  # placeholder: replaced by the searched size before running
    keys = list(matrix)
    specs: list[RunSpec] = []
    base_seed = int(defaults.get("seed", 0))
    # Repeat-major order: repeat 0 of every configuration, then repeat 1, ... The runner keeps repeats in turn and
    # interleaves frameworks within each (bakeoff.runner.order), so drift of the machine lands on every side.
    for repeat in range(max(repeats, *(v.get("repeats", repeats) for v in variants))):
        for combo, variant in itertools.product(itertools.product(*(matrix[k] for k in keys)), variants):
            if repeat >= variant.get("repeats", repeats):
                continue
            variant = {k: v for k, v in variant.items() if k != "repeats"}
            fields = {**defaults, **dict(zip(keys, combo, strict=True)), **variant}
            if any(all(str(fields.get(k)) == str(v) for k, v in e.items()) for e in excludes):
                continue
            fields.update(repeat=repeat, seed=base_seed + repeat)
            if "workload" not in fields or "framework" not in fields:
                raise fail("defaults", "every configuration needs a workload and a framework")
            try:
                specs.append(RunSpec.from_dict(fields))
            except (SpecError, TypeError) as exc:
                raise SpecError(f"{source}: {exc}") from None
    if not specs:
        raise SpecError(f"{source}: the suite expands to no trials")
    weights, qualitative = _weights_and_scores(raw, fail)
    return Suite(name=str(raw.get("name", Path(source).stem)), description=str(raw.get("description", "")),
                 specs=specs, timeout_s=float(raw.get("timeout_s", 900)), weights=weights,
                 qualitative=qualitative, source=source, auto_batch=auto_batch)
