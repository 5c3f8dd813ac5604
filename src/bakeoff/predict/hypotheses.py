"""Claims as hypotheses over measured quantities (``bakeoff claims``, issue #29): what was said, its measurable form,
the trials that test it, and the hardware it needs.

A claims file (the shipped ``bakeoff/predict/claims.toml``, or the user's) holds ``[[claim]]`` tables of three forms::

    [[claim]]                           # a ratio of one quantity between two configurations
    name = "graph_build"                # unique, a word: how output and JSON name the claim
    said = "TensorFlow's graph takes 15 minutes to build, PyTorch's 5"   # the claim as it was told
    quantity = "graph_build_s"          # a name of bakeoff.analysis.quantities.QUANTITIES
    at_least = 3.0                      # value(a) / value(b) >= 3; or at_most = 0.6 (one of the two)
    a = {framework = "tensorflow", execution = "graph"}   # RunSpec fields over [claim.trials]
    b = {framework = "torch", execution = "graph"}
    each = [{framework = "torch"}, {framework = "jax"}]   # optional: one comparison per entry, over a and b
    repeats = 3                         # runs per side [3]: fewer can only be unsettled
    needs = {gpus = 8}                  # optional: what this machine must have to run the trials
    evaluate = false                    # optional [true]: false for a claim about training time alone, whose
                                        # trials never evaluate the test split (a large preset's takes minutes)
    meaning = "..."                     # optional: why this quantity and threshold are the claim's measurable form
    [claim.trials]                      # RunSpec fields every trial of the claim shares (a suite's [defaults])
    workload = "text_classifier"        # the scale the claim is judged at: each verdict names it
    preset = "paper"
    max_steps = 4
    [claim.plan]                        # optional, with needs: the capacity plan's answer when it cannot run here
    preset = "paper"                    # or params / layers, width, heads, seq, vocab, ffn (bakeoff plan's flags)
    batch = 256
    devices = 8
    memory = "80GB"
    flops = 312e12
    bandwidth = "300GB/s"

    [[claim]]                           # what bakeoff deploy exported and ran
    name = "tflite_mobile"
    said = "TF Lite is the mobile path"
    deployment = {framework = "tensorflow", format = "litert", target = "mobile"}

    [[claim]]                           # no measurable form: said so, never given a number
    name = "ddp_libraries"
    said = "PyTorch's DDP needs extra libraries and manual process management"
    testable = false
    why = "..."

Everything is checked when the file loads (:func:`load_claims`): an unknown key, quantity, spec field or value, a
format a framework does not export, a claim without a threshold — each raises :class:`~bakeoff.core.spec.SpecError`
naming the claim, the field and the accepted values, before any trial runs.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bakeoff.core.spec import Parallelism, RunSpec, SpecError
from bakeoff.predict.capacity import FIELDS

if TYPE_CHECKING:
    from bakeoff.predict.capacity import Plan

CLAIM_KEYS = ("name", "said", "quantity", "at_least", "at_most", "a", "b", "each", "repeats", "needs", "evaluate",
              "meaning", "trials", "plan", "deployment", "testable", "why")
NEEDS_KEYS = ("gpus",)
DEPLOYMENT_KEYS = ("framework", "format", "target")
SELF_NAMED = ("framework", "execution", "precision", "parallelism", "device")
"""Fields whose value names itself in a comparison's label (``torch eager``; others as ``grad_accum=2``)."""
DEFAULT_REPEATS = 3
SHIPPED = "bakeoff/predict/claims.toml"


@dataclasses.dataclass(frozen=True)
class Comparison:
    """One ratio a claim predicts: ``a`` over ``b``, each a configuration run ``repeats`` times (one spec a run).
    ``label``: the ``each`` entry it was made for (``"torch eager"``), '' for a claim with one comparison."""

    label: str
    a: tuple[RunSpec, ...]
    b: tuple[RunSpec, ...]

    @property
    def specs(self) -> list[RunSpec]:
        return [*self.a, *self.b]


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim and its measurable form (see the module docstring). ``form``: "ratio", "deployment" or
    "untestable"."""

    name: str
    said: str
    form: str
    quantity: str = ""
    at_least: float | None = None
    at_most: float | None = None
    comparisons: tuple[Comparison, ...] = ()
    gpus: int = 0  # GPUs the trials need on this machine (0: any machine)
    evaluate: bool = True  # whether the trials evaluate the test split (False: a claim about training time alone)
    meaning: str = ""
    plan: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    deployment: Mapping[str, str] = dataclasses.field(default_factory=dict)
    why: str = ""

    @property
    def threshold(self) -> str:
        """``"≥ 3x"``, ``"≤ 0.6x"``; '' for a claim that is not a ratio."""
        if self.at_least is not None:
            return f"≥ {self.at_least:g}x"
        return f"≤ {self.at_most:g}x" if self.at_most is not None else ""

    @property
    def specs(self) -> list[RunSpec]:
        """Every trial of the claim, each once (a configuration shared by two comparisons runs once)."""
        return list({s.key(): s for c in self.comparisons for s in c.specs}.values())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "said": self.said, "form": self.form}
        if self.form == "ratio":
            out.update(quantity=self.quantity, threshold=self.threshold, at_least=self.at_least,
                       at_most=self.at_most, needs_gpus=self.gpus, evaluate=self.evaluate, meaning=self.meaning)
        elif self.form == "deployment":
            out.update(deployment=dict(self.deployment))
        else:
            out.update(why=self.why)
        return out


def configuration(spec: RunSpec) -> str:
    """What makes a trial one run of a claim's configuration: its spec without seed, repeat and content (the runner's
    content hashes: a stored result matches whatever versions it was measured with)."""
    raw = {k: v for k, v in spec.to_dict().items() if k not in ("seed", "repeat", "content", "workload_path")}
    return json.dumps(raw, sort_keys=True, default=str)


def load_claims(path: str | Path | None = None) -> list[Claim]:
    """The claims of the file at ``path`` (the shipped ones when None), every value checked."""
    if path is None:
        return parse_claims(resources.files("bakeoff.predict").joinpath("claims.toml").read_text(), SHIPPED)
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"--file {path}: no such claims file")
    return parse_claims(path.read_text(), str(path))


def parse_claims(text: str, source: str = "<claims>") -> list[Claim]:
    """Claims from TOML text (see the module docstring); :class:`SpecError` names the claim and field of a bad one."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{source}: not valid TOML: {exc}") from None
    unknown = sorted(set(raw) - {"claim"})
    if unknown:
        raise SpecError(f"{source}: unknown key(s) {', '.join(unknown)}; a claims file holds [[claim]] tables only")
    tables = raw.get("claim", [])
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise SpecError(f"{source}: no claims: write each as a [[claim]] table")
    claims: list[Claim] = []
    for i, table in enumerate(tables, 1):
        claim = _claim(table, f"{source}, claim {table.get('name', i)!r}" if "name" in table
                       else f"{source}, claim {i}")
        if any(c.name == claim.name for c in claims):
            raise SpecError(f"{source}: two claims are named {claim.name!r}; names must be unique")
        claims.append(claim)
    return claims


def _claim(t: dict[str, Any], where: str) -> Claim:
    def fail(field: str, problem: str) -> SpecError:
        return SpecError(f"{where}, {field}: {problem}")

    unknown = sorted(set(t) - set(CLAIM_KEYS))
    if unknown:
        raise fail(unknown[0], f"unknown field; accepted: {', '.join(CLAIM_KEYS)}")
    for field in ("name", "said"):
        if not isinstance(t.get(field), str) or not t[field].strip():
            raise fail(field, "give a non-empty string")
    if not t["name"].replace("_", "").replace("-", "").isalnum():
        raise fail("name", f"{t['name']!r}: use letters, digits, _ and - only")
    common = {"name": t["name"], "said": t["said"].strip()}
    if t.get("testable", True) is not True:
        if t["testable"] is not False:
            raise fail("testable", f"give true or false, got {t['testable']!r}")
        extra = sorted(set(t) - {"name", "said", "testable", "why"})
        if extra:
            raise fail(extra[0], "a claim with testable = false has no measurable form: give name, said and why")
        if not isinstance(t.get("why"), str) or not t["why"].strip():
            raise fail("why", "say why the claim has no measurable form")
        return Claim(form="untestable", why=t["why"].strip(), **common)
    if "deployment" in t:
        extra = sorted(set(t) - {"name", "said", "deployment", "meaning"})
        if extra:
            raise fail(extra[0], "a deployment claim is judged on what `bakeoff deploy` stored: give name, said, "
                                 "deployment (and meaning)")
        return Claim(form="deployment", deployment=_deployment(t["deployment"], fail),
                     meaning=_text(t, "meaning", fail), **common)
    return _ratio_claim(t, common, fail)


def _text(t: Mapping[str, Any], field: str, fail: Any) -> str:
    value = t.get(field, "")
    if not isinstance(value, str):
        raise fail(field, f"give a string, got {value!r}")
    return value.strip()


def _deployment(value: Any, fail: Any) -> dict[str, str]:
    from bakeoff.core.formats import FORMATS

    if not isinstance(value, dict) or sorted(value) != sorted(DEPLOYMENT_KEYS):
        raise fail("deployment", f"give a table of {', '.join(DEPLOYMENT_KEYS)}, got {value!r}")
    fmt = FORMATS.get(str(value["format"]))
    if fmt is None:
        raise fail("deployment.format", f"unknown format {value['format']!r}; accepted: {', '.join(FORMATS)}")
    if fmt.framework != value["framework"]:
        owners = sorted({f.framework for f in FORMATS.values()})
        raise fail("deployment.framework", f"{value['framework']!r} does not export {fmt.name} ({fmt.framework} "
                                           f"does); frameworks that export: {', '.join(owners)}")
    if value["target"] not in fmt.targets:
        raise fail("deployment.target", f"{fmt.name} is deployed to {', '.join(fmt.targets)}, not "
                                        f"{value['target']!r}")
    return {k: str(value[k]) for k in DEPLOYMENT_KEYS}


def _ratio_claim(t: dict[str, Any], common: dict[str, str], fail: Any) -> Claim:
    from bakeoff.analysis.quantities import QUANTITIES

    if t.get("quantity") not in QUANTITIES:
        raise fail("quantity", f"unknown quantity {t.get('quantity')!r}; accepted: {', '.join(QUANTITIES)}")
    bounds = {k: t[k] for k in ("at_least", "at_most") if k in t}
    if len(bounds) != 1:
        raise fail("at_least", "give the threshold as at_least = R or at_most = R (one of the two): the ratio "
                               "value(a) / value(b) the claim predicts")
    (bound, threshold), = bounds.items()
    if not (_number(threshold) and threshold > 0 and math.isfinite(threshold)):
        raise fail(bound, f"give a ratio above 0, got {threshold!r}")
    repeats = t.get("repeats", DEFAULT_REPEATS)
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise fail("repeats", f"give a positive integer, got {repeats!r}")
    gpus = _needs(t.get("needs", {}), fail)
    evaluate = t.get("evaluate", True)
    if not isinstance(evaluate, bool):
        raise fail("evaluate", f"give true or false, got {evaluate!r}")
    trials, a, b = (_fields(t.get(k), k, fail) for k in ("trials", "a", "b"))
    each = t.get("each", [{}])
    if not isinstance(each, list) or not each or not all(isinstance(e, dict) for e in each):
        raise fail("each", "give a list of tables of RunSpec fields, e.g. [{framework = \"torch\"}]")
    each = [_fields(e, "each", fail) for e in each]
    comparisons = []
    for entry in each:
        label = " ".join(str(v) if k in SELF_NAMED else f"{k}={v}" for k, v in entry.items())
        sides = [_specs({**trials, **entry, **side}, repeats, name, fail) for name, side in (("a", a), ("b", b))]
        if configuration(sides[0][0]) == configuration(sides[1][0]):
            raise fail("b", f"{label + ': ' if label else ''}a and b are the same configuration: a claim compares two")
        comparisons.append(Comparison(label, tuple(sides[0]), tuple(sides[1])))
    plan = _plan(t.get("plan"), gpus, fail)
    return Claim(form="ratio", quantity=t["quantity"], at_least=float(threshold) if bound == "at_least" else None,
                 at_most=float(threshold) if bound == "at_most" else None, comparisons=tuple(comparisons), gpus=gpus,
                 evaluate=evaluate, meaning=_text(t, "meaning", fail), plan=plan, **common)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _needs(value: Any, fail: Any) -> int:
    if not isinstance(value, dict) or set(value) - set(NEEDS_KEYS):
        raise fail("needs", f"give a table of {', '.join(NEEDS_KEYS)}, e.g. {{gpus = 8}}; got {value!r}")
    gpus = value.get("gpus", 0)
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
        raise fail("needs.gpus", f"give a number of GPUs >= 0, got {gpus!r}")
    return gpus


def _fields(value: Any, table: str, fail: Any) -> dict[str, Any]:
    """A table of RunSpec fields, each checked as a suite checks it (its type, range and accepted values)."""
    from bakeoff.plan.suite_checks import SPEC_FIELDS, field_problem

    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(table, f"give a table of RunSpec fields, got {value!r}")
    for key, v in value.items():
        if key not in SPEC_FIELDS or key in ("seed",):
            accepted = [f for f in SPEC_FIELDS if f != "seed"]
            raise fail(f"{table}.{key}", f"unknown configuration field {key!r}; accepted: {', '.join(accepted)}")
        if problem := field_problem(key, v):
            raise fail(f"{table}.{key}", problem)
    return dict(value)


def _specs(fields: dict[str, Any], repeats: int, side: str, fail: Any) -> list[RunSpec]:
    """One spec per run of a side: seeds 0..repeats-1, as a suite's repeats are."""
    from bakeoff.core import registry

    for needed in ("workload", "framework"):
        if needed not in fields:
            raise fail(side, f"no {needed}: give it in [claim.trials], in {side} or in each")
    if str(fields.get("parallelism", "none")) == Parallelism.NONE.value:
        fields = {**fields, "workers": 1}
    fields = {**fields, **registry.workload_fields(str(fields["workload"]))}
    try:
        return [RunSpec.from_dict({**fields, "seed": repeat, "repeat": repeat}) for repeat in range(repeats)]
    except (SpecError, TypeError, ValueError) as exc:
        raise fail(side, str(exc)) from None


def _plan(value: Any, gpus: int, fail: Any) -> dict[str, Any]:
    """``[claim.plan]``: checked by making the plan once (so a bad shape fails now, not when it is shown)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail("plan", "give a table of bakeoff plan's fields")
    unknown = sorted(set(value) - set(FIELDS))
    if unknown:
        raise fail(f"plan.{unknown[0]}", f"unknown field; accepted: {', '.join(FIELDS)}")
    if not gpus:
        raise fail("plan", "a plan answers for hardware this machine may lack: give needs = {gpus = N} with it")
    try:
        capacity_plan(value, "", {})  # the framework is not read: every framework's rows
    except SpecError as exc:
        raise fail("plan", str(exc)) from None
    return dict(value)


def capacity_plan(fields: Mapping[str, Any], framework: str, mfu: Mapping[str, Mapping[str, tuple[float, str]]],
                  devices: int | None = None) -> Plan:
    """:func:`bakeoff.predict.capacity.plan` for a claim's ``[claim.plan]`` (on ``devices`` instead of its own when
    given); ``mfu``: the MFUs measured per kind of device (:func:`~bakeoff.predict.capacity.measured_mfu`), of which
    only the plan's kind is used."""
    from bakeoff.predict.capacity import plan_from

    return plan_from(fields, None, devices=devices, measured=mfu, in_file=True)


def all_specs(claims: Sequence[Claim]) -> list[RunSpec]:
    """Every trial of ``claims``, each once."""
    return list({s.key(): s for claim in claims for s in claim.specs}.values())

