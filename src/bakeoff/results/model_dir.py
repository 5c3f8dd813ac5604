"""A kept model: one directory holding the trained weights in the framework's own format, the same weights under
canonical names, and a manifest saying what they are.

::

    <models>/<workload>-<preset>-<label>-<key>/
      manifest.json    # what this is: workload, preset, framework, config, serving settings, metric reached
      weights.npz      # canonical weights (framework-free: any framework can load them)
      model.pt | model.weights.h5 | params.msgpack   # the framework's own format (its adapter's NATIVE_FILE)
      exports/<format>/...                           # what `bakeoff export` made from it

Framework-free: the trial calls :func:`keep` with its framework's adapter already imported.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec, SpecError
from bakeoff.core.workload import Weights

MANIFEST = "manifest.json"
WEIGHTS = "weights.npz"
MODEL_DIR_VERSION = 1


class ModelDirError(SpecError):
    """A model directory that is missing, unreadable, from another bakeoff version, or for another workload."""


@dataclasses.dataclass
class Manifest:
    """What a model directory holds."""

    workload: str
    preset: str
    framework: str
    key: str  # the trial's key in the store
    label: str
    spec: dict[str, Any]
    config: dict[str, Any]
    native_file: str
    serving_inputs: dict[str, list[str | None]]
    serving: dict[str, Any]  # tokenizer vocabulary, feature settings, classes (Dataset.serving)
    metric_name: str
    final_metric: float | None
    best_metric: float | None
    higher_is_better: bool
    steps: int
    num_params: int | None
    bakeoff_version: str
    created_at: str
    version: int = MODEL_DIR_VERSION

    @property
    def run_spec(self) -> RunSpec:
        return RunSpec.from_dict(self.spec)


def directory_name(spec: RunSpec) -> str:
    """``mnist-tiny-torch-graph-<key>``: readable, and unique per trial key."""
    return f"{spec.workload}-{spec.preset}-{spec.label().replace('/', '-')}-{spec.key()[:12]}"


def check_keepable(spec: RunSpec) -> None:
    """:class:`ModelDirError` when ``spec``'s framework has no deployment adapter (its record's ``deploy``)."""
    from bakeoff.core import formats

    framework = spec.framework.value
    if framework not in formats.exporting_frameworks():
        raise ModelDirError(f"{framework} models cannot be kept: bakeoff keeps and exports models of "
                            f"{', '.join(formats.exporting_frameworks())}")


def keep(spec: RunSpec, config: Mapping[str, Any], weights: Weights, serving: Mapping[str, Any],
         result: TrialResult, directory: Path, adapter: ModuleType) -> Manifest:
    """Write a model directory for the trained ``weights`` of this trial (atomically: a reader never sees half a
    directory, and an existing one is replaced whole). ``adapter``: the framework's deployment adapter
    (:mod:`bakeoff.deploy`'s contract: ``save_model``, ``NATIVE_FILE``), imported by the trial from the module its
    record names, so that nothing here loads a framework's module by name."""
    from bakeoff.core import registry
    from bakeoff.core.identity import bakeoff_version

    check_keepable(spec)
    framework = spec.framework.value
    workload = registry.workload(spec)
    tmp = directory.with_name(directory.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    np.savez(tmp / WEIGHTS, **weights)
    adapter.save_model(spec.workload, dict(config), weights, tmp)
    manifest = Manifest(
        workload=spec.workload, preset=spec.preset, framework=framework, key=spec.key(), label=spec.label(),
        spec=spec.to_dict(), config=json.loads(json.dumps(dict(config))), native_file=adapter.NATIVE_FILE,
        serving_inputs={k: list(v) for k, v in workload.serving_inputs.items()}, serving=dict(serving),
        metric_name=result.metric_name, final_metric=result.final_metric, best_metric=result.best_metric,
        higher_is_better=result.higher_is_better, steps=len(result.step_times_s), num_params=result.num_params,
        bakeoff_version=bakeoff_version(), created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    (tmp / MANIFEST).write_text(json.dumps(dataclasses.asdict(manifest), indent=1))
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(tmp, directory)
    return manifest


def read(directory: str | Path, workload: str | None = None) -> Manifest:
    """The manifest of the model directory ``directory``; :class:`ModelDirError` naming the directory when it is
    missing, unreadable, written by another model-directory version, incomplete, or (with ``workload``) for
    another workload."""
    directory = Path(directory)
    path = directory / MANIFEST
    if not directory.is_dir():
        raise ModelDirError(f"no model directory at {directory}: keep one with `bakeoff train`")
    if not path.is_file():
        raise ModelDirError(f"{directory} is not a bakeoff model directory: it has no {MANIFEST}")
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelDirError(f"{path} cannot be read: {exc}") from None
    version = raw.get("version") if isinstance(raw, dict) else None
    if version != MODEL_DIR_VERSION:
        raise ModelDirError(f"{directory} is a model directory of version {version!r} (written by bakeoff "
                            f"{raw.get('bakeoff_version', '?') if isinstance(raw, dict) else '?'}); this bakeoff "
                            f"reads version {MODEL_DIR_VERSION}: train it again with `bakeoff train`")
    known = {f.name for f in dataclasses.fields(Manifest)}
    missing = sorted(known - set(raw) - {"version"})
    if missing:
        raise ModelDirError(f"{path} lacks {', '.join(missing)}: not a complete bakeoff manifest")
    manifest = Manifest(**{k: v for k, v in raw.items() if k in known})
    if workload is not None and manifest.workload != workload:
        raise ModelDirError(f"{directory} holds a {manifest.workload} model, not {workload}")
    for name in (WEIGHTS, manifest.native_file):
        if not (directory / name).is_file():
            raise ModelDirError(f"{directory} is incomplete: {name} is missing")
    return manifest


def canonical_weights(directory: Path) -> Weights:
    with np.load(directory / WEIGHTS) as z:
        return {k: z[k] for k in z.files}
