"""A whole ``bakeoff run``, from Python: :func:`run_suite` validates a suite's trials, searches batch sizes when
asked, opens the store, runs what is not stored yet (adaptive repeats when the suite says so) and writes the
report. The CLI parses its flags into a :class:`~bakeoff.plan.suite.Suite` and calls it; nothing here prints
(``say`` is told what a user would want to read as the run goes).

Signals: SIGINT and SIGTERM kill the running trial or probe and raise :class:`bakeoff.run.process.Interrupted`;
nothing of the stopped trial is recorded. One measuring run per machine (:mod:`bakeoff.run.machine`) unless
``concurrent``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from shlex import quote
from typing import TYPE_CHECKING

from bakeoff.analysis.stats import data_set
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec, Status
from bakeoff.plan.suite import Suite
from bakeoff.predict.team import FAMILIARITY, Team
from bakeoff.report.write import Written, write_report
from bakeoff.results.store import Store, artifacts_dir
from bakeoff.run import machine, process, runner
from bakeoff.run.executors.executor import Executor

if TYPE_CHECKING:
    from bakeoff.results.mlflow_log import Logged

log = logging.getLogger(__name__)

ProgressFactory = Callable[[int, Store], AbstractContextManager]
"""``factory(trials, store)`` → a context manager whose value is the runner's progress callback (or None); it may
have ``extend(n)``, told of the trials each look of adaptive repeats adds."""


@dataclasses.dataclass
class Session:
    """What a run did: the runner's summary (trials run and skipped), the stored results of every trial of the
    suite, and the report written (None with ``report_dir=None``)."""

    summary: runner.RunSummary
    results: list[TrialResult]
    report: Written | None
    mlflow: Logged | None = None  # with mlflow_uri: what was logged where

    @property
    def unsettled(self) -> Counter:
        """Statuses of the skipped trials that did not succeed when stored (not run again without --retry-failed)."""
        skipped = {spec.key() for spec in self.summary.skipped}
        return Counter(r.status.value for r in self.results
                       if r.key in skipped and r.status not in (Status.OK, Status.UNSUPPORTED))

    @property
    def unsupported(self) -> list[TrialResult]:
        """Trials recorded as unsupported, decided before any process started, with their reasons."""
        return [r for r in self.results if r.status is Status.UNSUPPORTED]

    @property
    def exit_code(self) -> int:
        """0 when every trial succeeded or is unsupported (a result, with its reason); 1 otherwise."""
        return 0 if all(r.status in (Status.OK, Status.UNSUPPORTED) for r in self.results) else 1


def run_suite(suite: Suite, store_path: Path, *, timeout_s: float | None = None, fresh: bool = False,
              retry_failed: bool = False, retry_busy: bool = False, concurrent: bool = False, order_seed: int = 0,
              profile_steps: int = 0, report_dir: Path | None = None, title: str | None = None,
              say: Callable[[str], None] = log.info, progress: ProgressFactory | None = None,
              executor: Executor | None = None, team: Team | None = None, mlflow_uri: str | None = None,
              evaluate: bool = True) -> Session:
    """Run ``suite`` into the store at ``store_path`` and, with ``report_dir``, write its report there.

    Bad input (a spec, a data file, a damaged store) fails before a store or report is created. ``timeout_s``
    per trial defaults to the suite's; ``fresh``, ``retry_failed``, ``retry_busy``, ``order_seed`` and
    ``profile_steps`` and ``executor`` (where the trials execute; default: here, one after another) are
    :func:`bakeoff.run.runner.run`'s. ``team``: a team file (:mod:`bakeoff.predict.team`), whose declared
    criteria the report shows and the decisions weigh (adaptive repeats included). ``mlflow_uri`` (None: off; "":
    a file store beside the results store): the tracking store is reached before any trial runs (a
    :class:`~bakeoff.core.spec.SpecError` when it cannot be), and every trial of the suite is logged to it after the
    run, the report as an artefact (:mod:`bakeoff.results.mlflow_log`). Without ``evaluate`` no trial evaluates
    the test split (a suite about training time alone: its results have no quality).
    """
    timeout = timeout_s or suite.timeout_s
    here = executor is None or not executor.remote  # trials on other machines: not this one's GPUs, nor its lock
    sizes = runner.validate(suite.specs, here=here)  # bad input fails here, before a store or report is created
    if store_path.exists():  # a damaged store, or a folder, fails here: before any search or trial; nothing written
        Store(store_path, readonly=True).close()
    tracker = None
    if mlflow_uri is not None:  # imports MLflow; an unreachable store fails here, before any trial
        from bakeoff.results import mlflow_log

        tracker = mlflow_log.connect(mlflow_uri, store_path, suite.name)
    specs, annotations = suite.specs, {}
    measuring = here or suite.auto_batch is not None  # the batch-size search measures here, whatever the executor
    with process.interruptible(), (machine.measuring(store_path, wait=not concurrent, say=say) if measuring
                                   else contextlib.nullcontext(False)):
        if suite.auto_batch is not None:
            specs, annotations = search_batch_sizes(suite, sizes, artifacts_dir(store_path) / "logs", timeout, say)
        with Store(store_path) as store, (progress or _no_progress)(len(specs), store) as shown:
            source = suite.source  # a suite file by its absolute path: what a report's "Reproduce" line names
            source = str(Path(source).resolve()) if source.endswith(".toml") and Path(source).is_file() else source
            store.put_suite(suite.name, source, suite.weights, suite.qualitative)
            options = dict(timeout_s=timeout, fresh=fresh, retry_failed=retry_failed, progress=shown,
                           annotations=annotations, validated=True, order_seed=order_seed, retry_busy=retry_busy,
                           profile_steps=profile_steps, executor=executor, evaluate=evaluate)
            if suite.adaptive is None:
                summary = runner.run(specs, store, suite.name, say=say, **options)
            else:
                from bakeoff.run import adaptive

                weights, qualitative = suite.weights, suite.qualitative
                if team is not None and team.answers:  # the same familiarity in every section
                    weights = {**{k: v for k, v in team.weights.items() if k == FAMILIARITY}, **weights}
                    qualitative = {**qualitative, FAMILIARITY: team.familiarity({s.framework.value for s in specs})}
                summary = adaptive.run(specs, store, suite.name, suite.adaptive["first"], suite.adaptive["max"],
                                       weights, qualitative, say=say, grow=getattr(shown, "extend", None), **options)
            results = store.results(suite=suite.name, keys=[s.key() for s in summary.specs])
            workloads = {r.run_spec.workload for r in results}
            deployments = [d for d in store.deployments() if d["workload"] in workloads] if team else []
            reported, suites = covering(store, results, suite.name)
            files = store.suite_files()
    written = None
    if report_dir is not None:
        earlier = len(reported) - len(results)
        said = (f"This report answers for the store ({store_path}): the {len(results)} "
                f"trial{'s' if len(results) != 1 else ''} of this run and {earlier} stored earlier of the same models "
                f"and data (`bakeoff report --store {store_path}` for "
                "every trial in it)." if earlier else "")
        written = write_report(reported, report_dir, suite.weights, suite.qualitative,
                               title or suite.title(), suites, deployments, team, covers=said,
                               suite_files=files,
                               again=f"bakeoff report --store {quote(str(store_path))} --out {quote(str(report_dir))}")
    logged = tracker.log(results, suite.name, written.paths if written else None) if tracker else None
    return Session(summary, results, written, logged)


def covering(store: Store, results: Sequence[TrialResult], suite: str) -> tuple[list[TrialResult], dict[str, str]]:
    """What a run's report answers for: ``results`` (the run's) and every stored trial of the same sections —
    the same workload, model (preset and its overrides) and data — whichever command ran it, so that a framework
    run by an earlier command is never dropped from the verdict by a later one that did not name it; and the suite
    each ran in."""
    sections = {(r.run_spec.workload, r.run_spec.model(), data_set(r.run_spec)) for r in results}
    mine = {r.key for r in results}
    earlier = [r for r in store.results() if r.key not in mine
               and (r.run_spec.workload, r.run_spec.model(), data_set(r.run_spec)) in sections]
    suites = {row.key: row.suite for row in store.trials()} | {r.key: suite for r in results}
    return [*earlier, *results], suites


def search_batch_sizes(suite: Suite, sizes: dict, log_dir: Path, timeout_s: float,
                       say: Callable[[str], None] = log.info) -> tuple[list[RunSpec], dict[str, dict]]:
    """``batch_size = "auto"``: the largest batch of each configuration (:mod:`bakeoff.run.batch_search`), and
    the notes of each new spec key: its search, stored as its result's ``batch_search`` section."""
    from bakeoff.run import batch_search

    def show(probe: RunSpec, status: Status) -> None:
        say(f"  batch-size probe {probe.label()} batch {probe.batch_size}: {status.value}")

    specs, records = batch_search.resolve(suite.specs, sizes, log_dir, suite.auto_batch["memory_cap"],
                                          suite.auto_batch["step"], timeout_s, progress=show)
    shown: set[str] = set()
    for spec in specs:
        if spec.label() not in shown:
            shown.add(spec.label())
            record = records[spec.key()]
            peak = record.peak_memory_bytes or 0
            say(f"batch size for {spec.label()}: {record.batch_size} "
                f"(peak memory {peak / 2**20:,.0f} MiB, {record.memory_kind})")
    return specs, {key: {"batch_search": record} for key, record in records.items()}


def _no_progress(trials: int, store: Store) -> AbstractContextManager[None]:
    return contextlib.nullcontext()
