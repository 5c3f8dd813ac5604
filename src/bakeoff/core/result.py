"""What one trial measured (:class:`TrialResult`), with every raw sample, versioned (:data:`SCHEMA_VERSION`).

A result's figures live in typed fields and sections (:data:`SECTIONS`), among them what the trial process set up
(:class:`Setup`: the resolved configuration, the data set's facts, when it started, a kept model) and how the
parent ran it (:class:`Execution`: the executor, its hosts, the logs, the timeout); ``extras`` holds free notes
only (a traceback, an error beside the result, an engine's own counters). The request that travels the other way is
:class:`bakeoff.core.contract.TrialRequest`. A stored
result of an older schema is read through :func:`migrate`, which upgrades it one version at a time
(:data:`MIGRATIONS`, as asv's result loader does), so a store keeps working across bakeoff releases; a result of
a newer schema than this bakeoff knows is refused, naming both versions.

Nothing here imports a framework.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

from bakeoff.core.spec import RunSpec, SpecError, Status

SCHEMA_VERSION = 5
"""3: the training loop's figures, the batch-size search and the profile moved from ``extras`` into typed sections
(:class:`Training`, :class:`BatchSearch`, :class:`Profile`; 2 → 3: :func:`_sections`). 4: so did the distributed
figures, the MFU, the ceiling probe, the run order and the adaptive-repeats plan (:class:`Distributed`,
:class:`Mfu`, :class:`CeilingProbe`, :class:`Order`, :class:`AdaptiveRepeats`; 3 → 4: :func:`_more_sections`).
5: so did the free keys of the parent–child contract, by the same names (:class:`Setup`, :class:`Execution`;
4 → 5: :func:`_contract_sections`)."""


@dataclasses.dataclass
class Training:
    """What the training loop (:mod:`bakeoff.trial.loop`) recorded besides the timings and the quality curve."""

    target_rule: str = ""  # how the target was set: the user's, or the preset's rule
    # where the target came from, a key of bakeoff.core.workload.TARGET_SOURCES: measured, declared, derived, user;
    # '' in results stored before it was recorded (new in schema 4's lifetime: reports say "source not recorded")
    target_source: str = ""
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


@dataclasses.dataclass
class Distributed:
    """A trial of several replicas or processes: what the engine's strategy measured in each rank
    (:meth:`bakeoff.engines.base.Engine.distributed_figures`), what the launcher's merge of the ranks adds
    (:func:`bakeoff.run.launchers.merge`), or, for a group that wrote no result, how it failed (the runner).

    The top level is typed; the inner records vary by framework and strategy and stay dicts, documented where
    they are written: ``sync`` (:func:`bakeoff.measure.sync.figures`, or the parameter server's pull and push),
    ``asynchronous`` (:class:`bakeoff.frameworks.tensorflow.distributed.ParameterServer`), ``ranks`` (one summary
    per rank, :func:`bakeoff.run.launchers._rank_summary`). A figure the trial did not record is ``None`` or empty.
    """

    # the engine's strategy, in each rank
    strategy: str = ""  # in words: "DistributedDataParallel (gloo), 2 ranks"
    backend: str = ""  # the collective backend (gloo, nccl; JAX's platform)
    setup_s: float | None = None  # rendezvous, strategy and model set-up, before the first step
    setup_parts_s: dict[str, float] = dataclasses.field(default_factory=dict)  # what setup_s is made of
    servers_wait_s: float | None = None  # parameter servers: waiting for the servers to come up
    sync: dict[str, Any] = dataclasses.field(default_factory=dict)  # one step's synchronisation, timed alone
    asynchronous: dict[str, Any] = dataclasses.field(default_factory=dict)  # parameter servers: steps in flight
    xla_scope: str = ""  # TensorFlow XLA: what was compiled, when not the whole step
    replica_weights_sha256: list[str] = dataclasses.field(default_factory=list)  # this rank's replicas, at the end
    # the launcher's merge of the ranks
    parallelism: str = ""
    replicas: int | None = None
    launcher: str = ""  # the Launcher record's name (bakeoff.run.launchers.LAUNCHERS)
    processes: int | None = None
    threads_per_process: int | None = None
    batch_size: dict[str, int] = dataclasses.field(default_factory=dict)  # global, per replica
    synchronous: bool | None = None
    ranks: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # every rank's summary
    warnings: list[str] = dataclasses.field(default_factory=list)
    startup_s: float | None = None  # the slowest rank's launch + import + build, before the first step
    launch_s: float | None = None  # the slowest rank's process launch
    replicas_identical: bool | None = None  # every replica ended with the same weights (None: one replica)
    member_peak_rss_bytes: dict[str, int] = dataclasses.field(default_factory=dict)  # the launcher read, by member
    rank_imbalance: float | None = None  # the slowest rank's steady step over the fastest's, less 1
    throughput_rank: int | None = None  # the rank whose pace the group's steps and throughput are
    # a group that wrote no result
    first_failure: str = ""  # which member failed first
    exit_codes: dict[str, int | None] = dataclasses.field(default_factory=dict)  # by member (None: killed)
    logs: list[str] = dataclasses.field(default_factory=list)
    # figures an older bakeoff recorded that have no field here, kept by the migration (read by nothing)
    other: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Mfu:
    """Model-FLOPs utilisation, computed when the result is stored (:func:`bakeoff.measure.ceiling.utilisation`):
    the value and the ceiling it was measured against, or why there is none (``missing``)."""

    value: float | None = None  # model FLOP/s over the ceiling
    missing: str = ""  # why there is no value ('' when there is one)
    model_flops_per_s: float | None = None
    flops_per_example: float | None = None
    ceiling_flops_per_s: float | None = None  # the kept ceiling's median
    ceiling_range: list[float] = dataclasses.field(default_factory=list)  # its samples' lowest and highest
    ceiling_n: int | None = None  # the products' size (None: stored before sizes were recorded)
    precision: str = ""
    ceiling_framework: str = ""
    ceiling_version: str = ""
    ceiling_key: str = ""  # the store's key of the kept ceiling
    ceiling_measured_at: str = ""
    ceiling_where: str = ""  # "trial process" or "probe process"
    threads: int | None = None
    device_kind: str = ""  # "CPU" or "GPU"


@dataclasses.dataclass
class CeilingProbe:
    """The matmul ceiling a trial probed after its result, asked to because the store kept none for its
    fingerprint (:func:`bakeoff.measure.ceiling.in_trial`); the runner keeps it in the store (:meth:`kept`)."""

    status: str  # "ok" or "failed"
    reason: str = ""  # why it failed
    n: int | None = None  # the products' size
    repeats: int | None = None
    threads: int | None = None  # as set (0: as the trial set them)
    precisions: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # median, samples; or missing
    load_average_1m_at_start: float | None = None
    wall_s: float | None = None
    where: str = ""  # "trial process"

    def kept(self) -> dict[str, Any]:
        """The record the store keeps as the ceiling (``Store.put_ceiling``), as the probe wrote it."""
        out = dataclasses.asdict(self)
        return {k: v for k, v in out.items() if k in ("status", "wall_s", "where") or v not in ("", None)}


@dataclasses.dataclass
class Order:
    """This trial's place in the planned order of its run (:mod:`bakeoff.plan.order`), 1-based, skipped trials
    included."""

    position: int
    of: int
    seed: int  # the order seed frameworks were shuffled with


@dataclasses.dataclass
class AdaptiveRepeats:
    """The plan of the adaptive run (``--repeats auto``, :mod:`bakeoff.run.adaptive`) that made this trial: its
    first and most runs per configuration, and the looks at the verdict the run could take."""

    first: int | None = None
    max: int | None = None
    looks: int = 1


@dataclasses.dataclass
class LossScaling:
    """fp16's dynamic loss scaling (PyTorch's ``GradScaler``, bakeoff's Keras ``LossScaleOptimizer``): the steps it
    skipped because their gradients overflowed (on the clock, training nothing) and the scale it ended at. A
    section new in schema 4's lifetime: older results have none, as they had no skipped-step count."""

    skipped_steps: int
    final_scale: float


@dataclasses.dataclass
class Energy:
    """Energy the training steps used, read from the machine's cumulative counters (:mod:`bakeoff.measure.energy`:
    RAPL's CPU packages and their DRAM, NVML's GPUs), never estimated; or why there is none (``missing``). A
    section new in schema 4's lifetime: older results have none, as they measured none."""

    missing: str = ""  # why there is no figure ('' when measured)
    steady_j: float | None = None  # over the steady steps, every domain
    steady_s: float | None = None  # those steps' clock
    steady_steps: int | None = None
    per_step_j: float | None = None
    per_example_j: float | None = None
    mean_w: float | None = None  # steady_j / steady_s
    train_j: float | None = None  # over every training step (a resumed trial's steps before the resume included)
    to_target_j: float | None = None  # interpolated between evaluations, as time to target is
    domains: dict[str, float] = dataclasses.field(default_factory=dict)  # steady joules by counter
    wraps: int = 0  # counter wrap-arounds added back
    unreadable: dict[str, str] = dataclasses.field(default_factory=dict)  # counters found, not readable: why
    not_read: dict[str, str] = dataclasses.field(default_factory=dict)  # left to another process: why


@dataclasses.dataclass
class Setup:
    """What the trial process set up and when (:mod:`bakeoff.trial.main`), by the names these had in ``extras``
    before schema 5."""

    # None where the trial did not record it (a trial that failed before its build; a result stored before)
    config: dict[str, Any] | None = None  # the resolved model configuration
    data: dict[str, Any] | None = None  # the data set's facts, its rows by split
    started_at: float | None = None  # the trial's first line, time.time() on its node: executors' scheduling time
    launch_s: float | None = None  # from the launcher's start of the group to this process's first line
    rank: int | None = None  # this process's rank (a distributed trial; the merged result is rank 0's)
    kept_model: dict[str, Any] | None = None  # directory, keep_s: the model kept (asked to keep it)


@dataclasses.dataclass
class Execution:
    """How the parent ran the trial (:mod:`bakeoff.run.executors`), by the names these had in ``extras`` before
    schema 5. Empty where the parent did not say (a trial run by hand)."""

    executor: dict[str, Any] | None = None  # bakeoff.run.executors.base.executor_record
    timeout_s: float | None = None  # the deadline a timed-out trial was killed at (a longer one runs it again)
    hosts: list[str] | None = None  # each worker's machine (a trial over nodes)
    nodes: list[str] | None = None  # the cluster's node ids of those (Ray)
    host: str = ""  # the machine the trial's job ran on (Slurm)
    log: str = ""  # the first member's log
    tensorboard: str = ""  # the TensorBoard folder
    network: dict[str, Any] | None = None  # a trial over nodes: the ranks' rendezvous and interfaces
    port_retries: int = 0  # starts again on new ports, a port taken before the group bound it
    suite: str = ""  # the suite, in results stored before the store kept it in its own column


SECTIONS = {"training": Training, "batch_search": BatchSearch, "profile": Profile, "distributed": Distributed,
            "mfu": Mfu, "ceiling_probe": CeilingProbe, "order": Order, "adaptive_repeats": AdaptiveRepeats,
            "loss_scaling": LossScaling, "energy": Energy, "setup": Setup, "execution": Execution}
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
    distributed: Distributed | None = None  # with parallelism other than none
    mfu: Mfu | None = None  # a successful trial's, when stored
    ceiling_probe: CeilingProbe | None = None  # when the store kept no ceiling for the trial
    order: Order | None = None  # when run by the runner
    adaptive_repeats: AdaptiveRepeats | None = None  # with --repeats auto
    loss_scaling: LossScaling | None = None  # fp16 trials
    energy: Energy | None = None  # every trial that trained (its figures, or why there are none)
    setup: Setup = dataclasses.field(default_factory=Setup)
    execution: Execution = dataclasses.field(default_factory=Execution)
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)  # free notes, no figures of a section
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

    @functools.cached_property
    def run_spec(self) -> RunSpec:
        """The spec as a :class:`RunSpec`, parsed once (a result's spec is never changed in place; a replaced
        result, ``dataclasses.replace``, parses its own)."""
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


MOVED_IN_4 = ("distributed", "mfu", "ceiling_probe", "order", "adaptive_repeats")
"""The ``extras`` keys schema 4 made sections of (their names are the sections')."""


def _more_sections(raw: dict[str, Any]) -> dict[str, Any]:
    """Schema 3 → 4: the distributed figures, the MFU, the ceiling probe, the run order and the adaptive-repeats
    plan move out of ``extras`` into their sections, by the same names; a distributed figure that has no field
    (one an older bakeoff recorded) goes into the section's ``other``."""
    extras = dict(raw.get("extras") or {})
    moved = {name: extras.pop(name, None) for name in MOVED_IN_4}
    if moved["distributed"] is not None:
        fields = {f.name for f in dataclasses.fields(Distributed)}
        figures = moved["distributed"]
        moved["distributed"] = {k: v for k, v in figures.items() if k in fields}
        if other := {k: v for k, v in figures.items() if k not in fields}:
            moved["distributed"]["other"] = other
    return {**raw, "extras": extras, **moved, "schema_version": 4}


MOVED_IN_5 = {"setup": tuple(f.name for f in dataclasses.fields(Setup)),
              "execution": tuple(f.name for f in dataclasses.fields(Execution))}
"""The ``extras`` keys schema 5 moved into the :class:`Setup` and :class:`Execution` sections, by section."""


def _contract_sections(raw: dict[str, Any]) -> dict[str, Any]:
    """Schema 4 → 5: the free keys of the parent–child contract move out of ``extras`` into the ``setup`` and
    ``execution`` sections, by the same names (a key a result did not have stays absent: the field's default)."""
    extras = dict(raw.get("extras") or {})
    moved = {section: {**{name: extras.pop(name) for name in names if name in extras}, **(raw.get(section) or {})}
             for section, names in MOVED_IN_5.items()}
    return {**raw, "extras": extras, **moved, "schema_version": 5}


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {2: _sections, 3: _more_sections,
                                                                     4: _contract_sections}
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
