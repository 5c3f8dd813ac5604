"""The runner: which of a suite's trials run, in which order, and each result stored as it comes back, whichever
executor (:mod:`bakeoff.run.executors`) runs them; this process stays the only writer of the store.

Resume is the default: a trial whose spec key is already in the store is skipped, whatever its status, so an
interrupted run picks up where it stopped. ``retry_failed`` re-runs the recorded trials that did not succeed;
``fresh`` re-runs everything; ``retry_busy`` measures again the trials measured on a busy machine and keeps the
quieter of the two measurements, the other stored beside it (:meth:`~bakeoff.results.store.Store.keep_quieter`).

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

One trial's process group is :func:`bakeoff.run.executors.local.run_one`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath

from bakeoff.core import registry
from bakeoff.core.identity import identify
from bakeoff.core.result import Mfu, Order, TrialResult
from bakeoff.core.spec import Device, RunSpec, SpecError, Status
from bakeoff.measure import ceiling
from bakeoff.measure.environment import cuda_devices
from bakeoff.plan.order import busy, measure_again, order, to_run
from bakeoff.results import model_dir
from bakeoff.results.store import Store, StoreWriteError
from bakeoff.results.trial_claims import Claims
from bakeoff.run.executors.executor import Executor, TrialJob
from bakeoff.run.executors.local import LocalExecutor, safe_name
from bakeoff.run.process import hold as hold_signals
from bakeoff.run.process import interruptible
from bakeoff.trial.profile import Request as ProfileRequest

log = logging.getLogger("bakeoff.run.runner")

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


def run(specs: Sequence[RunSpec], store: Store, suite: str, timeout_s: float = 900,
        fresh: bool = False, retry_failed: bool = False, log_dir: Path | None = None,
        progress: Progress | None = None, annotations: dict[str, dict] | None = None,
        validated: bool = False, order_seed: int = 0, keep_models: Path | None = None,
        profile_steps: int = 0, retry_busy: bool = False, executor: Executor | None = None,
        evaluate: bool = True, say: Callable[[str], None] = log.info) -> RunSummary:
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
    ``executor`` executes the trials (:mod:`bakeoff.run.executors.executor`; default: here, one after another); this
    process stores every result, whichever executor ran it. Without ``evaluate``, the trials that run never
    evaluate the test split (their results measure training alone; ``training.evaluation`` says so).

    Another run on the same store (``--concurrent``, another machine) never runs a trial at once with this one
    (:mod:`bakeoff.results.trial_claims`): a trial it is running is left for after the others, then waited for
    (left to it, where this run's executor has trials of its own still running then: the two could wait on each
    other); a trial it stored since this run started is taken from the store, skipped, not measured again. ``say``
    is told of each (what a user would want to read).
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
                       profile_steps, retry_busy, executor, evaluate, say)
    summary.specs = identified
    return summary


TENSORBOARD_MARK = "bakeoff-trial.json"
"""The file in each TensorBoard run folder naming the trial (its key) that owns the folder."""


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
        base = PurePosixPath(spec.workload, spec.preset, safe_name(spec.label()), f"seed{spec.seed}")
        by_base.setdefault(base, {})[spec.key()] = spec
    runs: dict[str, Path] = {}
    for base, group in by_base.items():
        labels = distinct_labels(list(group.values()))
        names = {key: safe_name(label) for key, label in zip(group, labels, strict=True)}
        if len(group) > 1 and len(set(names.values())) < len(group):
            names = {key: f"{safe_name(group[key].label())}-{key[:8]}" for key in group}
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
    config = result.setup.config
    flops = registry.workload(result.run_spec).flops_per_example(config) if config else None
    return ceiling.utilisation(result, kept, wanted, flops)


UNSTORED = "unstored-{key}.json"
"""A result the store could not take, kept in the run's log folder; the next run of its suite stores it."""


def _unstored(result: TrialResult, store: Store, log_dir: Path, exc: Exception) -> StoreWriteError:
    """The error that ends a run whose result could not be stored: the result is kept beside the logs, or printed
    whole on standard error when even that cannot be written, so the trial is not lost."""
    text = json.dumps(result.to_dict())
    path = log_dir / UNSTORED.format(key=result.key)
    temporary = path.with_suffix(".part")
    try:
        temporary.write_text(text)
        temporary.replace(path)
        where = f"kept in {path}; the next `bakeoff run` of this suite stores it"
    except OSError:
        with contextlib.suppress(OSError):  # a full disk leaves it empty or cut short: nothing to keep
            temporary.unlink()
        sys.stderr.write(text + "\n")
        where = "printed above (JSON), as it could not be written either"
    spec = result.run_spec
    why = exc.why if isinstance(exc, StoreWriteError) else str(exc)
    return StoreWriteError(f"could not store {spec.title()} in "
                           f"{store.path}: {why}; its result ({result.status.value}) is {where}. "
                           "Make room (or fix the store), then run the same command again: it resumes with what "
                           "is missing")


def _store_unstored(store: Store, log_dir: Path, suites: Mapping[str, str]) -> None:
    """Store the results an earlier run kept in ``log_dir`` because the store could not take them (for the trials
    of this run, under this run's suite), then delete them; and delete what an earlier bakeoff left of a result
    it could not write whole (``unstored-*.part`` older than a minute: one being written now is another run's)."""
    for part in log_dir.glob(UNSTORED.format(key="*").removesuffix(".json") + ".part"):
        with contextlib.suppress(OSError):
            if time.time() - part.stat().st_mtime > 60:
                part.unlink()
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


def _jobs(specs: Sequence[RunSpec], runs: Callable[[RunSpec], bool], skip: Callable[[RunSpec], None], claims: Claims,
          claimed_job: Callable[[int, RunSpec], Iterator[TrialJob]], say: Callable[[str], None]) -> Iterator[TrialJob]:
    """The trials to run, in order, made as the executor asks for them (the local one asks for the next only
    when the last is stored, so a ceiling it probed is kept and not probed again); those another run on this
    store is running, after the others, once it lets them go."""
    later: list[tuple[int, RunSpec, str]] = []  # (position, spec, who held it)
    for position, spec in enumerate(specs, 1):
        if not runs(spec):
            skip(spec)
            continue
        holder = claims.take(spec.key(), spec.title())
        if holder is not None:
            say(f"{spec.title()} is being run by another bakeoff run on this store ({holder}); running the "
                "others first")
            later.append((position, spec, holder))
            continue
        yield from claimed_job(position, spec)
    for position, spec, _ in later:
        holder = claims.take(spec.key(), spec.title())
        if holder is not None and claims.holding:  # trials of this run in flight (an executor running several)
            # their results are stored only once this generator yields: waiting here could wait on a run that
            # waits on this one
            say(f"{spec.title()} is still being run by another bakeoff run on this store ({holder}); left to it, "
                "not run here: its result is stored by that run")
            continue
        if holder is not None:
            say(f"waiting for {spec.title()}, which another bakeoff run on this store is running ({holder})")
            claims.take(spec.key(), spec.title(), wait=True)
        yield from claimed_job(position, spec)


def _job(spec: RunSpec, position: int, timeout_s: float, log_dir: Path, store: Store, tensorboard: Path,
         profile_dir: Path | None, profile_steps: int, keep_models: Path | None,
         evaluate: bool) -> tuple[TrialJob, tuple[ceiling.Need, dict | None]]:
    """The job of one trial this run holds, its folders claimed, and the matmul ceiling its MFU needs with the one
    the store keeps (None: the trial probes it)."""
    _claim(tensorboard, spec)
    keep_dir = keep_models / model_dir.directory_name(spec) if keep_models is not None else None
    profile = ProfileRequest(profile_dir, profile_steps) if profile_steps else None
    if profile is not None:
        _claim(profile.directory, spec)
    wanted = ceiling.need(spec)
    kept = store.ceiling(wanted.key) if wanted.key else None
    job = TrialJob(spec, position, timeout_s, log_dir, store.artifacts / "checkpoints" / spec.key(),
                   tensorboard, keep_dir=keep_dir, probe_ceiling=bool(wanted.key) and kept is None,
                   profile=profile, evaluate=evaluate)
    return job, (wanted, kept)


def _run(specs: list[RunSpec], store: Store, suite: str, timeout_s: float, fresh: bool, retry_failed: bool,
         log_dir: Path, progress: Progress | None, annotations: dict[str, dict], order_seed: int,
         keep_models: Path | None = None, profile_steps: int = 0, retry_busy: bool = False,
         executor: Executor | None = None, evaluate: bool = True,
         say: Callable[[str], None] = log.info) -> RunSummary:
    _store_unstored(store, log_dir, {spec.key(): suite for spec in specs})
    recorded, again = store.statuses(), measure_again(store, timeout_s, retry_busy)
    stamps, claims = store.stamps(), Claims(store.artifacts / "claims")
    # a busy trial measured again keeps the quieter measurement, the other beside it (--fresh replaces as ever)
    quieter = busy(store) if retry_busy and not fresh else set()

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

    def skip(spec: RunSpec) -> None:
        summary.skipped.append(spec)
        if progress:
            progress("skip", spec, None)

    def claimed_job(position: int, spec: RunSpec) -> Iterator[TrialJob]:
        """The trial's job, once this run holds its claim; none when another run stored it since this one began."""
        if store.stamps(spec.key()).get(spec.key()) != stamps.get(spec.key()):
            claims.release(spec.key())
            say(f"{spec.title()}: stored by another bakeoff run on this store since this one started; its result "
                "is kept, not measured again")
            skip(spec)
            return
        job, needs[spec.key()] = _job(spec, position, timeout_s, log_dir, store, tensorboard[spec.key()],
                                      profiles.get(spec.key()), profile_steps, keep_models, evaluate)
        reason = registry.unsupported(spec)
        if reason:  # no process starts, on any executor: recorded here (a cluster has nothing to run for it)
            started(job)
            done(job, TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.UNSUPPORTED,
                                  reason=reason))
            return
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
                if spec.key() in quieter:
                    store.keep_quieter(result, suite)
                else:
                    store.put(result, suite)
        except StoreWriteError as exc:  # a full disk, a store gone read-only: keep the result, stop the run
            raise _unstored(result, store, log_dir, exc) from None
        claims.release(spec.key())
        summary.ran.append(result)
        log.info("%s %s: %s %s", spec.label(), spec.key(), result.status.value, result.reason)
        if progress:
            progress("done", spec, result)

    try:
        (executor or LocalExecutor()).run(_jobs(specs, runs, skip, claims, claimed_job, say), started, done)
    finally:
        claims.release_all()  # an interrupted run lets its trials go (so would its death)
    return summary
