"""Runs specs as trials, each in a fresh subprocess, and records every outcome in the store.

Resume is the default: a trial whose spec key is already in the store is skipped, whatever its status, so an
interrupted run picks up where it stopped. ``retry_failed`` re-runs the recorded trials that did not succeed;
``fresh`` re-runs everything.

Order and resume (:mod:`bakeoff.plan.order`): repeat by repeat, frameworks taking turns. Each result records its place
in its ``order`` section (``Order(position=3, of=18, seed=0)``, 1-based, in the planned order of the whole run,
skipped trials included). Store keys do not depend on the order.

Signals (:mod:`bakeoff.run.process`): SIGINT or SIGTERM during :func:`run` kills the running trial's whole
process group and raises :class:`~bakeoff.run.process.Interrupted`. The stopped trial records nothing; its
checkpoint directory is kept for the next run to resume from. A result row is written whole or not at all:
signals are held while it is stored.

Files: a store's trial logs (``logs/<key>.log``), checkpoints (``checkpoints/<key>/``) and TensorBoard runs
(``tensorboard/<workload>/<preset>/<framework-mode>/seed<N>``, see :func:`tensorboard_runs`) and, with
``--profile``, profiler traces (``profiles/``, named alike: :mod:`bakeoff.trial.profile`) live in the folder
named after the store (:func:`bakeoff.results.store.artifacts_dir`: ``results/bakeoff.sqlite`` -> ``results/bakeoff/``).

A trial that dies of SIGKILL is out of memory only with evidence: the runner's own memory cap, or the kernel's
OOM-kill counter of this process's memory cgroup having risen during the trial
(:func:`bakeoff.run.process.read_oom_kills`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath

from bakeoff.core import registry
from bakeoff.core.identity import identify
from bakeoff.core.result import Distributed, Mfu, Order, TrialResult
from bakeoff.core.spec import Device, Parallelism, RunSpec, SpecError, Status
from bakeoff.measure import ceiling
from bakeoff.measure.environment import cuda_devices, usable_cores
from bakeoff.plan.order import measure_again, order, to_run
from bakeoff.results import model_dir
from bakeoff.results.model_dir import KEEP_MODEL_ENV
from bakeoff.results.store import Store, StoreWriteError
from bakeoff.run import launchers
from bakeoff.run.executors.base import Executor, LocalExecutor, Placement, TrialJob
from bakeoff.run.process import OomKills, interruptible, read_oom_kills
from bakeoff.run.process import hold as hold_signals
from bakeoff.trial.loop import NO_EVALUATION_ENV
from bakeoff.trial.profile import PROFILE_ENV, PROFILE_STEPS_ENV
from bakeoff.trial.profile import Request as ProfileRequest

log = logging.getLogger("bakeoff.run.executors.local")

Progress = Callable[[str, RunSpec, TrialResult | None], None]
"""Called with ("queued" | "start" | "skip" | "done", spec, result) as the run goes: first "queued" for each
trial that will run, in order, then "skip", or "start" and "done", for each trial."""


@dataclasses.dataclass
class RunSummary:
    ran: list[TrialResult]
    skipped: list[RunSpec]
    specs: list[RunSpec] = dataclasses.field(default_factory=list)  # every spec of the run, content identified


def data_key(spec: RunSpec) -> tuple:
    """What a spec's data set depends on: the workload, preset, data options and config overrides (which may
    change the data: the autoencoder's sizes, the text classifier's sequence length and vocabulary)."""
    return spec.workload, spec.preset, spec.data, spec.config


def validate(specs: Sequence[RunSpec], here: bool = True) -> dict[tuple, int]:
    """Check, before any trial starts, everything that can be checked without a framework.

    Unknown workloads, presets and config overrides, and ``device = cuda`` on a machine without a visible NVIDIA
    GPU, raise :class:`SpecError`; unusable data raises
    ``DataError``. Each distinct :func:`data_key` is loaded once, here in the parent, with numpy only, and the
    configuration is resolved against it (checks that depend on the data, like a kernel against the image size,
    fail here). Returns the training-set size of each :func:`data_key`. ``here``: the trials run on this machine
    (without, its GPUs are not checked: a cluster's executor checks its nodes').
    """
    train_sizes: dict[tuple, int] = {}
    entries: dict[tuple, list[str]] = {}  # what each data set's batches hold
    if here and any(spec.device is Device.CUDA for spec in specs):
        gpus, why = cuda_devices()
        if not gpus:
            raise SpecError(f"--device cuda: {why}; run with --device cpu, or auto (a GPU when the framework sees "
                            "one)")
    for spec in specs:
        workload = registry.workload(spec)
        workload.config(spec.preset, spec)
        key = data_key(spec)
        if key not in train_sizes:
            data = workload.load_data(spec)
            workload.config(spec.preset, spec, data)
            train_sizes[key], entries[key] = data.num_train, sorted(data.train)
        why = registry.data_problem(spec, entries[key])  # a Keras function's declared input and labels
        if why:
            raise SpecError(why)
        examples, available = spec.batch_size * spec.grad_accum, train_sizes[key]
        if examples > available:
            raise SpecError(f"one step needs batch_size × grad_accum = {spec.batch_size} × {spec.grad_accum} = "
                            f"{examples} examples, more than the {available} in the training set of "
                            f"{spec.workload}: lower batch_size or grad_accum")
    return train_sizes


def _trial_env(spec: RunSpec, tmp: str, keep_dir: Path | None = None, probe_ceiling: bool = False,
               profile: ProfileRequest | None = None, evaluate: bool = True) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(NO_EVALUATION_ENV, None)  # only a trial asked not to evaluate skips it
    if not evaluate:
        env[NO_EVALUATION_ENV] = "1"
    for name in (PROFILE_ENV, PROFILE_STEPS_ENV):  # only a trial asked to profile profiles
        env.pop(name, None)
    if profile is not None:
        env.update(profile.env())
    env.pop(KEEP_MODEL_ENV, None)  # only a trial asked to keep its model keeps one
    env.pop(ceiling.PROBE_ENV, None)  # only a trial asked to probe probes
    if keep_dir is not None:
        env[KEEP_MODEL_ENV] = str(keep_dir)
    if probe_ceiling:
        env[ceiling.PROBE_ENV] = "1"
    # Compile caches start empty in every trial, so graph-mode compile time is the cold cost, measured the same
    # way on every run, rather than whatever an earlier trial left on disk.
    env.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"), TRITON_CACHE_DIR=os.path.join(tmp, "triton"))
    threads = str(spec.threads or usable_cores())
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, PYTHONUNBUFFERED="1")
    env.update(spec.info.env)  # its record's settings (KERAS_BACKEND, XLA's allocator)
    if spec.device.value == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _failure(spec: RunSpec, status: Status, reason: str) -> TrialResult:
    return TrialResult(spec=spec.to_dict(), key=spec.key(), status=status, reason=reason)


def _sigkill_failure(spec: RunSpec, before: OomKills, elapsed: float, tail: str) -> TrialResult:
    """A trial killed by SIGKILL from outside the runner: out of memory only if the kernel's counter says so."""
    after = read_oom_kills()
    if before.count is not None and after.count is not None and after.source == before.source:
        if after.count > before.count:
            return _failure(spec, Status.OUT_OF_MEMORY,
                            f"killed by SIGKILL after {elapsed:.0f} s by the kernel's out-of-memory killer "
                            f"(oom_kill in {after.source} rose from {before.count} to {after.count} during the "
                            f"trial); last output: {tail[-300:]}")
        evidence = f"oom_kill in {after.source} stayed at {after.count} during the trial"
    elif before.count is not None and after.count is not None:
        evidence = f"the OOM-kill counter read before ({before.source}) and after ({after.source}) differ"
    else:
        evidence = after.source if after.count is None else before.source
    return _failure(spec, Status.FAILED, f"killed by SIGKILL (no evidence of out-of-memory: {evidence}) after "
                                         f"{elapsed:.0f} s; last output: {tail[-300:]}")


def _log_paths(log_dir: Path, spec: RunSpec, plan: launchers.Plan) -> list[Path]:
    """``logs/<key>.log`` for the group's first member, ``logs/<key>.<member>.log`` for the others."""
    key = spec.key()
    return [log_dir / (f"{key}.log" if i == 0 else f"{key}.{_safe(m.name).replace('_', '')}.log")
            for i, m in enumerate(plan.members)]


def _tail(paths: Sequence[Path], first: str, names: Sequence[str]) -> str:
    """The last output of the member that failed first (else of the first member)."""
    path = paths[names.index(first)] if first in names else paths[0]
    return path.read_text(errors="replace")[-1500:].strip() if path.exists() else ""


def run_one(spec: RunSpec, timeout_s: float, log_dir: Path, checkpoint_dir: Path | None = None,
            tensorboard_dir: Path | None = None, memory_cap: int | None = None,
            keep_dir: Path | None = None, probe_ceiling: bool = False,
            profile: ProfileRequest | None = None, evaluate: bool = True, hosts: Sequence[str] | None = None,
            place: Placement | None = None) -> TrialResult:
    """Run one spec as a fresh process group (:mod:`bakeoff.run.launchers`); a crash, hang or kill of any
    member becomes a result, never an exception.

    A checkpoint left in ``checkpoint_dir`` by an interrupted attempt is resumed from; it is deleted once the
    trial succeeds. ``tensorboard_dir`` receives the trial's TensorBoard event files. With ``memory_cap`` (bytes),
    the trial is killed and recorded as out of memory when its group's resident set grows past it. A group whose
    port was taken before it bound it is started again on new ports (``extras["port_retries"]``). With
    ``keep_dir``, a trial that succeeds keeps its trained model there (:mod:`bakeoff.results.model_dir`). With
    ``probe_ceiling``, the trial probes the matmul ceiling after its result (:mod:`bakeoff.measure.ceiling`). With
    ``profile``, a trial that succeeds profiles a few more steps after its result (:mod:`bakeoff.trial.profile`).
    Without ``evaluate``, the trial never evaluates its model (:func:`bakeoff.trial.loop.train`).
    ``hosts`` and ``place``: the machine of each worker and how a member starts on its machine, from an executor
    that spreads a trial over nodes (:meth:`bakeoff.run.executors.base.TrialJob.run_here`).
    """
    reason = registry.unsupported(spec) or launchers.unsupported_here(spec)
    if reason:
        return _failure(spec, Status.UNSUPPORTED, reason)
    missing = registry.not_installed(spec.framework.value)
    if missing:
        return _failure(spec, Status.UNSUPPORTED, missing)
    log_dir.mkdir(parents=True, exist_ok=True)
    retries = 0
    while True:
        result, port_in_use = _run_group(spec, timeout_s, log_dir, checkpoint_dir, tensorboard_dir, memory_cap,
                                         keep_dir, probe_ceiling, profile, evaluate, hosts, place)
        if not port_in_use or retries + 1 >= PORT_ATTEMPTS:
            break
        retries += 1
        log.warning("%s: a port was taken before the group bound it; starting again on new ports", spec.label())
    if retries:
        result.extras["port_retries"] = retries
    return result


PORT_ATTEMPTS = 3
"""Starts of a group whose port turns out to be in use (the ports are free when chosen, but not reserved)."""


def _run_group(spec: RunSpec, timeout_s: float, log_dir: Path, checkpoint_dir: Path | None,
               tensorboard_dir: Path | None, memory_cap: int | None,
               keep_dir: Path | None = None, probe_ceiling: bool = False,
               profile: ProfileRequest | None = None, evaluate: bool = True, hosts: Sequence[str] | None = None,
               place: Placement | None = None) -> tuple[TrialResult, bool]:
    """One start of the group: its result, and whether it failed because a port was in use. A group spread over
    machines keeps its spec and rank results under the store's folder, which its nodes share (a node's ``/tmp`` is
    its own); otherwise in this machine's temporary folder."""
    shared = None
    if hosts is not None and len(set(hosts)) > 1:
        shared = log_dir.parent / "tmp"
        shared.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bakeoff-trial-", dir=shared) as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_path.write_text(spec.to_json())
        started, oom_before = time.perf_counter(), read_oom_kills()
        args = [str(spec_path), str(result_path), str(checkpoint_dir or ""), str(tensorboard_dir or "")]
        group = launchers.plan(spec, args, _trial_env(spec, tmp, keep_dir, probe_ceiling, profile, evaluate),
                               hosts=hosts)
        if place is not None:  # members on other nodes start there (a Slurm job step), the rest here
            group.members = [place(member) for member in group.members]
        logs = _log_paths(log_dir, spec, group)
        names = [m.name for m in group.members]
        what = f"{spec.workload}/{spec.preset} {spec.label()} seed {spec.seed}"
        outcome = launchers.run_group(group, logs, timeout_s, memory_cap, what)
        if outcome.killed:
            status = Status.TIMEOUT if outcome.killed.startswith("no result") else Status.OUT_OF_MEMORY
            failed = _failure(spec, status, f"{outcome.killed} (log: {logs[0]})")
            failed.extras["timeout_s"] = timeout_s  # a later run with a longer timeout runs it again (to_run)
            return failed, False
        results = launchers.rank_results(result_path, group.ranks)
        tail = _tail(logs, outcome.first_failure, names)
        if results[0] is not None and not outcome.first_failure:
            result = launchers.merge(spec, group, results, outcome) if spec.parallelism is not Parallelism.NONE \
                else results[0]
            result.extras["log"] = str(logs[0])
            if tensorboard_dir is not None:
                result.extras["tensorboard"] = str(tensorboard_dir)
            if result.status is Status.OK and checkpoint_dir is not None:
                shutil.rmtree(checkpoint_dir, ignore_errors=True)
            return result, False
    elapsed = time.perf_counter() - started
    first = outcome.first_failure or names[0]
    code = outcome.codes.get(first)
    who = "trial process" if len(names) == 1 else f"{first} of the trial's {len(names)} processes"
    launcher = launchers.LAUNCHERS[group.launcher]
    if launcher.group and any(marker in tail.lower() for marker in launchers.PORT_IN_USE):
        return _failure(spec, Status.FAILED, f"{who}: a port was in use: {tail[-300:]}"), True
    cause = launcher.root_cause(tail)
    if cause is not None:  # the launcher ended the group for a rank that failed: the rank is the first failure
        rank, code = cause
        who = f"rank {rank} of {spec.workers} ({launcher.program}'s first observed failure)"
    if code == -signal.SIGKILL:
        result = _sigkill_failure(spec, oom_before, elapsed, tail)
        result.reason = f"{who} " + result.reason if who != "trial process" else result.reason
    elif code is not None and code < 0:
        result = _failure(spec, Status.FAILED, f"{who} was killed by {signal.Signals(-code).name} after "
                                               f"{elapsed:.0f} s and wrote no result: {tail}")
    elif code == 0:  # a parameter server or worker that stopped serving, or a rank that wrote nothing
        result = _failure(spec, Status.FAILED, f"{who} exited after {elapsed:.0f} s before the trial ended: {tail}")
    else:
        result = _failure(spec, Status.FAILED, f"{who} exited with code {code} and wrote no result: {tail}")
    if launcher.group:
        result.distributed = Distributed(launcher=group.launcher, first_failure=who, exit_codes=outcome.codes,
                                         logs=[str(p) for p in logs])
    return result, False


def run(specs: Sequence[RunSpec], store: Store, suite: str, timeout_s: float = 900,
        fresh: bool = False, retry_failed: bool = False, log_dir: Path | None = None,
        progress: Progress | None = None, annotations: dict[str, dict] | None = None,
        validated: bool = False, order_seed: int = 0, keep_models: Path | None = None,
        profile_steps: int = 0, retry_busy: bool = False, executor: Executor | None = None) -> RunSummary:
    """Run every spec not already recorded (or recorded but measured again:
    :func:`bakeoff.plan.order.measure_again`), in :func:`bakeoff.plan.order.order`, storing each result as it
    finishes.

    ``annotations`` maps spec keys to notes recorded with that trial's result (:meth:`TrialResult.annotate`: its
    batch-size search, its adaptive-repeats plan).
    ``validated``: the caller already ran :func:`validate` on these specs (it loads every data set once).
    SIGINT or SIGTERM raises :class:`Interrupted` after killing the running trial, which is not recorded.
    With ``keep_models``, each trial that succeeds keeps its model in a folder of it named by
    :func:`bakeoff.results.model_dir.directory_name`. With ``profile_steps``, each trial that runs and succeeds
    then profiles that many steps (:mod:`bakeoff.trial.profile`) into its folder of the store's ``profiles``
    (named as its TensorBoard run is: :func:`tensorboard_runs`); a trial reused from the store is not profiled.
    ``executor`` executes the trials (:mod:`bakeoff.run.executors.base`; default: here, one after another); this
    process stores every result, whichever executor ran it.
    """
    if not validated:
        validate(specs, here=executor is None or not executor.remote)
    # Keys by content (bakeoff.core.identity): a changed data file, configuration or version is a new trial.
    identified = identify(specs)
    annotations = {new.key(): (annotations or {}).get(old.key(), {}) for old, new in zip(specs, identified,
                                                                                           strict=True)}
    with interruptible():
        summary = _run(order(identified, order_seed), store, suite, timeout_s, fresh, retry_failed,
                       log_dir or store.artifacts / "logs", progress, annotations, order_seed, keep_models,
                       profile_steps, retry_busy, executor)
    summary.specs = identified
    return summary


TENSORBOARD_MARK = "bakeoff-trial.json"
"""The file in each TensorBoard run folder naming the trial (its key) that owns the folder."""


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._=+-" else "_" for c in name.replace("/", "-"))


def tensorboard_runs(specs: Sequence[RunSpec], root: Path) -> dict[str, Path]:
    """The TensorBoard run folder of each spec (by key) under ``root``: ``workload/preset/framework-mode/seedN``
    (``framework-mode`` is :meth:`RunSpec.label` with dashes: ``torch-eager-bf16-accum2``).

    Configurations that this would put in one folder are kept apart: within ``specs``, by the fields that differ
    (``torch-eager-batch_size=16``, as the report labels them), or by the key when no field does; against a folder an
    earlier trial of another key owns (its :data:`TENSORBOARD_MARK`), by the key: ``seed0-<key>``. A trial resumed
    or re-run under the same key writes into the same folder.
    """
    from bakeoff.analysis.stats import distinct_labels  # the report's names for configurations sharing a label

    by_base: dict[PurePosixPath, dict[str, RunSpec]] = {}
    for spec in specs:
        base = PurePosixPath(spec.workload, spec.preset, _safe(spec.label()), f"seed{spec.seed}")
        by_base.setdefault(base, {})[spec.key()] = spec
    runs: dict[str, Path] = {}
    for base, group in by_base.items():
        names = {key: _safe(label) for key, label in zip(group, distinct_labels(list(group.values())), strict=True)}
        if len(group) > 1 and len(set(names.values())) < len(group):
            names = {key: f"{_safe(group[key].label())}-{key[:8]}" for key in group}
        for key, name in names.items():
            folder = root / base.parent.parent / name / base.name
            try:
                owner = json.loads((folder / TENSORBOARD_MARK).read_text()).get("key")
            except (OSError, ValueError):
                owner = None
            runs[key] = folder.with_name(f"{base.name}-{key[:8]}") if owner not in (None, key) else folder
    return runs


def _utilisation(store: Store, wanted: ceiling.Need, kept: dict | None, result: TrialResult) -> Mfu:
    """The trial's MFU (:func:`bakeoff.measure.ceiling.utilisation`), keeping the ceiling it probed, if it did."""
    probed = result.ceiling_probe
    if wanted.key is not None and kept is None and probed is not None and probed.status == "ok":
        store.put_ceiling(wanted.key, wanted.fingerprint, probed.kept())
        kept = store.ceiling(wanted.key)
    config = result.extras.get("config")
    flops = registry.workload(result.run_spec).flops_per_example(config) if config else None
    return ceiling.utilisation(result, kept, wanted, flops)


UNSTORED = "unstored-{key}.json"
"""A result the store could not take, kept in the run's log folder; the next run of its suite stores it."""


def _unstored(result: TrialResult, store: Store, log_dir: Path, exc: Exception) -> StoreWriteError:
    """The error that ends a run whose result could not be stored: the result is kept beside the logs, or printed
    whole on standard error when even that cannot be written, so the trial is not lost."""
    text = json.dumps(result.to_dict())
    path = log_dir / UNSTORED.format(key=result.key)
    try:
        temporary = path.with_suffix(".part")
        temporary.write_text(text)
        temporary.replace(path)
        where = f"kept in {path}; the next `bakeoff run` of this suite stores it"
    except OSError:
        sys.stderr.write(text + "\n")
        where = "printed above (JSON), as it could not be written either"
    spec = result.run_spec
    return StoreWriteError(f"could not store {spec.workload}/{spec.preset} {spec.label()} seed {spec.seed} in "
                           f"{store.path} ({exc.__cause__ or exc}); its result ({result.status.value}) is {where}. "
                           "Make room (or fix the store), then run the same command again: it resumes with what "
                           "is missing")


def _store_unstored(store: Store, log_dir: Path, suites: Mapping[str, str]) -> None:
    """Store the results an earlier run kept in ``log_dir`` because the store could not take them (for the trials
    of this run, under this run's suite), then delete them."""
    for path in sorted(log_dir.glob(UNSTORED.format(key="*"))):
        try:
            result = TrialResult.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, SpecError) as exc:
            log.warning("%s: cannot read a result kept from an earlier run (%s); left where it is", path, exc)
            continue
        if result.key in suites:
            store.put(result, suites[result.key])
            path.unlink()
            log.info("stored %s, kept from an earlier run the store could not take", path.name)


def _claim(folder: Path, spec: RunSpec) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TENSORBOARD_MARK).write_text(json.dumps({"key": spec.key(), "label": spec.label(), "seed": spec.seed}))


def _run(specs: list[RunSpec], store: Store, suite: str, timeout_s: float, fresh: bool, retry_failed: bool,
         log_dir: Path, progress: Progress | None, annotations: dict[str, dict], order_seed: int,
         keep_models: Path | None = None, profile_steps: int = 0, retry_busy: bool = False,
         executor: Executor | None = None) -> RunSummary:
    _store_unstored(store, log_dir, {spec.key(): suite for spec in specs})
    recorded, again = store.statuses(), measure_again(store, timeout_s, retry_busy)

    def runs(spec: RunSpec) -> bool:
        return to_run(spec, recorded, fresh, retry_failed, again)

    summary = RunSummary(ran=[], skipped=[])
    queued = [spec for spec in specs if runs(spec)]
    tensorboard = tensorboard_runs(queued, store.artifacts / "tensorboard")
    profiles = tensorboard_runs(queued, store.artifacts / "profiles") if profile_steps else {}
    if progress:
        for spec in queued:
            progress("queued", spec, None)
    needs: dict[str, tuple[ceiling.Need, dict | None]] = {}

    def jobs() -> Iterator[TrialJob]:
        """The trials to run, in order, made as the executor asks for them (the local one asks for the next only
        when the last is stored, so a ceiling it probed is kept and not probed again)."""
        for position, spec in enumerate(specs, 1):
            if not runs(spec):
                summary.skipped.append(spec)
                if progress:
                    progress("skip", spec, None)
                continue
            _claim(tensorboard[spec.key()], spec)
            keep_dir = keep_models / model_dir.directory_name(spec) if keep_models is not None else None
            profile = ProfileRequest(profiles[spec.key()], profile_steps) if profile_steps else None
            if profile is not None:
                _claim(profile.directory, spec)
            wanted = ceiling.need(spec)
            kept = store.ceiling(wanted.key) if wanted.key else None
            needs[spec.key()] = wanted, kept
            job = TrialJob(spec, position, timeout_s, log_dir, store.artifacts / "checkpoints" / spec.key(),
                           tensorboard[spec.key()], keep_dir=keep_dir, probe_ceiling=bool(wanted.key) and kept is None,
                           profile=profile)
            reason = registry.unsupported(spec)
            if reason:  # no process starts, on any executor: recorded here (a cluster has nothing to run for it)
                started(job)
                done(job, _failure(spec, Status.UNSUPPORTED, reason))
                continue
            yield job

    def started(job: TrialJob) -> None:
        if progress:
            progress("start", job.spec, None)

    def done(job: TrialJob, result: TrialResult) -> None:
        spec = job.spec
        result.annotate(annotations.get(spec.key(), {}))
        result.order = Order(job.position, len(specs), order_seed)
        wanted, kept = needs[spec.key()]
        try:
            if result.status is Status.OK:
                result.mfu = _utilisation(store, wanted, kept, result)  # may store the ceiling it probed
            with hold_signals():  # the row is written whole; a signal meanwhile is raised after it
                store.put(result, suite)
        except StoreWriteError as exc:  # a full disk, a store gone read-only: keep the result, stop the run
            raise _unstored(result, store, log_dir, exc) from None
        summary.ran.append(result)
        log.info("%s %s: %s %s", spec.label(), spec.key(), result.status.value, result.reason)
        if progress:
            progress("done", spec, result)

    (executor or LocalExecutor()).run(jobs(), started, done)
    return summary
