"""Suites: TOML files that expand into RunSpecs.

A suite names default spec fields, a matrix of values to cross, and how many repeats::

    name = "quick"
    description = "..."
    repeats = 1                 # each repeat gets seed = defaults.seed + repeat; or "auto" (adaptive, below)
    max_repeats = 6             # with repeats = "auto": at most this many runs per configuration
    timeout_s = 600             # per trial

    [defaults]                  # any RunSpec field (but repeat and content)
    workload = "text_classifier"  # or your own: "my_models.sentiment:Sentiment", "models/sentiment.py:Sentiment"
    max_epochs = 3
    target = 0.8                # optional: the quality target (default: the workload's, derived for user data)

    [config]                    # optional: overrides of the preset's model and training fields (`bakeoff list
    d_model = 128               # --presets` shows them), typed like the preset's own values
    num_layers = 4

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
    config = {d_model = 256}    # config overrides, as with --set KEY=VALUE

    [[exclude]]                 # optional: drop combinations matching all the given fields
    framework = "torch"
    execution = "xla"

    [weights]                   # optional: decision weights, see bakeoff.analysis.decide
    throughput = 0.3
    team_familiarity = 0.2      # a qualitative criterion needs a weight here, or its scores are refused

    [qualitative.team_familiarity]   # optional: scores 0-5 per framework for criteria nobody can measure
    torch = 4
    tensorflow = 2

``data`` and ``config`` tables merge key by key: a variant's ``config = {d_model = 256}`` keeps the
``num_layers`` of ``[config]``. Every value is checked when the suite loads (its type, its range, the accepted
choices), so a typo fails with the line before any trial runs.

Command-line flags override a suite (:func:`load_suite`'s ``overrides``) as if written into it: the field is set
in every trial and removed from the matrix and the variants; a list flag (``--framework torch,tensorflow``)
becomes the matrix's list; a budget flag replaces the whole budget; ``--data`` and ``--set`` merge key by key;
``--repeats`` sets every variant's repeats. ``repeats = "auto"`` (``--repeats auto``) is adaptive: every
configuration runs :data:`~bakeoff.plan.suite_checks.FIRST_REPEATS` times, then each (workload, preset) whose
verdict is not settled gets one more run per configuration, again and again, up to ``max_repeats``
(``--max-repeats``) runs
(:mod:`bakeoff.run.adaptive`). A configuration without parallelism has one worker whatever the
matrix's ``workers`` (``--parallelism none,data_parallel --workers 2`` is a single-device baseline and 2 replicas).
The suite's excludes still apply (``--framework torch`` on a suite
that excludes torch in graph mode runs torch's other trials). ``--workload`` is refused with a
suite (a suite names its workloads), and so is ``--target`` with a suite of several workloads. An overridden
suite is stored under its name plus a hash of the overrides (``quick+3f9a1c``), so its trials never mix with the
suite's own; :attr:`Suite.overrides` and the description say what was overridden.

Shipped suites live in ``bakeoff/suites``; ``quick`` is the embedded default.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import re
import tomllib
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from bakeoff.core import frameworks
from bakeoff.core.spec import RunSpec, SpecError
from bakeoff.plan.suite_checks import (
    BUDGET,
    LISTS,
    PRODUCTION,
    SPEC_FIELDS,
    TABLES,
    adaptive_repeats,
    as_table,
    batch_search,
    check_fields,
    check_overrides,
    flag_of,
    is_number,
    weights_and_scores,
)

TOP_LEVEL = ("name", "description", "repeats", "max_repeats", "timeout_s", "defaults", "config", "matrix", "variant",
             "exclude", "weights", "qualitative", "batch_search")


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
    # repeats = "auto": {"first": FIRST_REPEATS, "max": max_repeats}; specs then hold the first repeats only
    adaptive: dict[str, int] | None = None
    # Command-line flags that overrode the suite file in every trial, flag -> value as given ({"--max-steps": "4"});
    # empty for a suite run as written and for ad-hoc trials (whose flags are the suite).
    overrides: dict[str, str] = dataclasses.field(default_factory=dict)

    def title(self) -> str:
        """The report's heading: the suite, or an ad-hoc run's workload, and the data its trials read when a data
        option names any (``"bakeoff: text_classifier on bbc_topics.csv"``), so a report says what it is about."""
        files = sorted({Path(value).name for spec in self.specs for _, value in spec.data})
        on = f" on {', '.join(files)}" if files else ""
        return f"bakeoff: {self.name.removeprefix('adhoc-')}{on}"


def shipped_suites() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("bakeoff.suites").iterdir() if p.name.endswith(".toml"))


def _line_of(text: str, key: str) -> str:
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*\[*\s*{re.escape(key)}\s*[\]=.]", line):
            return f"line {number}"
    return "somewhere"


def _override_digest(overrides: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(overrides.items())).encode()).hexdigest()[:6]


def _shown(value: Any) -> str:
    if isinstance(value, Mapping):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def _apply_overrides(raw: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The suite's tables with ``overrides`` written in: each overridden field set in ``[defaults]`` (a list field
    as the matrix's list) and removed from the matrix and the variants; any budget field replaces the whole
    budget. The excludes still apply. ``data`` and ``config`` are merged later, over every trial's own."""
    raw = copy.deepcopy(raw)
    replaced = {k for k in overrides if k in SPEC_FIELDS and k not in TABLES}
    if replaced & set(BUDGET):
        replaced |= set(BUDGET)
    if "learning_rate" in overrides.get("config", {}):  # --set learning_rate=... replaces the suite's field too
        replaced.add("learning_rate")
    defaults = raw.setdefault("defaults", {})
    matrix = raw.setdefault("matrix", {})
    variants = raw.get("variant", [{}])
    for table in (defaults, matrix, *variants):
        if isinstance(table, dict):
            for key in replaced - ({*LISTS} if table is matrix else set()):  # a matrix list keeps its place
                table.pop(key, None)
    for key in replaced & set(overrides):
        if key in LISTS:
            matrix[key] = list(overrides[key])
        else:
            defaults[key] = overrides[key]
    if "max_repeats" in overrides:
        raw["max_repeats"] = overrides["max_repeats"]
    if "repeats" in overrides:
        raw["repeats"] = overrides["repeats"]
        for variant in variants:
            if isinstance(variant, dict):
                variant.pop("repeats", None)
    search = {k: overrides[k] for k in ("memory_cap", "batch_step") if k in overrides}
    if search:
        table = raw.get("batch_search", {})
        raw["batch_search"] = {**(table if isinstance(table, dict) else {}),
                               **{"step" if k == "batch_step" else k: v for k, v in search.items()}}
    return raw


def load_suite(name_or_path: str, overrides: Mapping[str, Any] | None = None) -> Suite:
    """Read a shipped suite by name (``quick``) or a TOML file by path; errors name the line and the problem.

    ``overrides`` are command-line values that replace the suite's (see the module docstring and
    :func:`check_overrides`).
    """
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
    return parse_suite(text, source, overrides)


ADHOC_DEFAULTS: dict[str, Any] = {
    "preset": "tiny", "batch_size": 32, "grad_accum": 1, "max_epochs": 1.0, "eval_every": 25,
    "stop_at_target": False, "checkpoint_every": 0, "seed": 0, "threads": 0, "device": "auto",
}
ADHOC_MATRIX: dict[str, list[str]] = {"framework": frameworks.native(), "execution": ["eager", "graph"],
                                      "precision": ["fp32"]}
"""Ad-hoc trials (``bakeoff run --workload ...``) when a flag is not given: what ``bakeoff run --help`` states."""


def adhoc_suite(overrides: Mapping[str, Any]) -> Suite:
    """Trials from command-line flags alone: ``overrides`` (with a ``workload``) over :data:`ADHOC_DEFAULTS` and
    :data:`ADHOC_MATRIX`, checked like a suite's, so a bad flag fails naming the flag."""
    given = check_overrides(overrides, with_suite=False)
    if "workload" not in given:
        raise SpecError("give --suite NAME|FILE, or --workload with the ad-hoc trial options")
    workload = given.pop("workload")
    name = _workload_fields(str(workload))["workload"]
    matrix = dict(ADHOC_MATRIX)
    if "framework" not in given:  # of the default frameworks, those the workload has a model in
        from bakeoff.core import registry

        implemented = registry.models(str(workload))
        matrix["framework"] = [fw for fw in matrix["framework"] if fw in implemented] or matrix["framework"]
    raw = {"name": f"adhoc-{name}", "description": "trials from command-line flags", "timeout_s": 900,
           "defaults": {"workload": workload, **ADHOC_DEFAULTS}, "matrix": matrix}
    return _build(raw, "command line", "", given, record=False)


def parse_suite(text: str, source: str = "<suite>", overrides: Mapping[str, Any] | None = None) -> Suite:
    """A suite from TOML text, every value checked, with the command-line ``overrides`` applied. Read from a file,
    a workload it names by a relative ``FILE.py:CLASS`` is found beside the suite file (else, as before, under the
    current folder), so the suite runs from any folder."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: not valid TOML: {exc}") from None
    if source.endswith(".toml") and Path(source).is_file():
        raw = _anchored(raw, Path(source).resolve().parent)
    return _build(raw, source, text, check_overrides(overrides or {}), record=True)


def _anchored(raw: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``raw`` with each relative ``FILE.py[:CLASS]`` workload that lies in ``folder`` made absolute."""
    def anchor(value: Any) -> Any:
        if isinstance(value, list):
            return [anchor(v) for v in value]
        if not isinstance(value, str):
            return value
        left, colon, cls = value.rpartition(":") if ":" in value else (value, "", "")
        if not left.endswith(".py") or Path(left).is_absolute() or not (folder / left).is_file():
            return value
        return f"{(folder / left).resolve()}{colon}{cls}"

    out = dict(raw)
    for table in ("defaults", "matrix"):
        if isinstance(out.get(table), dict) and "workload" in out[table]:
            out[table] = {**out[table], "workload": anchor(out[table]["workload"])}
    if isinstance(out.get("variant"), list):
        out["variant"] = [{**v, "workload": anchor(v["workload"])} if isinstance(v, dict) and "workload" in v else v
                          for v in out["variant"]]
    return out


def _build(raw: dict[str, Any], source: str, text: str, overrides: dict[str, Any], record: bool) -> Suite:
    """Check the tables, apply the (checked) ``overrides``, expand into specs. ``record``: the overrides change a
    suite the user wrote, so the suite is renamed and says so."""

    def fail(key: str, problem: str) -> SpecError:
        return SpecError(f"{source}, {_line_of(text, key)}: {problem}" if text else f"{source}: {problem}")

    raw = _apply_overrides(_checked_tables(raw, fail), overrides)
    adaptive = adaptive_repeats(raw, overrides, fail)
    defaults: dict[str, Any] = raw["defaults"]
    matrix: dict[str, Any] = raw["matrix"]
    variants, excludes, repeats = raw.get("variant", [{}]), raw.get("exclude", []), raw.get("repeats", 1)
    auto = defaults.get("batch_size") == "auto"
    check_fields(defaults, matrix, variants, auto, fail)
    auto_batch = batch_search(raw.get("batch_search"), auto, overrides, fail)
    if auto:
        defaults = {**defaults, "batch_size": 1}  # placeholder: replaced by the searched size before running

    specs = _expand(defaults, matrix, variants, excludes, repeats, overrides, source, fail)
    if "target" in overrides and len({s.workload for s in specs}) > 1:
        raise SpecError(f"--target {overrides['target']}: this suite runs several workloads "
                        f"({', '.join(sorted({s.workload for s in specs}))}), each with its own metric; set target "
                        "per [[variant]] in the suite, or run one workload ad hoc (without --suite)")
    weights, qualitative = weights_and_scores(raw, fail)
    name, description, shown = _named(raw, source, overrides, record)
    return Suite(name=name, description=description, specs=specs, timeout_s=float(raw.get("timeout_s", 900)),
                 weights=weights, qualitative=qualitative, source=source, auto_batch=auto_batch, overrides=shown,
                 adaptive=adaptive)


def _checked_tables(raw: dict[str, Any], fail: Callable[[str, str], SpecError]) -> dict[str, Any]:
    """The suite's top-level keys, tables, timeout, field names and repeats, checked as written (before the
    overrides); ``raw`` with a ``[config]`` table moved into ``[defaults]``."""
    for key in raw:
        if key not in TOP_LEVEL:
            raise fail(key, f"unknown key {key!r}; accepted: {', '.join(TOP_LEVEL)}")
    for key, kind in (("name", str), ("description", str), ("defaults", dict), ("matrix", dict),
                      ("config", dict), ("batch_search", dict)):
        if key in raw and not isinstance(raw[key], kind):
            raise fail(key, f"{key} must be {'a string' if kind is str else f'a table: [{key}]'}, got {raw[key]!r}")
    timeout = raw.get("timeout_s", 900)
    if not (is_number(timeout) and timeout > 0):
        raise fail("timeout_s", f"timeout_s must be a number of seconds above 0, got {timeout!r}")
    variants = raw.get("variant", [{}])
    if not isinstance(variants, list) or not all(isinstance(v, dict) for v in variants):
        raise fail("variant", "use [[variant]] tables")
    excludes = raw.get("exclude", [])
    if not isinstance(excludes, list) or not all(isinstance(e, dict) for e in excludes):
        raise fail("exclude", "use [[exclude]] tables")
    if "config" in raw:
        if "config" in raw.get("defaults", {}):
            raise fail("config", "give the config overrides once: a [config] table or config in [defaults]")
        raw = {**raw, "defaults": {**raw.get("defaults", {}), "config": raw["config"]}}
    accepted = ", ".join(SPEC_FIELDS)
    tables = (("defaults", raw.get("defaults", {})), ("matrix", raw.get("matrix", {})),
              *(("variant", v) for v in variants), *(("exclude", e) for e in excludes))
    for table, fields in tables:
        for key in fields:
            if not (key in SPEC_FIELDS or (table == "variant" and key == "repeats")):
                raise fail(key, f"unknown field {key!r} in [{table}]; accepted: {accepted}")
    repeats = raw.get("repeats", 1)
    given = [v["repeats"] for v in variants if "repeats" in v] + ([] if repeats == "auto" else [repeats])
    for value in given:  # "auto" is for the whole suite only
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise fail("repeats", f"repeats must be a positive integer, got {value!r}"
                                  + (' (or "auto" at the top of the suite)' if value == "auto" else ""))
    return raw


def _named(raw: dict[str, Any], source: str, overrides: Mapping[str, Any], record: bool
           ) -> tuple[str, str, dict[str, str]]:
    """The suite's name and description, and the flags shown as overriding it: with ``record`` and overrides, the
    name gets their digest and the description says what they set."""
    name, description = str(raw.get("name", Path(source).stem)), str(raw.get("description", ""))
    shown: dict[str, str] = {}
    if record and overrides:
        shown = {flag_of(k): _shown(v) for k, v in overrides.items()}
        name = f"{name}+{_override_digest(shown)}"
        said = ", ".join(f"{flag} {value}" for flag, value in shown.items())
        description = f"{description} (overridden from the command line in every trial: {said})".lstrip()
    return name, description, shown


def _expand(defaults: dict[str, Any], matrix: dict[str, list[Any]], variants: list[dict[str, Any]],
            excludes: list[dict[str, Any]], repeats: int, overrides: Mapping[str, Any], source: str,
            fail: Callable[[str, str], SpecError]) -> list[RunSpec]:
    """Every configuration × repeat as a RunSpec, in repeat-major order, duplicates dropped."""
    keys = list(matrix)
    specs: dict[str, RunSpec] = {}
    base_seed = int(defaults.get("seed", 0))
    # Repeat-major order: repeat 0 of every configuration, then repeat 1, ... The runner keeps repeats in turn and
    # interleaves frameworks within each (bakeoff.plan.order.order), so drift of the machine lands on
    # every side.
    for repeat in range(max(repeats, *(v.get("repeats", repeats) for v in variants))):
        for combo, variant in itertools.product(itertools.product(*(matrix[k] for k in keys)), variants):
            if repeat >= variant.get("repeats", repeats):
                continue
            layers = (defaults, dict(zip(keys, combo, strict=True)),
                      {k: v for k, v in variant.items() if k != "repeats"})
            fields = {k: v for layer in layers for k, v in layer.items()}
            for table in TABLES:  # data and config merge key by key; the command line's win
                merged = {k: v for layer in layers for k, v in as_table(layer.get(table, {})).items()}
                merged.update(overrides.get(table, {}))
                fields[table] = merged
            if any(all(str(fields.get(k)) == str(v) for k, v in e.items()) for e in excludes):
                continue
            if fields.get("execution") == PRODUCTION and "framework" in fields:
                from bakeoff.core import frameworks

                fields["execution"] = frameworks.get(str(fields["framework"])).production[0].value
            if str(fields.get("parallelism", "none")) == "none":
                fields["workers"] = 1  # one process: a matrix's workers apply to its distributed configurations
            fields.update(repeat=repeat, seed=base_seed + repeat)
            if "workload" not in fields or "framework" not in fields:
                raise fail("defaults", "every configuration needs a workload and a framework")
            fields.update(_workload_fields(str(fields["workload"])))  # a name, or what a trial resolves
            try:
                spec = RunSpec.from_dict(fields)
            except (SpecError, TypeError, ValueError) as exc:
                raise SpecError(f"{source}: {exc}") from None
            specs.setdefault(spec.key(), spec)
    if not specs:
        raise SpecError(f"{source}: the suite expands to no trials")
    return list(specs.values())


def _workload_fields(text: str) -> dict[str, str]:
    from bakeoff.core import registry

    return registry.workload_fields(text)
