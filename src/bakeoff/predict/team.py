"""A team file: what the team says it knows and what the project must deploy to, each value with who declared it
and when. ``bakeoff run --survey team.toml`` and ``bakeoff report --survey team.toml`` read it; the report shows
these values as declared, beside the measured ones (:mod:`bakeoff.report.declared`)::

    [survey]                      # the team-familiarity survey: one [[answer]] per person
    source = "ML platform team survey (form of 2026-11-20)"   # who or what declared the answers
    date = 2026-11-20             # when (a TOML date, or "YYYY-MM-DD")
    weight = 0.2                  # optional: team_familiarity's decision weight (default 0: shown, not counted)

    [[answer]]
    person = "ana"                # each person once
    torch = 4                     # framework = proficiency on the scale below (an integer 0 to 5)
    jax = 2
    source = "ana, by e-mail"     # optional: this answer's own source and date, over [survey]'s
    date = 2026-11-22

    [targets]                     # where the project must deploy
    need = ["server", "mobile"]   # any of server, mobile, browser, edge
    source = "product brief v3, 'Where it runs'"
    date = 2026-11-18
    weight = 0.3                  # optional: deploy_targets' decision weight (default 0)

Every answer and the targets carry a source and a date (an answer may take [survey]'s). ``bakeoff report
--weight team_familiarity=W`` is used over the file's weight. A suite's bare ``[qualitative.team_familiarity]``
scores and a team file's survey cannot both be given: the run or report is refused, naming both.

**The scale** (:data:`SCALE`): 0 never used it, 1 followed a tutorial, 2 wrote small programs with it, 3 trained
and debugged models with it on my own, 4 shipped a model with it, 5 could teach it or debug its internals.

**The team-familiarity rule** (:func:`familiarity`): a framework's score is the mean proficiency over every person
who answered, a framework a person did not rate counting as 0 ("never used it"); so 0..5, like a qualitative score,
and it enters the decision as one (divided by 5, weighted). A framework nobody rated scores 0.

Bad input fails when the file is read, before any trial runs, naming the line and the accepted values: an unknown
key or framework, a proficiency off the scale, a missing source or date, a person twice, an unknown target.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bakeoff.core.spec import Framework, SpecError

SCALE: dict[int, str] = {0: "never used it", 1: "followed a tutorial", 2: "wrote small programs with it",
                         3: "trained and debugged models with it on my own", 4: "shipped a model with it",
                         5: "could teach it or debug its internals"}
"""The proficiency scale every answer is on."""

KNOWS = 3
"""The level the report counts as "knows it" (trained and debugged models with it alone), beside the score."""

FAMILIARITY = "team_familiarity"
TARGETS = "deploy_targets"
SECTIONS = ("survey", "answer", "targets")
SURVEY_KEYS = ("source", "date", "weight")
ANSWER_KEYS = ("person", "source", "date")
TARGET_KEYS = ("need", "source", "date", "weight")


def framework_order(frameworks: Iterable[str]) -> list[str]:
    """``frameworks`` in the order :class:`~bakeoff.core.spec.Framework` lists them (unknown ones last)."""
    order = {f.value: i for i, f in enumerate(Framework)}
    return sorted(set(frameworks), key=lambda fw: (order.get(fw, len(order)), fw))


def scale_text() -> str:
    return ", ".join(f"{level} {meaning}" for level, meaning in SCALE.items())


def accepted_targets() -> list[str]:
    """Every deployment target some format bakeoff exports reaches (:data:`bakeoff.core.formats.FORMATS`)."""
    from bakeoff.core.formats import FORMATS

    order = ("server", "mobile", "browser", "edge")
    found = {t for f in FORMATS.values() for t in f.targets}
    return [t for t in order if t in found] + sorted(found - set(order))


@dataclasses.dataclass(frozen=True)
class Provenance:
    """Who or what declared a value, and when."""

    source: str
    date: datetime.date

    def text(self) -> str:
        return f"declared by {self.source}, {self.date.isoformat()}"


@dataclasses.dataclass(frozen=True)
class Answer:
    """One person's proficiency per framework (0..5), from line ``line`` of the file."""

    person: str
    levels: dict[str, int]
    provenance: Provenance
    line: int


@dataclasses.dataclass(frozen=True)
class Needs:
    """The deployment targets the project needs."""

    targets: tuple[str, ...]
    provenance: Provenance
    weight: float | None


@dataclasses.dataclass(frozen=True)
class Team:
    """A read team file (:func:`load`): the survey's answers and the declared deployment needs."""

    path: str
    answers: tuple[Answer, ...] = ()
    survey_weight: float | None = None
    needs: Needs | None = None

    @property
    def criteria(self) -> list[str]:
        """The criteria this file declares, of :data:`FAMILIARITY` and :data:`TARGETS`."""
        return [c for c, has in ((FAMILIARITY, bool(self.answers)), (TARGETS, self.needs is not None)) if has]

    @property
    def weights(self) -> dict[str, float]:
        """The weights the file gives (a criterion without one weighs 0 unless ``--weight`` weighs it)."""
        given = {FAMILIARITY: self.survey_weight if self.answers else None,
                 TARGETS: self.needs.weight if self.needs else None}
        return {c: w for c, w in given.items() if w is not None}

    def familiarity(self, frameworks: Iterable[str]) -> dict[str, float]:
        """:data:`FAMILIARITY` per framework by the rule of this module's docstring (0..5)."""
        return familiarity(self.answers, frameworks)

    def provenance(self) -> list[Provenance]:
        """The distinct sources and dates of the answers, in file order."""
        seen: list[Provenance] = []
        for a in self.answers:
            if a.provenance not in seen:
                seen.append(a.provenance)
        return seen


def familiarity(answers: Iterable[Answer], frameworks: Iterable[str]) -> dict[str, float]:
    """The mean proficiency per framework over every person who answered, a framework a person did not rate
    counting as 0; 0 for every framework when nobody answered."""
    answers = list(answers)
    return {fw: (sum(a.levels.get(fw, 0) for a in answers) / len(answers) if answers else 0.0) for fw in frameworks}


class _Lines:
    """Where a table or key of the file is: TOML parsers give values, not lines, so the text is scanned for them."""

    HEADER = re.compile(r"\s*(\[\[?)\s*([A-Za-z0-9_.\"-]+)\s*\]\]?")
    KEY = re.compile(r"\s*\"?([A-Za-z0-9_-]+)\"?\s*=")

    def __init__(self, text: str) -> None:
        self.tables: list[tuple[str, int, dict[str, int]]] = []  # (name, header line, key -> line)
        top: dict[str, int] = {}
        keys = top
        for number, line in enumerate(text.splitlines(), 1):
            if (m := self.HEADER.match(line)) and not line.lstrip().startswith("#"):
                keys = {}
                self.tables.append((m.group(2), number, keys))
            elif (m := self.KEY.match(line)) and m.group(1) not in keys:
                keys[m.group(1)] = number
        self.tables.insert(0, ("", 1, top))

    def of(self, table: str, index: int = 0, key: str | None = None) -> int | None:
        """The line of ``key`` in the ``index``-th table called ``table`` (its header when ``key`` is None or
        not found there); None when the table is not written as a header."""
        found = [(line, keys) for name, line, keys in self.tables if name == table]
        if index >= len(found):
            return None
        line, keys = found[index]
        return keys.get(key, line) if key else line


def load(path: Path | str) -> Team:
    """Read and check the team file at ``path``; :class:`SpecError` naming the line and the accepted values."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError(f"--survey {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"--survey {path}: not valid TOML: {exc}") from None
    return parse(raw, text, str(path))


def parse(raw: Mapping[str, Any], text: str, name: str) -> Team:
    """The :class:`Team` of a parsed file (``text``: its source, for line numbers; ``name``: how to call it)."""
    lines = _Lines(text)

    def fail(where: int | None, message: str) -> SpecError:
        return SpecError(f"{name}{f' line {where}' if where else ''}: {message}")

    for key in raw:
        if key not in SECTIONS:
            raise fail(lines.of(key) or lines.of("", 0, key), f"unknown section or key {key!r}; accepted: "
                       "[survey], [[answer]] (one per person), [targets]")
    survey = _table(raw.get("survey", {}), "[survey]", lines.of("survey"), fail)
    _known(survey, SURVEY_KEYS, "[survey]", lambda k: lines.of("survey", 0, k), fail)
    answers = raw.get("answer", [])
    if not isinstance(answers, list):
        raise fail(lines.of("", 0, "answer"), "write each person's answer as an [[answer]] table")
    default = _provenance(survey, (None, None), "[survey]", lambda k: lines.of("survey", 0, k), fail,
                          required=False)
    read: list[Answer] = []
    seen: dict[str, int] = {}
    frameworks = [f.value for f in Framework]
    for i, answer in enumerate(answers):
        def where(key: str | None = None, i: int = i) -> int | None:
            return lines.of("answer", i, key)

        what = f"answer {i + 1}"
        answer = _table(answer, what, where(), fail)
        person = answer.get("person")
        if not isinstance(person, str) or not person.strip():
            raise fail(where("person"), f"{what} has no person: add person = \"NAME\" (each person once)")
        person = person.strip()
        what = f"the answer of {person!r}"
        if person in seen:
            raise fail(where("person"), f"{person!r} answered twice (first at line {seen[person]}); each person "
                                        "answers once: merge the two answers or remove one")
        seen[person] = where("person") or 0
        levels: dict[str, int] = {}
        for key, level in answer.items():
            if key in ANSWER_KEYS:
                continue
            if key not in frameworks:
                raise fail(where(key), f"unknown framework {key!r} in {what}; accepted: {', '.join(frameworks)} "
                                       f"(and {', '.join(ANSWER_KEYS)})")
            if not (isinstance(level, int) and not isinstance(level, bool) and level in SCALE):
                raise fail(where(key), f"proficiency {level!r} of {person} for {key} is outside the scale: an "
                                       f"integer from 0 to 5 ({scale_text()})")
            levels[key] = level
        if not levels:
            raise fail(where(), f"{what} rates no framework: add framework = level lines ({', '.join(frameworks)})")
        source, date = _provenance(answer, default, what, where, fail, required=True,
                                   hint="give it in the answer or in [survey]")
        read.append(Answer(person, levels, Provenance(source, date), where() or 0))
    if survey and not read:
        raise fail(lines.of("survey"), "[survey] has no [[answer]] tables: add one per person")
    needs = None
    if "targets" in raw:
        def at(key: str | None = None) -> int | None:
            return lines.of("targets", 0, key)

        targets = _table(raw["targets"], "[targets]", at(), fail)
        _known(targets, TARGET_KEYS, "[targets]", at, fail)
        need = targets.get("need")
        accepted = accepted_targets()
        if not isinstance(need, list) or not need or not all(isinstance(t, str) for t in need):
            raise fail(at("need"), f"[targets] needs need = [...], a list of targets; accepted: {', '.join(accepted)}")
        for target in need:
            if target not in accepted:
                raise fail(at("need"), f"unknown deployment target {target!r}; accepted: {', '.join(accepted)}")
        source, date = _provenance(targets, (None, None), "[targets]", at, fail, required=True,
                                   hint="give it in [targets]")
        needs = Needs(tuple(dict.fromkeys(need)), Provenance(source, date), _weight(targets, "[targets]", at, fail))
    if not read and needs is None:
        raise fail(None, "declares nothing: give a [survey] with [[answer]] tables, or [targets], or both")
    return Team(name, tuple(read), _weight(survey, "[survey]", lambda k: lines.of("survey", 0, k), fail), needs)


def _table(value: object, what: str, line: int | None, fail) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(line, f"{what} must be a table of key = value lines")
    return value


def _known(table: Mapping[str, Any], keys: tuple[str, ...], what: str, where, fail) -> None:
    for key in table:
        if key not in keys:
            raise fail(where(key), f"unknown key {key!r} in {what}; accepted: {', '.join(keys)}")


def _provenance(table: Mapping[str, Any], default: tuple[str | None, datetime.date | None], what: str, where,
                fail, *, required: bool, hint: str = "") -> tuple[str | None, datetime.date | None]:
    """``source`` and ``date`` of ``table``, each falling back to ``default``'s; both required when ``required``."""
    source = table.get("source", default[0])
    if source is not None and (not isinstance(source, str) or not source.strip()):
        raise fail(where("source"), f"source of {what} must be a non-empty text: who or what declared it")
    date = table.get("date", default[1])
    if date is not None and not isinstance(date, datetime.date):
        try:
            date = datetime.date.fromisoformat(str(date))
        except ValueError:
            raise fail(where("date"), f"date of {what} must be a date like 2026-11-20, got {date!r}") from None
    if isinstance(date, datetime.datetime):
        date = date.date()
    if required and source is None:
        raise fail(where(), f"{what} has no source: add source = \"WHO OR WHAT DECLARED IT\" ({hint})")
    if required and date is None:
        raise fail(where(), f"{what} has no date: add date = YYYY-MM-DD ({hint})")
    return (source.strip() if source else None), date


def _weight(table: Mapping[str, Any], what: str, where, fail) -> float | None:
    weight = table.get("weight")
    if weight is None:
        return None
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) or weight < 0:
        raise fail(where("weight"), f"weight in {what} must be a number >= 0, got {weight!r}")
    return float(weight)


def check_against(team: Team, qualitative: Mapping[str, Any], suite: str) -> None:
    """Refuse a criterion that both ``team`` and the suite ``suite`` declare (:class:`SpecError`)."""
    twice = [c for c in team.criteria if c in qualitative]
    if twice:
        raise SpecError(f"{twice[0]} is declared twice: by [qualitative.{twice[0]}] of suite {suite} and by "
                        f"{team.path}; keep one (the team file says who declared it and when)")
