"""``bakeoff parity``: prove ports of one workload equivalent, framework by framework, in the modes named.

:func:`check_parity` validates the request (before any process starts), runs one parity probe per framework and
mode — ``python -m bakeoff.trial.parity_probe``, each in its own process, a few at a time — and compares each framework
with the reference (the first one named) using :mod:`bakeoff.analysis.parity_tolerances`'s checks and tolerances.
Nothing is written to the results store.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bakeoff.analysis import parity_tolerances as checks
from bakeoff.core import discover, registry
from bakeoff.core.files import temporary_folder
from bakeoff.core.frameworks import FRAMEWORKS
from bakeoff.core.spec import RunSpec, SpecError
from bakeoff.measure.environment import usable_cores
from bakeoff.plan.suite import ADHOC_MATRIX
from bakeoff.run.process import process_group
from bakeoff.trial.parity_probe import UNSUPPORTED_EXIT, perturbed

log = logging.getLogger(__name__)

STEPS = 6
"""Training steps of a probe; its accumulating run takes as many, each of 4 micro-batches."""

CHECKS = ("parameters", "outputs", "evaluation", "gradients", "losses", "weights", "accumulation")
"""The checks, in the order they are run and reported: a port's first failing one is where to look."""

PROBE_TIMEOUT_S = 900.0

NOT_EXACT = ("not exact with BatchNorm: each micro-batch is normalised with its own statistics, so 4 micro-batches "
             "are not the batch they make up (the accumulated losses are still compared across frameworks)")
"""Why accumulation is not checked within a probe of a model with running statistics."""


@dataclasses.dataclass(frozen=True)
class Mode:
    """An execution mode and precision the ports are compared in."""

    execution: str
    precision: str

    def __str__(self) -> str:
        return f"{self.execution} {self.precision}"


@dataclasses.dataclass(frozen=True)
class CheckRow:
    """One check of one framework against the reference in one mode: every finding, in canonical order."""

    mode: Mode
    framework: str
    check: str
    findings: tuple[checks.Finding, ...]
    skipped: str = ""  # why the check is not run in this mode ('' when it is)

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    @property
    def first_failure(self) -> checks.Finding | None:
        return checks.first_failure(self.findings)

    @property
    def worst(self) -> checks.Finding | None:
        """The finding closest to (or furthest past) its tolerance."""
        held = [f for f in self.findings if f.tolerance > 0]
        return max(held, key=lambda f: f.error / f.tolerance, default=None)

    @property
    def margin(self) -> float | None:
        """The worst finding's error over its tolerance (above 1: fails); None when nothing is held to one."""
        worst = self.worst
        return None if worst is None else worst.error / worst.tolerance

    @property
    def near(self) -> bool:
        """Holds, but within 2× of failing (:data:`bakeoff.analysis.parity_tolerances.NEAR`): a bug may be hiding under
        it."""
        return self.ok and self.margin is not None and self.margin > checks.NEAR


@dataclasses.dataclass(frozen=True)
class ParityReport:
    """What ``bakeoff parity`` found: the workload, the reference, and every check's row, in order."""

    workload: str
    reference: str
    frameworks: tuple[str, ...]
    modes: tuple[Mode, ...]
    rows: tuple[CheckRow, ...]
    failed_runs: dict[str, str]  # "framework mode" → the end of the probe's error output

    @property
    def ok(self) -> bool:
        return not self.failed_runs and all(r.ok for r in self.rows)

    @property
    def first_failure(self) -> tuple[CheckRow, checks.Finding] | None:
        """The first disagreement: in mode order, framework order, check order, then the canonical order."""
        for row in self.rows:
            if (found := row.first_failure) is not None:
                return row, found
        return None

    def to_dict(self) -> dict:
        """The report as JSON-ready data: an error or ratio with no finite value (a missing tensor, a shape that
        differs: infinite; a NaN output) is None, JSON's null, as JSON has no Infinity or NaN."""
        first = self.first_failure
        out = {"workload": self.workload, "reference": self.reference, "frameworks": list(self.frameworks),
               "modes": [dataclasses.asdict(m) for m in self.modes], "ok": self.ok,
               "tolerances": {p: dataclasses.asdict(checks.TOLERANCES[p]) for p in {m.precision for m in self.modes}},
               "failed_runs": self.failed_runs,
               "first_disagreement": None if first is None else {
                   "mode": str(first[0].mode), "framework": first[0].framework, **dataclasses.asdict(first[1])},
               "checks": [{"mode": str(r.mode), "framework": r.framework, "check": r.check, "ok": r.ok,
                           "margin": r.margin, "near": r.near,
                           "skipped": r.skipped, "findings": [dataclasses.asdict(f) for f in r.findings]}
                          for r in self.rows]}
        return _json_ready(out)


def _json_ready(value: object) -> object:
    """``value`` with numpy scalars as Python's and every infinite or NaN float as None: ``json.dumps`` would
    write them as ``Infinity`` and ``NaN``, which are not JSON and which strict parsers refuse."""
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def plan(workload: str, frameworks: Sequence[str] | None = None, executions: Sequence[str] | None = None,
         precisions: Sequence[str] | None = None, preset: str = "tiny",
         config: Sequence[tuple[str, str]] = (), data: Sequence[tuple[str, str]] = ()) -> tuple[list[str], list[Mode]]:
    """The frameworks (the reference first) and modes a request compares; raises :class:`SpecError` naming a bad
    value and the accepted ones. Imports no framework."""
    implemented = list(registry.models(workload))  # raises SpecError for an unknown or broken workload
    name = registry.workload_fields(workload)["workload"]
    if frameworks is None:
        frameworks = [f for f in ADHOC_MATRIX["framework"] if f in implemented and registry.installed(f)]
    frameworks = list(dict.fromkeys(frameworks))
    if len(frameworks) < 2:
        raise SpecError(f"parity compares two or more frameworks, got {', '.join(frameworks) or 'none'}; {name} is "
                        f"implemented in {', '.join(implemented)}")
    bad = [p for p in precisions or () if p not in checks.TOLERANCES]
    if bad:
        raise SpecError(f"--precision {','.join(bad)}: parity has tolerances for {', '.join(checks.TOLERANCES)}")
    modes = [Mode(e, p) for p in precisions or ["fp32"] for e in executions or ["eager"]]
    for mode in modes:
        for framework in frameworks:
            spec = RunSpec(**registry.workload_fields(workload), framework=framework, preset=preset,
                           execution=mode.execution, precision=mode.precision, config=tuple(config), max_steps=STEPS,
                           data=tuple(data))
            why = registry.unsupported(spec)
            if not why and (cpu := registry.unsupported_on_cpu(spec)):
                why = f"parity's probes run on the CPU, where {FRAMEWORKS[framework].display} cannot run {mode}: {cpu}"
            why = why or registry.not_installed(framework)
            if why:
                raise SpecError(why)
            registry.workload(spec).preset_config(preset, spec)  # an unknown preset or --set key
    if data:  # the data options checked as a run checks them (loaded once, numpy only), before any probe starts
        from bakeoff.run.runner import validate

        validate([spec], here=False)
    _check_keras_function_data(workload, frameworks, preset, config, data)
    return frameworks, modes


def _check_keras_function_data(workload: str, frameworks: Sequence[str], preset: str,
                               config: Sequence[tuple[str, str]], data: Sequence[tuple[str, str]] = ()) -> None:
    """A Keras function names its batch entries: check them against the data, as ``bakeoff run`` does (loaded here
    only for such a workload; every other model reads its batches itself)."""
    specs = [RunSpec(**registry.workload_fields(workload), framework=f, preset=preset, config=tuple(config),
                     max_steps=STEPS, data=tuple(data)) for f in frameworks]
    declared = [s for s in specs if registry.models(s)[s.framework.value] == discover.KERAS_FUNCTION_MODEL]
    if declared:
        entries = sorted(registry.workload(specs[0]).load_data(specs[0]).train)
        why = next(filter(None, (registry.data_problem(s, entries) for s in declared)), "")
        if why:
            raise SpecError(why)


def probe_command(workload: str, framework: str, mode: Mode, out: Path, preset: str = "tiny",
                  config: Sequence[tuple[str, str]] = (), data: Sequence[tuple[str, str]] = ()) -> list[str]:
    """The ``python -m bakeoff.trial.parity_probe`` probe of ``workload`` in ``framework`` and ``mode``."""
    sets = [arg for key, value in config for arg in ("--set", f"{key}={value}")]
    sets += [arg for key, value in data for arg in ("--data", f"{key}={value}")]
    return [sys.executable, "-m", "bakeoff.trial.parity_probe", workload, framework, str(out), "--preset", preset,
            "--steps", str(STEPS), "--execution", mode.execution, "--precision", mode.precision,
            "--accum-steps", str(STEPS), *sets]


def probe_env(framework: str) -> dict[str, str]:
    """A probe's environment: this one with its framework record's settings, as a trial's (a Keras row's
    ``KERAS_BACKEND``: without it every Keras row would run on one backend), and no GPU: probes run on the CPU."""
    return {**os.environ, **FRAMEWORKS[framework].env, "CUDA_VISIBLE_DEVICES": ""}


def check_parity(workload: str, frameworks: Sequence[str] | None = None, executions: Sequence[str] | None = None,
                 precisions: Sequence[str] | None = None, preset: str = "tiny",
                 config: Sequence[tuple[str, str]] = (), data: Sequence[tuple[str, str]] = ()) -> ParityReport:
    """Run every framework's probe in every mode and compare each with the reference's (the first framework).

    Args:
        workload: a workload name, or a reference (``MODULE:CLASS``, ``FILE.py:CLASS``).
        frameworks: the frameworks compared, the reference first (default: those of torch, tensorflow and jax
            that implement the workload and are installed).
        executions: execution modes (default: eager); precisions: fp32 and/or bf16 (default: fp32).
        preset: the workload's size preset; config: overrides of its fields (``--set KEY=VALUE``).
        data: the workload's data options, as a run takes them (``--data KEY=VALUE``): the model parity proves is
            the one that data builds (its classes, its vocabulary).

    Raises:
        SpecError: an unknown workload, framework, mode, precision, preset or field, or a framework that does not
            implement the workload or the mode, named with the accepted values; before any process starts.
    """
    names, modes = plan(workload, frameworks, executions, precisions, preset, config, data)
    with temporary_folder("bakeoff-parity-") as tmp:
        def run(job: tuple[str, Mode]) -> tuple[tuple[str, Mode], dict[str, np.ndarray] | str]:
            framework, mode = job
            out = Path(tmp) / f"{framework}-{mode.execution}-{mode.precision}.npz"
            log.info("parity probe: %s, %s", framework, mode)
            # In its own session, as a trial: leaving the block kills whatever is left of it (a timed-out probe,
            # Inductor's compile workers), so no probe process outlives its turn. With its framework record's
            # settings, as a trial's (a Keras row's KERAS_BACKEND: Keras reads it once, when first imported).
            with process_group(probe_command(workload, framework, mode, out, preset, config, data),
                               f"parity probe {framework} {mode}", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=probe_env(framework)) as proc:
                try:
                    _, stderr = proc.communicate(timeout=PROBE_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    return job, f"timed out after {PROBE_TIMEOUT_S:g} s"
            if proc.returncode == UNSUPPORTED_EXIT and stderr.strip():  # the engine refused: why, its last line
                return job, stderr.strip().splitlines()[-1]
            if proc.returncode != 0:
                return job, stderr.strip()[-2000:] or f"exit status {proc.returncode}"
            return job, dict(np.load(out))

        jobs = [(f, m) for m in modes for f in names]
        with ThreadPoolExecutor(max(1, min(usable_cores(), len(jobs)))) as pool:
            probes = dict(pool.map(run, jobs))
    failed = {f"{f} {m}": result for (f, m), result in probes.items() if isinstance(result, str)}
    rows = []
    for mode in modes:
        ref = probes[names[0], mode]
        for framework in names:
            probe = probes[framework, mode]
            if isinstance(ref, dict) and isinstance(probe, dict):
                rows += compare(ref, probe, framework, mode, reference=framework == names[0],
                                declared=tuple(registry.workload_class(workload).zero_gradient))
    return ParityReport(registry.workload_fields(workload)["workload"], names[0], tuple(names), tuple(modes),
                        tuple(rows), failed)


def compare(ref: dict[str, np.ndarray], probe: dict[str, np.ndarray], framework: str, mode: Mode,
            reference: bool = False, declared: tuple[str, ...] = ()) -> list[CheckRow]:
    """Every check of one framework's probe against the reference's, in one mode (the reference itself: its
    parameters, evaluation and accumulation, the checks a probe passes alone); ``declared``: the tensors the
    workload says have a zero gradient (``Workload.zero_gradient``)."""
    tol = checks.TOLERANCES[mode.precision]
    init = checks.unflatten(ref, "init")
    # The probe loaded the perturbed initial weights and read them back: every name, shape and value exactly.
    found: dict[str, list[checks.Finding] | str] = {"parameters": checks.compare_parameters(
        int(probe["num_params"]), checks.unflatten(probe, "roundtrip"), perturbed(init))}
    if not reference:
        found["outputs"] = (checks.compare_outputs(probe["outputs"], ref["outputs"], mode.precision,
                                                   "outputs (initial weights)")
                            + checks.compare_outputs(probe["outputs_perturbed"], ref["outputs_perturbed"],
                                                     mode.precision, "outputs (perturbed weights)"))
        grads = checks.unflatten(probe, "grad"), checks.unflatten(ref, "grad")
        found["gradients"] = (checks.compare_gradients(*grads, tol.gradients, declared=declared)
                              if tol.gradients is not None
                              else f"not per tensor in {mode.precision} (losses absorb its rounding)")
        found["losses"] = (checks.compare_losses(probe["losses"], ref["losses"], mode.precision)
                           + [dataclasses.replace(f, item=f"{f.item} (4 micro-batches a step)")
                              for f in checks.compare_losses(probe["losses_accum"], ref["losses_accum"],
                                                             mode.precision)])
        found["weights"] = (checks.compare_weights(init, checks.unflatten(probe, "weights"),
                                                   checks.unflatten(ref, "weights"), tol.weights,
                                                   checks.zero_gradients(*grads, declared))
                            if tol.weights is not None
                            else f"not per tensor in {mode.precision} (losses absorb its rounding)")
    if "outputs_dropout" in probe:  # the preset has dropout
        found["evaluation"] = checks.compare_evaluation(probe, mode.precision)
    found["accumulation"] = (f"not per tensor in {mode.precision}" if mode.precision != "fp32"
                             else NOT_EXACT if any(map(checks.running_statistic, init))
                             else checks.compare_accumulation(probe))
    return [CheckRow(mode, framework, name, tuple(value) if isinstance(value, list) else (),
                     value if isinstance(value, str) else "")
            for name in CHECKS if (value := found.get(name)) is not None]
