"""What one trial measured (:class:`TrialResult`), with every raw sample, versioned (:data:`SCHEMA_VERSION`).

Nothing here imports a framework.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from bakeoff.core.spec import RunSpec, SpecError, Status

SCHEMA_VERSION = 2


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
    extras: dict[str, Any] = dataclasses.field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["status"] = self.status.value
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TrialResult:
        version = raw.get("schema_version")
        if version != SCHEMA_VERSION:
            raise SpecError(
                f"trial result has schema_version {version!r}; this bakeoff reads version {SCHEMA_VERSION}. "
                "Re-run the trials with this version, or read them with the bakeoff that wrote them.")
        known = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in raw.items() if k in known}
        data["status"] = Status.parse(data["status"], "status")
        return cls(**data)

    @property
    def run_spec(self) -> RunSpec:
        return RunSpec.from_dict(self.spec)
