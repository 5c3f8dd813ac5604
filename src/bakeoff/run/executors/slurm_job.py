"""One trial as a Slurm job (:mod:`bakeoff.run.executors.slurm_executor` submits it): its files under
``<store folder>/slurm/`` (:class:`Paths`), the job file its node reads back (:func:`job_to_dict`,
:func:`job_from_dict`), and its batch script (:func:`job_script`, with its time limit: :func:`time_limit`). What the
script's lines ask for and why is the executor's module docstring."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping
from pathlib import Path

from bakeoff.core.spec import RunSpec
from bakeoff.run.executors.executor import Resources, TrialJob, nodes_for
from bakeoff.trial.profile import Request as ProfileRequest

TIME_MARGIN_S = 120.0
"""Slurm's time limit is the trial's timeout plus this: the trial's own deadline ends it first and records a timeout
with its log; Slurm's limit only ends a job whose runner hangs past it (Python start-up, writing the result)."""


@dataclasses.dataclass(frozen=True)
class Paths:
    """One trial's files under ``<store folder>/slurm/``: what the job runs and where it writes."""

    job: Path
    script: Path
    output: Path
    result: Path

    @classmethod
    def of(cls, folder: Path, key: str) -> Paths:
        return cls(*(folder / f"{key}.{name}" for name in ("job.json", "sh", "out", "result.json")))


def job_to_dict(job: TrialJob) -> dict:
    """``job`` as JSON for its node (paths as strings, the spec as :meth:`RunSpec.to_dict`)."""
    raw: dict = {}
    for f in dataclasses.fields(job):
        value = getattr(job, f.name)
        if isinstance(value, RunSpec):
            value = value.to_dict()
        elif isinstance(value, ProfileRequest):
            value = {"directory": str(value.directory), "steps": value.steps}
        elif isinstance(value, Path):
            value = str(value)
        raw[f.name] = value
    return raw


def job_from_dict(raw: Mapping) -> TrialJob:
    """The :class:`TrialJob` :func:`job_to_dict` wrote."""
    paths = ("log_dir", "checkpoint_dir", "tensorboard_dir", "keep_dir")
    fields = {name: Path(value) if name in paths and value is not None else value for name, value in raw.items()}
    fields["spec"] = RunSpec.from_dict(raw["spec"])
    profile = raw.get("profile")
    fields["profile"] = ProfileRequest(Path(profile["directory"]), profile["steps"]) if profile else None
    return TrialJob(**fields)


def time_limit(timeout_s: float) -> str:
    """Slurm's ``--time`` for a trial with ``timeout_s``: whole minutes, rounded up."""
    return str(max(1, math.ceil((timeout_s + TIME_MARGIN_S) / 60)))


def job_script(job: TrialJob, paths: Paths, needs: Resources, partition: str = "", cluster_gpus: bool = False,
               workdir: Path | None = None, python: str = sys.executable, workers_per_node: int | None = None) -> str:
    """The batch script of ``job``'s trial: one node, one task holding every process of the trial (the launcher
    starts its ranks, as locally), its CPUs (``--exclusive`` when the trial uses all of a node's cores: ``cpus``
    None), its GPUs when ``--device cuda`` asks for them or ``--device auto`` finds the cluster has some. A
    multi-node trial (:func:`nodes_for`): one task per node, each node asked for what its workers need."""
    key = job.spec.key()
    nodes = nodes_for(job.spec, workers_per_node)
    if nodes > 1:
        per_node = workers_per_node or 1
        needs = dataclasses.replace(needs, cpus=job.spec.threads * per_node if job.spec.threads else None,
                                    gpus=per_node if needs.gpus else 0)
    tasks = ["#SBATCH --nodes=1", "#SBATCH --ntasks=1"] if nodes == 1 else [
        f"#SBATCH --nodes={nodes}", "#SBATCH --ntasks-per-node=1"]
    lines = ["#!/bin/bash", f"#SBATCH --job-name=bakeoff-{job.position}-{key[:12]}",
             f"#SBATCH --output={paths.output}", *tasks,
             f"#SBATCH --time={time_limit(job.timeout_s)}", "#SBATCH --no-requeue"]
    if needs.cpus is None:
        lines += ["#SBATCH --exclusive", "#SBATCH --mem=0"]  # the whole node: its cores and its memory
    else:
        lines.append(f"#SBATCH --cpus-per-task={needs.cpus}")
    if needs.gpus and (needs.gpus_required or cluster_gpus):
        lines.append(f"#SBATCH --gpus-per-node={needs.gpus}")
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    lines.append(f"#SBATCH --chdir={workdir or Path.cwd()}")  # relative store paths mean the same on the node
    lines += [f"# {job.what} (trial {job.position} of a bakeoff run; key {key})",
              f"exec {python} -m bakeoff.run.executors.slurm_executor {paths.job}"]
    return "\n".join(lines) + "\n"
