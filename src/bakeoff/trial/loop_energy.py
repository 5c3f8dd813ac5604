"""The training loop's energy (:func:`bakeoff.trial.loop.train`): which counters a trial process reads
(:class:`bakeoff.measure.energy.EnergyMeter`), and the result's energy section, energy to target included."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bakeoff.core.contract import Placement
from bakeoff.core.result import Energy, TrialResult
from bakeoff.core.spec import Parallelism, RunSpec
from bakeoff.measure.energy import EnergyMeter
from bakeoff.measure.environment import cuda_devices, local_rank
from bakeoff.trial.evaluation import _crossing, _reached


def energy_to_target(curve: Sequence[Mapping[str, float]], target: float | None,
                     higher_is_better: bool) -> float | None:
    """Training joules at which the curve first reached ``target`` (after step 0), interpolated from the evaluation
    before as time to target is (:func:`_crossing`); None when it never did or a point has no energy."""
    if target is None:
        return None
    for i, point in enumerate(curve):
        if point["step"] > 0 and _reached(point["metric"], target, higher_is_better):
            before = curve[i - 1] if i > 0 else None
            if "train_j" not in point or (before is not None and "train_j" not in before):
                return None
            return _crossing(before, point, target, "train_j")[0]
    return None


def _on_gpu(environment: Mapping[str, Any]) -> bool:
    return any(m in str(environment.get("device", "")).lower() for m in ("cuda", "gpu"))


def energy_meter(spec: RunSpec, environment: Mapping[str, Any], environ: Mapping[str, str] | None = None,
                 dev: Path = Path("/dev")) -> EnergyMeter:
    """The counters this process reads: NVML on the GPUs it trains on (a rank of a group: its own, the GPU its
    local rank takes; one process over several replicas: the first ``workers``; else the first), RAPL on this
    machine's packages when it is the machine's local rank 0 (the packages are shared: read once per machine).
    Ranks that share a GPU round-robin (TensorFlow's multi-worker workers, more than the GPUs) leave its counter to
    the first of them, so that no counter is read twice."""
    environ = os.environ if environ is None else environ
    gpus: list[int] = []
    shared = {}
    if _on_gpu(environment):
        if Placement.read(environ).local_rank is not None or "LOCAL_RANK" in environ:
            rank, visible = local_rank(environ), cuda_devices(dev, environ)[0]
            gpus = [rank % visible if visible else rank]
            if visible and rank >= visible:
                gpus, shared = [], {"nvml": f"GPU {rank % visible} is read by local rank {rank % visible}, whose GPU "
                                            "this rank shares"}
        elif spec.parallelism is Parallelism.DATA_PARALLEL:
            gpus = list(range(spec.workers))
        else:
            gpus = [0]
    meter = EnergyMeter.for_trial(gpus, rapl=local_rank(environ) == 0, environ=environ)
    meter.not_read.update(shared)
    return meter


def energy_figures(meter: EnergyMeter, result: TrialResult, train_j: float | None) -> Energy:
    """The result's energy section from the meter: the steady steps' figures, the training energy over every step
    (``train_j``, resumes included; None where not on the curve) and energy to target."""
    figures = meter.figures(result.examples_per_step)
    if figures.get("missing") == "" or "train_j" in figures:
        figures["train_j"] = train_j
        figures["to_target_j"] = energy_to_target(result.curve, result.target, result.higher_is_better)
    return Energy(**figures)
