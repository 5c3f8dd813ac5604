"""``bakeoff run --mlflow [URI]``: every trial as an MLflow run, where teams already look.

Per trial, one MLflow run: its **parameters** are the spec (nested fields flattened: ``data.train``,
``content.torch``), its **metrics** every measured quantity of
:data:`~bakeoff.analysis.quantities.QUANTITIES` the trial has (steady examples/s, first step, memory, final metric,
...), with the training loss, each step's time and the quality curve as histories over steps; its **tags** the
trial's key, suite, status and reason, and for each quantity it lacks, why (``missing.<name>``). A trial that did
not succeed ends as a FAILED run. The trials are children of one run per ``bakeoff run`` (named after the suite),
whose artefacts are the report (``report/report.html``, its Markdown and plots).

The trials are logged when the run has finished, from the store: the same results the report reads. A result
already logged in the experiment (same key, same content) is not logged twice. Without a URI the tracking store is
a local file store, ``mlruns`` beside the results store (``results/mlruns`` by default):
``MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri results/mlruns`` shows it (:data:`FILE_STORE_NOTE`).
The extra installs ``mlflow-skinny`` (the client and the file store, no server): a file store needs nothing else.

MLflow is imported only here, and only when ``--mlflow`` is given. :func:`connect` reaches the store before any
trial runs: a URI that cannot be reached, or MLflow not installed, is a :class:`SpecError` (exit 2).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bakeoff.core.result import TrialResult
from bakeoff.core.spec import SpecError, Status

EXPERIMENT_PREFIX = "bakeoff/"
"""Trials of suite NAME go to the experiment ``bakeoff/NAME``."""

FILE_STORE_NOTE = ("MLflow 3 keeps its file store (a folder of runs, the default here) in maintenance mode behind "
                   "MLFLOW_ALLOW_FILE_STORE=true, which bakeoff sets for a file URI; another MLflow process reading "
                   "the folder needs it too. A sqlite:///PATH URI works when sqlalchemy and alembic are installed "
                   "(not in the mlflow extra).")
"""Why a file store needs an environment variable."""

REACH_TIMEOUT_S = 10
"""How long :func:`connect` waits for a tracking server to answer, without retrying."""

_KEY = re.compile(r"[^\w\-. :/]")
_PARAM_VALUE = 6000  # MLflow's longest parameter value
_TAG_VALUE = 5000
_BATCH = 1000  # MLflow's most metrics in one log_batch call


def default_uri(store_path: Path) -> str:
    """The local file store beside the results store: ``<store folder>/mlruns``."""
    return (Path(store_path).resolve().parent / "mlruns").as_uri()


def _uri(given: str | None, store_path: Path) -> str:
    if not given:
        return default_uri(store_path)
    if "://" in given or given.startswith(("file:", "databricks")):
        return given
    return Path(given).resolve().as_uri()  # a folder: a local file store


@dataclasses.dataclass
class Tracker:
    """An MLflow tracking store reached by :func:`connect`, and the experiment the run logs to."""

    uri: str
    experiment: str
    experiment_id: str
    client: Any  # mlflow.tracking.MlflowClient

    def log(self, results: Sequence[TrialResult], suite: str, report: Mapping[str, Path] | None) -> Logged:
        """Log ``results`` (one child run each, those already logged skipped) under one run of ``suite``, with
        ``report``'s files as its artefacts."""
        from mlflow.entities import RunTag

        done = self._logged()
        parent = self.client.create_run(self.experiment_id, run_name=f"{suite} ({time.strftime('%Y-%m-%d %H:%M')})",
                                        tags={"bakeoff.suite": suite, "bakeoff.kind": "suite"})
        parent_id = parent.info.run_id
        logged, skipped = [], []
        for result in results:
            digest = result_digest(result)
            if digest in done:
                skipped.append(result.key)
                continue
            logged.append(self._log_trial(result, suite, parent_id, digest))
        files = {name: Path(p) for name, p in (report or {}).items()}
        for path in files.values():
            self.client.log_artifact(parent_id, str(path), artifact_path="report")
        note = "" if report else "no report was written (--no-report)"
        self.client.log_batch(parent_id, tags=[RunTag("bakeoff.trials_logged", str(len(logged))),
                                               RunTag("bakeoff.trials_already_logged", str(len(skipped))),
                                               *([RunTag("bakeoff.report", note)] if note else [])])
        self.client.set_terminated(parent_id, "FINISHED")
        return Logged(self.uri, self.experiment, parent_id, logged, skipped, sorted(p.name for p in files.values()))

    def _logged(self) -> set[str]:
        """The result digests already logged in the experiment."""
        runs = self.client.search_runs([self.experiment_id], filter_string="tags.`bakeoff.kind` = 'trial'",
                                       max_results=50000)
        return {r.data.tags.get("bakeoff.result") for r in runs}

    def _log_trial(self, result: TrialResult, suite: str, parent_id: str, digest: str) -> str:
        from mlflow.entities import Metric, Param

        spec = result.run_spec
        tags = {"mlflow.parentRunId": parent_id, "bakeoff.kind": "trial", "bakeoff.key": result.key,
                "bakeoff.result": digest, "bakeoff.suite": suite, "bakeoff.status": result.status.value,
                "bakeoff.workload": spec.workload, "bakeoff.framework": spec.framework.value}
        if result.reason:
            tags["bakeoff.reason"] = result.reason[-_TAG_VALUE:]
        values, missing = metrics(result)
        tags.update({f"missing.{name}": why[:_TAG_VALUE] for name, why in missing.items()})
        run = self.client.create_run(self.experiment_id, run_name=f"{spec.title()} repeat {spec.repeat}", tags=tags)
        run_id = run.info.run_id
        now = int(time.time() * 1000)
        params = [Param(k, v) for k, v in params_of(result).items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 parameters per call
            self.client.log_batch(run_id, params=params[i:i + 100])
        points = [Metric(k, v, now, 0) for k, v in values.items()]
        points += [Metric(k, v, now, step) for k, step, v in histories(result)]
        for i in range(0, len(points), _BATCH):
            self.client.log_batch(run_id, metrics=points[i:i + _BATCH])
        self.client.set_terminated(run_id, "FINISHED" if result.status in (Status.OK, Status.UNSUPPORTED)
                                   else "FAILED")
        return run_id


@dataclasses.dataclass(frozen=True)
class Logged:
    """What :meth:`Tracker.log` did."""

    uri: str
    experiment: str
    parent_run_id: str
    trial_run_ids: list[str]
    already_logged: list[str]  # trial keys
    artifacts: list[str]

    def line(self) -> str:
        """What the console says: where the trials went, and how to browse a file store."""
        again = f", {len(self.already_logged)} already logged there" if self.already_logged else ""
        report = "; the report is its artefact" if self.artifacts else ""
        browse = (f" (browse: MLFLOW_ALLOW_FILE_STORE=true mlflow ui --backend-store-uri {self.uri})"
                  if self.uri.startswith("file:") else "")
        n = len(self.trial_run_ids)
        return (f"mlflow: {n} trial{'' if n == 1 else 's'} logged to {self.uri}, experiment {self.experiment}, "
                f"under run {self.parent_run_id}{again}{report}{browse}")


def connect(given: str | None, store_path: Path, suite: str) -> Tracker:
    """Reach the tracking store at ``given`` (a URI or a folder; None or "": :func:`default_uri`) and its
    experiment ``bakeoff/<suite>`` (created when missing). :class:`SpecError` when MLflow is not installed or the
    store cannot be reached: said before any trial runs."""
    uri = _uri(given, store_path)
    # A server that does not answer fails now and once, not after MLflow's default minutes of retries.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(REACH_TIMEOUT_S))
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        raise SpecError("--mlflow needs MLflow: pip install 'bakeoff[mlflow]'") from None
    name = EXPERIMENT_PREFIX + suite
    if uri.startswith("file:"):  # MLflow 3 keeps its file store behind this opt-in (:data:`FILE_STORE_NOTE`)
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    try:
        if uri.startswith("file:"):
            Path(uri.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
        client = MlflowClient(tracking_uri=uri)
        found = client.get_experiment_by_name(name)
        if found is not None and found.lifecycle_stage != "active":
            raise SpecError(f"--mlflow {uri}: experiment {name!r} is deleted there; restore it or remove it for "
                            "good (mlflow gc) first")
        experiment_id = found.experiment_id if found is not None else client.create_experiment(name)
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - MLflow raises many kinds (connection, REST, permission, OS)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SpecError(f"--mlflow {given or uri}: cannot reach the MLflow tracking store at {uri}: {first[:300]}. "
                        "Give a reachable URI (http://HOST:5000, a folder, file:///PATH) or --mlflow alone for "
                        f"{default_uri(store_path)}; nothing was run") from None
    return Tracker(uri, name, experiment_id, client)


def _flat(prefix: str, value: object, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
        return
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    out[_KEY.sub("_", prefix)] = text[:_PARAM_VALUE]


def params_of(result: TrialResult) -> dict[str, str]:
    """The spec as MLflow parameters: every field, nested ones flattened with dots; values as JSON but strings."""
    out: dict[str, str] = {}
    _flat("", result.spec, out)
    return out


def metrics(result: TrialResult) -> tuple[dict[str, float], dict[str, str]]:
    """``({quantity: value}, {quantity: why it has none})`` over :data:`QUANTITIES`, with the trial's own
    reason where it recorded one; a quantity that does not apply to the trial (tokens/s of an image model, a
    distributed figure of a one-process trial) is left out of both."""
    from bakeoff.analysis.quantities import QUANTITIES

    values, missing = {}, {}
    for q in QUANTITIES.values():
        value = q.get(result, None)
        if value is not None and math.isfinite(value):
            values[q.name] = float(value)
        elif (q.censored and result.target is not None and result.status is Status.OK
              and (q.measured is None or q.measured(result))):
            missing[q.name] = f"the target {result.target:g} was not reached"
        elif q.why_missing is not None and (why := q.why_missing(result)):
            missing[q.name] = why
    if result.status is not Status.OK:
        missing["all"] = f"the trial did not succeed ({result.status.value}): {result.reason[:300]}"
    return values, missing


def histories(result: TrialResult) -> list[tuple[str, int, float]]:
    """``(metric, step, value)``: the training loss and step time at every step, the quality curve at each
    evaluation."""
    out = [("loss", i + 1, v) for i, v in enumerate(result.losses) if math.isfinite(v)]
    out += [("step_time_s", i + 1, v) for i, v in enumerate(result.step_times_s) if math.isfinite(v)]
    name = _KEY.sub("_", f"eval_{result.metric_name or 'metric'}")
    out += [(name, int(p["step"]), float(p["metric"])) for p in result.curve
            if p.get("metric") is not None and math.isfinite(p["metric"]) and p.get("step") is not None]
    return out


def result_digest(result: TrialResult) -> str:
    """A short hash of the whole stored result: the same trial measured again is a new MLflow run."""
    text = json.dumps(result.to_dict(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
