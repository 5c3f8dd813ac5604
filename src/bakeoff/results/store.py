"""The results database: one SQLite file, schema-versioned, written as each trial finishes.

Tables:
  ``trials``  — one row per trial (its spec key), with the whole :class:`TrialResult` as JSON;
  ``samples`` — every raw sample, one row each, queryable without bakeoff:
                kind ``step_time`` / ``loss`` (idx = step − 1) and ``eval`` (idx = evaluation number,
                step and training-clock seconds alongside the metric value).

  ``alternates`` — measurements of a trial that analysis does not read, kept whole (``bakeoff run --retry-busy``
                keeps the quieter of a busy trial's two measurements in ``trials`` and the other here:
                :meth:`Store.keep_quieter`), several per key when it was measured again more than once.

Each trial is written in one transaction, so an interrupted run never leaves half a trial behind.

Journal: write-ahead (WAL) on a local disk; on a network file system (NFS, SMB, Lustre, GPFS, ...: the results
folder of a cluster) the rollback journal instead, since WAL's shared-memory index only works among processes of
one machine, as SQLite documents (https://www.sqlite.org/wal.html). A ``bakeoff run`` writes its store from one
process, whatever executor runs the trials; two runs on one store (``--concurrent``) each write their own trials,
never the same one at once (:mod:`bakeoff.results.trial_claims`).

A store's files besides the database (trial logs, checkpoints, TensorBoard events) live in the folder named after
it, :func:`artifacts_dir`: ``results/bakeoff.sqlite`` keeps them under ``results/bakeoff/``, so two stores in one
folder never share a tree.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bakeoff.core.result import SCHEMA_VERSION, Execution, Training, TrialResult, migrate
from bakeoff.core.spec import RETIRED_VALUES, SpecError, Status
from bakeoff.results.disk import journal_mode, no_space
from bakeoff.results.tables import ROW_QUERY, SCHEMA, TrialRow

STORE_VERSION = 1


def artifacts_dir(store_path: str | Path) -> Path:
    """The folder of a store's logs, checkpoints and TensorBoard events: the store's path without its suffix
    (``results/bakeoff.sqlite`` -> ``results/bakeoff``; a store without a suffix: ``NAME-files``)."""
    path = Path(store_path)
    return path.with_suffix("") if path.suffix else path.with_name(f"{path.name}-files")


class StoreWriteError(SpecError):
    """The store refused a write (a full disk, a read-only file): an exit-2 message, not a traceback; what could
    not be stored is kept elsewhere by the caller. ``why``: the cause alone ("no space left on /data (0.0 MB free),
    free 5 MB or more there (SQLite: database or disk is full)", "attempt to write a readonly database")."""

    def __init__(self, message: str, why: str = "") -> None:
        super().__init__(message)
        self.why = why or message


class Store:
    """Open (or create) a results database at ``path``; ``readonly`` opens an existing one without writing."""

    def __init__(self, path: str | Path, readonly: bool = False) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise SpecError(f"--store {self.path} is a folder; a store is one file: name one, e.g. "
                            f"--store {self.path / 'bakeoff.sqlite'}")
        # the files a failed open may create: removed again when a full disk stops it (nothing else wrote them)
        fresh = [p for p in (self.path, *(self.path.with_name(self.path.name + s) for s in ("-wal", "-shm")))
                 if not p.exists()]
        if readonly:
            if not self.path.is_file():
                raise SpecError(f"no results store at {self.path}")
            self._db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise SpecError(f"cannot create the folder of store {self.path}: {exc.strerror or exc}") from None
            self._db = sqlite3.connect(self.path)
        try:
            with self._db:
                if not readonly:  # reads the header: a damaged file fails here
                    self._db.execute(f"PRAGMA journal_mode = {journal_mode(self.path)}")
                self._db.execute("PRAGMA foreign_keys = ON")
                if not readonly:
                    self._db.executescript(SCHEMA)
                row = self._db.execute("SELECT value FROM meta WHERE name = 'store_version'").fetchone()
                if row is None and not readonly:
                    self._db.execute("INSERT INTO meta VALUES ('store_version', ?)", (str(STORE_VERSION),))
        except sqlite3.DatabaseError as exc:
            self._db.close()
            full = no_space(self.path, exc)
            if full:
                for made in fresh:  # empty, or a WAL index SQLite could not grow: nothing of the store is in them
                    if made.exists() and (made.stat().st_size == 0 or made.name.endswith("-shm")):
                        made.unlink()
                kept = "No store was created" if self.path in fresh else "The store is untouched"
                raise SpecError(f"cannot open the store {self.path}: {full} and run the same command again "
                                f"(SQLite: {exc}). {kept}") from None
            raise SpecError(f"{self.path} is not a bakeoff results store ({exc}): a damaged or other file. Keep it "
                            "aside and start a new store with --store, or restore a copy") from None
        if row is not None and int(row[0]) != STORE_VERSION:
            self._db.close()
            raise SpecError(f"{self.path} is a bakeoff store of version {row[0]}; this bakeoff reads version "
                            f"{STORE_VERSION}. Use the bakeoff that wrote it, or start a new store with --store.")

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """One write transaction; a write the database refuses (a full disk, a file gone read-only) is a
        :class:`StoreWriteError` naming the store."""
        try:
            with self._db:
                yield
        except sqlite3.OperationalError as exc:
            full = no_space(self.path, exc)
            why = f"{full} (SQLite: {exc})" if full else str(exc)
            raise StoreWriteError(f"could not write to the store {self.path}: {why}", why) from exc

    @property
    def artifacts(self) -> Path:
        """This store's folder of logs, checkpoints and TensorBoard events (:func:`artifacts_dir`)."""
        return artifacts_dir(self.path)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def put(self, result: TrialResult, suite: str) -> None:
        """Insert or replace one trial and all its samples, atomically."""
        with self._writing():
            self._put(result, suite, _now())

    def _put(self, result: TrialResult, suite: str, finished_at: str) -> None:
        spec = result.run_spec
        samples: list[tuple] = [(result.key, "step_time", i, i + 1, None, v) for i, v in enumerate(result.step_times_s)]
        samples += [(result.key, "loss", i, i + 1, None, v) for i, v in enumerate(result.losses)]
        samples += [(result.key, "eval", i, int(p["step"]), p["train_s"], p["metric"])
                    for i, p in enumerate(result.curve)]
        self._db.execute("DELETE FROM samples WHERE key = ?", (result.key,))
        self._db.execute(
            "INSERT OR REPLACE INTO trials VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (result.key, suite, spec.workload, spec.preset, spec.framework.value, spec.label(), spec.seed,
             spec.repeat, result.status.value, result.reason, finished_at, json.dumps(result.to_dict())))
        self._db.executemany("INSERT INTO samples VALUES (?,?,?,?,?,?)", samples)

    def keep_quieter(self, retry: TrialResult, suite: str) -> TrialResult:
        """Store ``retry``, a stored trial measured again because it was busy (``bakeoff run --retry-busy``), keeping
        the quieter of the two measurements where analysis reads it and the other in ``alternates``, atomically:
        nothing measured is lost.

        Quieter: the lower share of its cores other processes used during the steady steps
        (:func:`bakeoff.analysis.conditions.other_work`). The retry is kept when it succeeded and was quieter, or
        its share was not measured (nothing flags it); the stored one otherwise (a failed retry measured nothing).
        Both records say which was kept, in ``extras["busy_retry"]`` (:func:`busy_retry`). Returns ``retry`` so
        annotated; a trial not stored (deleted meanwhile) is simply stored.
        """
        from bakeoff.analysis.conditions import other_work

        row = self._db.execute("SELECT suite, finished_at, result FROM trials WHERE key = ?", (retry.key,)).fetchone()
        if row is None:
            self.put(retry, suite)
            return retry
        stored_suite, stored_at, raw = row
        stored = TrialResult.from_dict(json.loads(raw))
        before, now = other_work(stored.environment), other_work(retry.environment)
        kept_retry = retry.status is Status.OK and (now is None or before is None or now < before)
        finished = _now()
        record = {"kept": "retry" if kept_retry else "stored",
                  "stored": _measurement(stored, stored_at), "retry": _measurement(retry, finished)}
        for result in (stored, retry):
            result.extras["busy_retry"] = record
        kept, other = (retry, stored) if kept_retry else (stored, retry)
        with self._writing():
            self._put(kept, suite if kept_retry else stored_suite, finished if kept_retry else stored_at)
            self._db.execute("INSERT INTO alternates VALUES (?,?,?,?)",
                             (other.key, stored_suite if kept_retry else suite, stored_at if kept_retry else finished,
                              json.dumps(other.to_dict())))
        return retry

    def alternates(self, keys: Iterable[str] | None = None) -> list[TrialResult]:
        """The measurements analysis does not read (:meth:`keep_quieter`), oldest first; optionally of these keys."""
        try:
            rows = self._db.execute("SELECT key, result FROM alternates ORDER BY finished_at, rowid").fetchall()
        except sqlite3.OperationalError:  # a store written before alternates were kept, opened read-only
            return []
        wanted = set(keys) if keys is not None else None
        return [TrialResult.from_dict(json.loads(raw)) for key, raw in rows if wanted is None or key in wanted]

    def put_suite(self, name: str, source: str, weights: dict[str, float],
                  qualitative: dict[str, dict[str, float]]) -> None:
        """Record a suite's decision weights and qualitative scores, so ``report --suite NAME`` uses them later."""
        with self._writing():
            self._db.execute("INSERT OR REPLACE INTO suites VALUES (?,?,?,?,?)",
                             (name, source, json.dumps(weights), json.dumps(qualitative),
                              datetime.now(UTC).isoformat(timespec="seconds")))

    def suite_files(self) -> dict[str, str]:
        """Each recorded suite's name -> the source :meth:`put_suite` recorded (a suite file's path, a shipped
        suite's ``bakeoff/suites/NAME.toml``, ``command line``)."""
        try:
            return dict(self._db.execute("SELECT name, source FROM suites").fetchall())
        except sqlite3.OperationalError:  # a store written before suites were recorded, opened read-only
            return {}

    def suite_settings(self, name: str) -> dict[str, Any] | None:
        """``{"source", "weights", "qualitative"}`` as :meth:`put_suite` recorded them; ``None`` if never."""
        try:
            row = self._db.execute("SELECT source, weights, qualitative FROM suites WHERE name = ?", (name,)).fetchone()
        except sqlite3.OperationalError:  # a store written before suites were recorded, opened read-only
            return None
        if row is None:
            return None
        return {"source": row[0], "weights": json.loads(row[1]), "qualitative": json.loads(row[2])}

    def put_deployment(self, row: dict[str, Any]) -> None:
        """Insert or replace one format's export and inference measurement (:mod:`bakeoff.deploy.pipeline`)."""
        with self._writing():
            self._db.execute(
                "INSERT OR REPLACE INTO deployments VALUES (?,?,?,?,?,?,?,?,?,?)",
                (row["key"], row["model_key"], row["workload"], row["preset"], row["framework"], row["format"],
                 row["status"], row.get("reason", ""), datetime.now(UTC).isoformat(timespec="seconds"),
                 json.dumps(row, default=str)))

    def deployments(self, workload: str | None = None, model_keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Stored deployment rows, oldest first, optionally of one workload or of these kept models."""
        query, args = "SELECT result, finished_at FROM deployments", []
        if workload is not None:
            query, args = query + " WHERE workload = ?", [workload]
        try:
            rows = list(self._db.execute(query + " ORDER BY finished_at, rowid", args))
        except sqlite3.OperationalError:  # a store written before deployments were recorded, opened read-only
            return []
        wanted = set(model_keys) if model_keys is not None else None
        out = []
        for raw, finished in rows:
            row = json.loads(raw)
            if wanted is None or row.get("model_key") in wanted:
                out.append({**row, "finished_at": finished})
        return out

    def put_ceiling(self, key: str, fingerprint: dict[str, Any], result: dict[str, Any]) -> None:
        """Keep one framework's matmul ceiling on this machine (:mod:`bakeoff.measure.ceiling`)."""
        with self._writing():
            self._db.execute("INSERT OR REPLACE INTO ceilings VALUES (?,?,?,?,?)",
                             (key, fingerprint["framework"], json.dumps(fingerprint), json.dumps(result),
                              datetime.now(UTC).isoformat(timespec="seconds")))

    def ceiling(self, key: str) -> dict[str, Any] | None:
        """The ceiling kept under ``key`` (``{"fingerprint", "result", "measured_at"}``), or None."""
        try:
            row = self._db.execute("SELECT fingerprint, result, measured_at FROM ceilings WHERE key = ?",
                                   (key,)).fetchone()
        except sqlite3.OperationalError:  # a store written before ceilings were kept, opened read-only
            return None
        return None if row is None else {"fingerprint": json.loads(row[0]), "result": json.loads(row[1]),
                                         "measured_at": row[2]}

    def put_efficiency(self, key: str, fingerprint: dict[str, Any], result: dict[str, Any]) -> None:
        """Keep one implementation-efficiency record of this machine (:mod:`bakeoff.results.efficiency`)."""
        with self._writing():
            self._db.execute("INSERT OR REPLACE INTO efficiency VALUES (?,?,?,?,?)",
                             (key, fingerprint["framework"], json.dumps(fingerprint), json.dumps(result),
                              datetime.now(UTC).isoformat(timespec="seconds")))

    def efficiencies(self) -> list[dict[str, Any]]:
        """Every kept efficiency record (``{"fingerprint", "result", "measured_at"}``), newest first."""
        try:
            rows = self._db.execute("SELECT fingerprint, result, measured_at FROM efficiency "
                                    "ORDER BY measured_at DESC, key").fetchall()
        except sqlite3.OperationalError:  # a store written before they were kept, opened read-only
            return []
        return [{"fingerprint": json.loads(f), "result": json.loads(r), "measured_at": m} for f, r, m in rows]

    def stamps(self, key: str | None = None) -> dict[str, str]:
        """What tells one stored result of a trial from another, by spec key (of every trial, or of ``key``): when it
        was stored and its length. A stamp that changed during a run is another run's result, stored meanwhile."""
        query, args = "SELECT key, finished_at || ' ' || length(result) FROM trials", ()
        if key is not None:
            query, args = query + " WHERE key = ?", (key,)
        return dict(self._db.execute(query, args).fetchall())

    def statuses(self) -> dict[str, Status]:
        """Status of every recorded trial, by spec key."""
        return {k: Status(s) for k, s in self._db.execute("SELECT key, status FROM trials")}

    def other_work(self) -> dict[str, float]:
        """The share of its cores other processes used during each stored successful trial's steady steps, by
        spec key, where it was measured (``environment.cpu_sharing.other_share``)."""
        rows = self._db.execute("SELECT key, json_extract(result, '$.environment.cpu_sharing.other_share') "
                                "FROM trials WHERE status = ?", (Status.OK.value,))
        return {key: float(value) for key, value in rows if value is not None}

    def timeouts(self) -> dict[str, float]:
        """The timeout, in seconds, under which each stored timed-out trial was killed, by spec key (a result
        stored before it was kept says it in its reason, "no result after 8 s; killed")."""
        out = {}
        for key, raw in self._db.execute("SELECT key, result FROM trials WHERE status = ?", (Status.TIMEOUT.value,)):
            result = json.loads(raw)
            seconds = migrate(result)["execution"].get("timeout_s")
            said = re.match(r"no result after (\d+(?:\.\d+)?) s", result.get("reason", ""))
            if seconds is None and said:
                seconds = float(said.group(1))
            if seconds is not None:
                out[key] = float(seconds)
        return out

    def results(self, suite: str | None = None, keys: Iterable[str] | None = None) -> list[TrialResult]:
        """Recorded results, oldest first; optionally only a suite's or the given keys."""
        query, args = "SELECT result FROM trials", []
        if suite is not None:
            query, args = query + " WHERE suite = ?", [suite]
        rows = [json.loads(r[0]) for r in self._db.execute(query + " ORDER BY finished_at, rowid", args)]
        wanted = set(keys) if keys is not None else None
        out, retired = [], []
        for raw in rows:
            if wanted is not None and raw.get("key") not in wanted:
                continue
            if (value := raw.get("spec", {}).get("parallelism")) in RETIRED_VALUES:
                retired.append(f"{raw.get('key')} (parallelism {value!r}, {raw.get('status')})")
                continue
            out.append(TrialResult.from_dict(raw))
        if retired:
            logging.getLogger(__name__).warning(
                "%s: %d stored trial(s) of a retired mode read past, %s: %s", self.path, len(retired),
                "; ".join(f"{v}: {why}" for v, why in RETIRED_VALUES.items()), ", ".join(retired))
        return out

    def suites(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT DISTINCT suite FROM trials ORDER BY suite")]

    def trials(self, suite: str | None = None, workload: str | None = None, framework: str | None = None,
               statuses: Iterable[Status] | None = None, before: datetime | None = None) -> list[TrialRow]:
        """Stored trials as :class:`TrialRow`, oldest first, filtered by every argument given (``before``: finished
        before that time)."""
        where, args = [], []
        for column, value in (("suite", suite), ("workload", workload), ("framework", framework)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if statuses is not None:
            wanted = [Status(s).value for s in statuses]
            where.append(f"status IN ({', '.join('?' * len(wanted))})")
            args += wanted
        query = ROW_QUERY + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY finished_at, rowid"
        rows = []
        for (key, suite_, wl, preset, fw, label, seed, repeat, status, reason, finished, spec, eps, ttt, final,
             metric, wall, extras, training, version, execution) in self._db.execute(query, args):
            at = datetime.fromisoformat(finished)
            if before is not None and at >= before:
                continue
            # A row of an older schema reads as its result would: its sections migrated (bakeoff.core.result).
            sections = migrate({"schema_version": version, "extras": json.loads(extras or "{}"),
                                "training": json.loads(training or "{}"), "execution": json.loads(execution or "{}")})
            rows.append(TrialRow(key, suite_, wl, preset, fw, label, seed, repeat, Status(status), reason, at,
                                 json.loads(spec), eps, ttt, final, metric or "", wall, sections["extras"],
                                 Training(**sections["training"]), Execution(**sections["execution"])))
        return rows

    def delete(self, keys: Iterable[str]) -> int:
        """Delete these trials and their samples, atomically; returns how many were stored."""
        keys = list(keys)
        with self._writing():
            deleted = 0
            for key in keys:
                self._db.execute("DELETE FROM samples WHERE key = ?", (key,))
                self._db.execute("DELETE FROM alternates WHERE key = ?", (key,))
                deleted += self._db.execute("DELETE FROM trials WHERE key = ?", (key,)).rowcount
        return deleted

    def samples(self, key: str, kind: str) -> list[tuple[int, float | None, float]]:
        """``(step, train_s, value)`` rows of one trial's samples of one kind, in order."""
        return list(self._db.execute(
            "SELECT step, train_s, value FROM samples WHERE key = ? AND kind = ? ORDER BY idx", (key, kind)))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _measurement(result: TrialResult, finished_at: str) -> dict[str, Any]:
    """What ``extras["busy_retry"]`` says of one of a busy trial's two measurements."""
    from bakeoff.analysis.conditions import other_work

    return {"finished_at": finished_at, "status": result.status.value, "other_share": other_work(result.environment),
            "examples_per_s": result.throughput.get("examples_per_s")}


def busy_retry(result: TrialResult) -> dict[str, Any] | None:
    """``{"kept": "stored" | "retry", "stored": {...}, "retry": {...}}`` when ``result`` is one of a busy trial's two
    measurements (:meth:`Store.keep_quieter`): each with its ``finished_at``, ``status``, ``other_share`` and
    ``examples_per_s``."""
    record = result.extras.get("busy_retry")
    return record if isinstance(record, dict) else None


def export(results: Sequence[TrialResult], path: Path) -> Path:
    """Write results as JSON (everything) or CSV (one row per trial), chosen by the file suffix.

    The CSV has the trial's identity, then one column per quantity of
    :data:`bakeoff.analysis.quantities.QUANTITIES` (empty when not measured; a target never reached is empty too),
    then the memory probe and the budget quality was read at (the common budget of its workload and preset).
    """
    from bakeoff.analysis.quantities import QUANTITIES, common_budget

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        path.write_text(json.dumps({"schema_version": SCHEMA_VERSION,
                                    "trials": [r.to_dict() for r in results]}, indent=1))
        return path
    if path.suffix != ".csv":
        raise SpecError(f"cannot export to {path.name!r}: use a .json or .csv file name")
    pairs = {(r.spec["workload"], r.spec["preset"]) for r in results}
    budgets = {pair: common_budget([r for r in results if (r.spec["workload"], r.spec["preset"]) == pair])
               for pair in pairs}
    columns = ["key", "workload", "preset", "label", "seed", "repeat", "status", "reason", *QUANTITIES,
               "memory_kind", "budget_examples"]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for r in results:
            spec = r.run_spec
            budget = budgets[spec.workload, spec.preset]
            writer.writerow([r.key, spec.workload, spec.preset, spec.label(), spec.seed, spec.repeat, r.status.value,
                             r.reason, *(q.get(r, budget) for q in QUANTITIES.values()), r.memory_kind, budget])
    return path
