"""What one trial measured (:class:`TrialResult`), with every raw sample, versioned (:data:`SCHEMA_VERSION`).

A result's figures live in typed fields and sections (:class:`Training`); ``extras`` holds what has no section
yet. A stored result of an older schema is read through :func:`migrate`, which upgrades it one version at a time
(:data:`MIGRATIONS`, as asv's result loader does), so a store keeps working across bakeoff releases; a result of
a newer schema than this bakeoff knows is refused, naming both versions.

Nothing here imports a framework.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from bakeoff.core.spec import RunSpec, SpecError, Status

SCHEMA_VERSION = 3
"""3: the training loop's figures, the batch-size search and the profile moved from ``extras`` into typed sections
(:class:`Training`, :class:`BatchSearch`, :class:`Profile`; 2 → 3: :func:`_sections`)."""


@dataclasses.dataclass
class Training:
    """What the training loop (:mod:`bakeoff.trial.loop`) recorded besides the timings and the quality curve."""

    target_rule: str = ""  # how the target was set: the user's, or the preset's rule
    evaluation: str = ""  # why the test split was never evaluated ('' when it was)
    graph_builds: int = 0  # graphs the engine built (traced or compiled) while training
    graph_build_steps: list[int] = dataclasses.field(default_factory=list)  # the steps that built one (1-based)
    graph_build_s: float | None = None  # what those steps took beyond a steady step, first step included
    steady_steps: int | None = None  # how many steps the steady figures summarise
    steady_statistic: str = "median"  # of the steady steps: "mean" under asynchronous training (parameter servers)
    epochs: float | None = None  # epochs trained
    resumed_at_steps: list[int] = dataclasses.field(default_factory=list)  # checkpoints this trial resumed from


@dataclasses.dataclass
class BatchSearch:
    """How ``--batch-size auto`` chose this trial's batch (:mod:`bakeoff.run.batch_search`): the largest that
    trained under the memory cap, and every probe."""

    batch_size: int
    peak_memory_bytes: int | None
    memory_kind: str
    probes: list[dict[str, Any]]  # every probe: batch_size, status, peak memory, reason


@dataclasses.dataclass
class Profile:
    """A few more steps under the framework's profiler after the trial (``bakeoff run --profile``,
    :mod:`bakeoff.trial.profile`): where the trace is and how to open it, or why there is none (``error``)."""

    directory: str = ""
    tool: str = ""
    steps: int = 0
    warmup_steps: int = 0
    first_step: int = 0
    files: dict[str, int] = dataclasses.field(default_factory=dict)  # written, relative to directory: bytes
    view: list[str] = dataclasses.field(default_factory=list)  # how to open them
    profiled_step_s: list[float] = dataclasses.field(default_factory=list)  # under the profiler: not measurements
    seconds: float = 0.0
    error: str = ""  # why no profile was written ('' when one was)
    traceback: str = ""


SECTIONS = {"training": Training, "batch_search": BatchSearch, "profile": Profile}
"""The typed sections of a result, by field name."""


@dataclasses.dataclass
class TrialResult:
    """Everything one trial measured. Raw samples are kept: ``step_times_s`` holds every step."""

    spec: dict[str, Any]
    key: str
    status: Status
    reason: str = ""
    environment: dict[str, Any] = dataclasses.field(default_factory=dict)
    import_s: float | None = None
    build_s: float | None = None
    first_step_s: float | None = None  # graph build / compile happens here
    step_times_s: list[float] = dataclasses.field(default_factory=list)  # every step, the first included
    losses: list[float] = dataclasses.field(default_factory=list)  # training loss (mean) at every step
    examples_per_step: int = 0
    units_per_step: dict[str, float] = dataclasses.field(default_factory=dict)
    steady_step_s: float | None = None  # median of steady steps
    throughput: dict[str, float] = dataclasses.field(default_factory=dict)  # examples/s, tokens/s: steady
    # Memory, in bytes, read by the engine's probe (``memory_kind`` names it: process RSS on CPU, the framework's
    # allocator on GPU). ``peak_memory_bytes`` is the whole trial's peak, the framework's import included;
    # ``memory_baseline_bytes`` what was in use after import and model build; ``memory_train_peak_bytes`` the peak
    # over training steps only (evaluation excluded); ``memory_increment_bytes`` = train peak - baseline, what
    # training itself costs (the memory criterion scores it).
    peak_memory_bytes: int | None = None
    memory_kind: str = ""
    memory_baseline_bytes: int | None = None
    memory_train_peak_bytes: int | None = None
    memory_increment_bytes: int | None = None
    curve: list[dict[str, float]] = dataclasses.field(default_factory=list)  # step, train_s, metric
    metric_name: str = ""
    higher_is_better: bool = True  # the metric's direction (accuracy: higher; error rates: lower)
    target: float | None = None
    # Training clock (compile included, evaluation excluded) at which the metric crossed the target, interpolated
    # linearly between the last evaluation short of it and the first that reached it; steps likewise (a float).
    time_to_target_s: float | None = None
    steps_to_target: float | None = None
    final_metric: float | None = None
    best_metric: float | None = None
    num_params: int | None = None
    train_s: float | None = None  # training clock at the end
    wall_s: float | None = None  # whole process, evaluation and import included
    training: Training = dataclasses.field(default_factory=Training)
    batch_search: BatchSearch | None = None  # with --batch-size auto
    profile: Profile | None = None  # with --profile
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)  # what has no typed section yet
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["status"] = self.status.value
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TrialResult:
        """A result from its dict, of this schema or any older one (:func:`migrate`)."""
        raw = migrate(raw)
        known = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in raw.items() if k in known}
        data["status"] = Status.parse(data["status"], "status")
        for name, section in SECTIONS.items():
            if data.get(name) is not None:
                data[name] = section(**data[name])
        return cls(**data)

    def annotate(self, notes: Mapping[str, Any]) -> None:
        """Record what the parent knows of this trial (its batch-size search, its adaptive-repeats plan): a typed
        section by its name (given as a dict or as the section), anything else in ``extras``."""
        for name, value in notes.items():
            section = SECTIONS.get(name)
            if section is None:
                self.extras[name] = value
            else:
                setattr(self, name, value if isinstance(value, section) else section(**value))

    @property
    def run_spec(self) -> RunSpec:
        return RunSpec.from_dict(self.spec)


def _sections(raw: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 → 3: the training loop's keys, the batch-size search and the profile move out of ``extras`` into
    their sections (``profile_error`` and ``profile_traceback`` into the profile's ``error`` and ``traceback``)."""
    extras = dict(raw.get("extras") or {})
    names = [f.name for f in dataclasses.fields(Training)]
    training = {**{name: extras.pop(name) for name in names if name in extras}, **(raw.get("training") or {})}
    profile = extras.pop("profile", None)
    failure = {k: extras.pop(f"profile_{k}") for k in ("error", "traceback") if f"profile_{k}" in extras}
    if profile is not None or failure:
        profile = {**(profile or {}), **failure}
    batch_search = extras.pop("batch_search", None)
    return {**raw, "extras": extras, "training": training, "batch_search": batch_search, "profile": profile,
            "schema_version": 3}


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {2: _sections}
"""How a stored result of each older schema upgrades to the next one: ``{version: upgrade}``."""


def migrate(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``raw`` (a stored result's dict, or the part of one holding ``schema_version``, ``extras`` and the
    sections) upgraded to :data:`SCHEMA_VERSION`, one version at a time; a schema this bakeoff cannot read (newer,
    or older than every migration) raises :class:`SpecError` naming it."""
    data = dict(raw)
    while (version := data.get("schema_version")) != SCHEMA_VERSION:
        upgrade = MIGRATIONS.get(version) if isinstance(version, int) else None
        if upgrade is None:
            newer = isinstance(version, int) and version > SCHEMA_VERSION
            raise SpecError(f"trial result has schema_version {version!r}; this bakeoff reads versions "
                            f"{min(MIGRATIONS)} to {SCHEMA_VERSION}. "
                            + ("It was written by a newer bakeoff: upgrade to read it." if newer else
                               "Re-run the trials with this version, or read them with the bakeoff that wrote them."))
        data = upgrade(data)
    return data
