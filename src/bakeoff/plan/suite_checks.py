"""What a suite (or a command-line flag) may set, and the checks on it: the RunSpec fields a suite may name, each
field's value (:func:`field_problem`), the command line's overrides (:func:`check_overrides`), decision weights and
qualitative scores (:func:`check_weights`), memory sizes (:func:`parse_size`). :mod:`bakeoff.plan.suite` reads a
suite with them; every problem is a :class:`SpecError` naming what is accepted.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

from bakeoff.core.spec import Framework, RunSpec, SpecError

SPEC_FIELDS = tuple(f.name for f in dataclasses.fields(RunSpec)
                    if f.name not in ("repeat", "content", "workload_class", "workload_path"))
"""The RunSpec fields a suite (or a flag) may set: ``repeat`` comes from ``repeats``, ``content`` from the runner,
``workload_class`` and ``workload_path`` from resolving ``workload`` (:func:`bakeoff.core.registry.workload_fields`)."""

BUDGET = ("max_steps", "max_epochs", "max_seconds")
LISTS = ("framework", "execution", "precision", "parallelism", "workers")  # fields a flag may list (a matrix list)
TABLES = ("data", "config")  # fields that merge key by key
POSITIVE = ("workers", "batch_size", "grad_accum", "eval_every", "max_steps", "max_epochs", "max_seconds",
            "learning_rate")
SIGNED = ("target",)  # any finite number: the workload checks it against its metric's range
OVERRIDE_ONLY = ("repeats", "max_repeats", "memory_cap", "batch_step")  # override keys that are not RunSpec fields
FIRST_REPEATS = 3
"""Adaptive repeats (``repeats = "auto"``) start with this many runs per configuration: the fewest a verdict may
say "wins" on (:data:`bakeoff.analysis.verdict.MIN_RUNS`)."""
DEFAULT_MAX_REPEATS = 10
"""Adaptive repeats add runs, one repeat at a time, to the sections whose verdict is unsettled, up to this many: with
the group-sequential levels (:func:`bakeoff.analysis.intervals.sequential_confidence`), 3 to 10 runs call a true
1.15x at 5% noise and 1.3x at 10% in at least 80% of simulated bake-offs (``tests/test_calibration.py``); 3 to 6
called the first in 31% with Bonferroni's levels."""

_HINTS = typing.get_type_hints(RunSpec, localns={"Framework": Framework})  # Framework: built from the records


def is_number(value: object) -> bool:
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
            if not (isinstance(weight, str) or is_number(weight)):
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


def weights_and_scores(raw: dict[str, Any], fail: Callable[[str, str], SpecError]
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
            if not (is_number(score) and 0 <= score <= 5):
                raise fail(where, f"score of {framework} in [{where}] must be a number from 0 to 5, got {score!r}")
        qualitative[criterion] = {f: float(s) for f, s in scores.items()}
    weights = raw.get("weights", {})
    if not isinstance(weights, dict):
        raise fail("weights", "[weights] must be a table of criterion = weight")
    unweighted = [c for c in qualitative if c not in weights]
    if unweighted:  # scores without a weight would count for nothing, silently
        first = unweighted[0]
        raise fail(f"qualitative.{first}", f"[qualitative.{first}] has scores but no weight: add `{first} = 0.2` "
                                           f"(or any weight; 0 records the scores without counting them) under "
                                           f"[weights]")
    try:
        return check_weights(weights, qualitative), qualitative
    except SpecError as exc:
        raise fail("weights", f"[weights]: {exc}") from None


def flag_of(key: str) -> str:
    """The command-line flag that sets a suite field or override key (``config`` -> ``--set``)."""
    return "--set" if key == "config" else "--" + key.replace("_", "-")


PRODUCTION = "production"
"""The execution that stands for each framework's own: the first of its record's production modes (PyTorch eager,
TensorFlow graph, JAX jit, each Keras backend its default), as the quick suite runs them."""


def field_problem(name: str, value: Any) -> str:
    """Why ``value`` cannot be the RunSpec field ``name`` ('' when it can), naming what is accepted.

    Types follow the RunSpec annotations (``int | None`` takes an integer, ``float`` any number, an enum one of
    its values); sizes and budgets must be positive, counts and seeds not negative.
    """
    hint = _HINTS[name]
    kind = next((t for t in typing.get_args(hint) if t is not type(None)), hint)
    kind = typing.get_origin(kind) or kind
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        accepted = [m.value for m in kind] + ([PRODUCTION] if name == "execution" else [])
        return "" if value in accepted else f"unknown {name} {value!r}; accepted: {', '.join(accepted)}"
    if kind is bool:
        return "" if isinstance(value, bool) else f"{name} must be true or false, got {value!r}"
    if kind in (int, float):
        number = is_number(value) and (kind is float or isinstance(value, int)) and math.isfinite(value)
        noun = "an integer" if kind is int else "a number"
        if name in POSITIVE:
            ok, want = number and value > 0, f"{'a positive integer' if kind is int else 'a number above 0'}"
        elif name in SIGNED:
            ok, want = number, noun
        else:
            ok, want = number and value >= 0, f"{noun} >= 0"
        return "" if ok else f"{name} must be {want}, got {value!r}"
    if kind is str:
        if name == "workload" and isinstance(value, str) and value:
            from bakeoff.core import registry  # imported when a suite is read: numpy, workload classes

            try:
                registry.workload_fields(value)
            except SpecError as exc:
                return str(exc)
        return "" if isinstance(value, str) and value else f"{name} must be a non-empty string, got {value!r}"
    if kind is tuple:  # data / config: a table of KEY = value
        scalar = (str, int, float, bool)
        if isinstance(value, Mapping) and all(
                isinstance(v, scalar) or (name == "config" and isinstance(v, list)
                                          and all(isinstance(x, scalar) for x in v)) for v in value.values()):
            return ""
        what = "numbers, strings, booleans or lists of them" if name == "config" else "numbers or strings"
        return f"{name} must be a table of KEY = value with {what}, got {value!r}"
    raise AssertionError(f"no check for RunSpec field {name} of type {hint}")  # a new field needs one here


def as_table(value: Mapping[str, Any]) -> dict[str, str]:
    """A data / config table as RunSpec keeps it: strings, lists in TOML's spelling (``[16, 32]``)."""
    return {str(k): json.dumps(v) if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in value.items()}


def check_overrides(overrides: Mapping[str, Any], with_suite: bool = True) -> dict[str, Any]:
    """Command-line values for a suite, checked; raises :class:`SpecError` naming the flag, the value and what
    is accepted. Keys are RunSpec fields (lists for :data:`LISTS`, dicts for :data:`TABLES`) and
    :data:`OVERRIDE_ONLY`; ``None`` values (flags not given) are dropped."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        if value is None:
            continue
        flag = flag_of(key)

        def refuse(problem: str, shown: Any = value, flag: str = flag) -> SpecError:
            if isinstance(shown, Mapping):
                shown = " ".join(f"{k}={v}" for k, v in shown.items())
            elif isinstance(shown, list):
                shown = ",".join(map(str, shown))
            return SpecError(f"{flag} {shown}: {problem}")

        if key == "workload" and with_suite:
            raise refuse("a suite names its workloads, so --workload cannot override it; run the workload ad hoc "
                         "(without --suite), or edit the suite")
        if key in LISTS:
            if not value:
                raise refuse(f"give at least one {key}")
            for item in value:
                if problem := field_problem(key, item):
                    raise refuse(problem)
        elif key == "repeats" and value == "auto":
            pass
        elif key == "max_repeats":
            if not (isinstance(value, int) and value >= FIRST_REPEATS):
                raise refuse(f"max repeats must be an integer >= {FIRST_REPEATS}, got {value!r}")
        elif key == "repeats" or key == "batch_step":
            if not (isinstance(value, int) and value >= 1):
                raise refuse(f"{key.replace('_', ' ')} must be a positive integer, got {value!r}")
        elif key == "memory_cap":
            try:
                parse_size(value)  # kept as given, so it is shown as given
            except SpecError as exc:
                raise refuse(str(exc)) from None
        elif key == "batch_size" and value == "auto":
            pass
        elif key in TABLES:
            value = as_table(value)
        elif key == "batch_size" and field_problem(key, value):
            raise refuse(f"batch_size must be a positive integer or 'auto', got {value!r}")
        elif key in SPEC_FIELDS:
            if problem := field_problem(key, value):
                raise refuse(problem)
        else:
            raise AssertionError(f"unknown override {key!r}")  # the CLI passes only the keys above
        out[key] = value
    return out



def adaptive_repeats(raw: dict[str, Any], overrides: Mapping[str, Any], fail: Callable[[str, str], SpecError]
                      ) -> dict[str, int] | None:
    """With ``repeats = "auto"`` (after the overrides): ``{"first": ..., "max": ...}``, and ``raw``'s repeats set to
    the first runs; else ``None``, refusing a ``max_repeats`` given without it."""
    adaptive = None
    if raw.get("repeats", 1) == "auto":
        most = raw.get("max_repeats", DEFAULT_MAX_REPEATS)
        if not isinstance(most, int) or isinstance(most, bool) or most < FIRST_REPEATS:
            raise fail("max_repeats", f"max_repeats must be an integer >= {FIRST_REPEATS}, got {most!r}")
        adaptive, raw["repeats"] = {"first": FIRST_REPEATS, "max": most}, FIRST_REPEATS
    elif "max_repeats" in overrides:
        raise SpecError('--max-repeats applies only with --repeats auto (or repeats = "auto" in the suite)')
    elif "max_repeats" in raw:
        raise fail("max_repeats", 'max_repeats applies only with repeats = "auto" (or --repeats auto)')
    return adaptive


def check_fields(defaults: dict[str, Any], matrix: dict[str, Any], variants: list[dict[str, Any]], auto: bool,
                  fail: Callable[[str, str], SpecError]) -> None:
    """Every value of ``[defaults]``, the matrix's lists and the variants, checked as its RunSpec field (``auto``: a
    batch size searched, so ``batch_size = "auto"`` in ``[defaults]``)."""
    for key, values in matrix.items():
        if not isinstance(values, list) or not values:
            raise fail(key, f"[matrix] {key} must be a non-empty list, got {values!r}")
    checked = [("defaults", {k: v for k, v in defaults.items() if not (auto and k == "batch_size")}),
               *(("matrix", {k: v}) for k, values in matrix.items() for v in values),
               *(("variant", {k: v for k, v in variant.items() if k != "repeats"}) for variant in variants)]
    for table, fields in checked:
        for key, value in fields.items():
            if problem := field_problem(key, value):
                hint = " ('auto' is accepted in [defaults] only)" if value == "auto" else ""
                raise fail(key, f"[{table}] {problem}{hint}")


def batch_search(options: Any, auto: bool, overrides: Mapping[str, Any], fail: Callable[[str, str], SpecError]
                  ) -> dict[str, Any] | None:
    """``[batch_search]`` checked: with ``auto`` (``batch_size = "auto"``), ``{"memory_cap": bytes|None, "step":
    int|None}``; without, ``None``, refusing the table (or its flags) given."""
    if auto:
        options = options or {}
        unknown = sorted(set(options) - {"memory_cap", "step"})
        if unknown:
            raise fail("batch_search", f"unknown key(s) {', '.join(unknown)} in [batch_search]; "
                                       "accepted: memory_cap, step")
        cap, step = options.get("memory_cap"), options.get("step")
        if step is not None and not (isinstance(step, int) and not isinstance(step, bool) and step >= 1):
            raise fail("batch_search", f"[batch_search] step must be a positive integer, got {step!r}")
        try:
            return {"memory_cap": parse_size(cap) if cap is not None else None, "step": step}
        except SpecError as exc:
            raise fail("batch_search", f"[batch_search] memory_cap: {exc}") from None
    if options is not None:
        given = [flag_of(k) for k in ("memory_cap", "batch_step") if k in overrides]
        if given:
            verb = "apply" if len(given) > 1 else "applies"
            raise SpecError(f"{' and '.join(given)} {verb} only with --batch-size auto "
                            f"(or batch_size = \"auto\" in the suite's [defaults])")
        raise fail("batch_search", '[batch_search] applies only with batch_size = "auto" in [defaults]')
    return None


def parse_size(text: str) -> int:
    """``"6GiB"``, ``"512MiB"``, ``"2G"`` or plain bytes → bytes (K, M, G, T are binary units either way)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", str(text), re.IGNORECASE)
    if not match:
        raise SpecError(f"cannot read memory size {text!r}; write e.g. 6GiB, 512MiB or 2G")
    return int(float(match[1]) * 1024 ** " kmgt".index(match[2].lower() or " "))
