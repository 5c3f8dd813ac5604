"""The results store's tables (:mod:`bakeoff.results.store`): its SQL schema, and a stored trial as listings read it
(:class:`TrialRow`, from :data:`ROW_QUERY`: the row's columns and a few fields of its JSON, without its samples)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from bakeoff.core.result import Execution, Training
from bakeoff.core.spec import Status

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trials (
  key TEXT PRIMARY KEY, suite TEXT NOT NULL, workload TEXT NOT NULL, preset TEXT NOT NULL,
  framework TEXT NOT NULL, label TEXT NOT NULL, seed INTEGER NOT NULL, repeat INTEGER NOT NULL,
  status TEXT NOT NULL, reason TEXT NOT NULL, finished_at TEXT NOT NULL, result TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS suites (
  name TEXT PRIMARY KEY, source TEXT NOT NULL, weights TEXT NOT NULL, qualitative TEXT NOT NULL,
  recorded_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS deployments (
  key TEXT PRIMARY KEY, model_key TEXT NOT NULL, workload TEXT NOT NULL, preset TEXT NOT NULL,
  framework TEXT NOT NULL, format TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL,
  finished_at TEXT NOT NULL, result TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ceilings (
  key TEXT PRIMARY KEY, framework TEXT NOT NULL, fingerprint TEXT NOT NULL, result TEXT NOT NULL,
  measured_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS efficiency (
  key TEXT PRIMARY KEY, framework TEXT NOT NULL, fingerprint TEXT NOT NULL, result TEXT NOT NULL,
  measured_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS alternates (
  key TEXT NOT NULL, suite TEXT NOT NULL, finished_at TEXT NOT NULL, result TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS samples (
  key TEXT NOT NULL REFERENCES trials(key) ON DELETE CASCADE, kind TEXT NOT NULL, idx INTEGER NOT NULL,
  step INTEGER, train_s REAL, value REAL, PRIMARY KEY (key, kind, idx)
);
"""


@dataclasses.dataclass(frozen=True)
class TrialRow:
    """One stored trial as listings show it, read without decoding its samples."""

    key: str
    suite: str
    workload: str
    preset: str
    framework: str
    label: str
    seed: int
    repeat: int
    status: Status
    reason: str
    finished_at: datetime
    spec: dict[str, Any]
    examples_per_s: float | None
    time_to_target_s: float | None
    final_metric: float | None
    metric_name: str
    wall_s: float | None
    extras: dict[str, Any]
    training: Training
    execution: Execution


ROW_QUERY = """
SELECT key, suite, workload, preset, framework, label, seed, repeat, status, reason, finished_at,
  json_extract(result, '$.spec'), json_extract(result, '$.throughput.examples_per_s'),
  json_extract(result, '$.time_to_target_s'), json_extract(result, '$.final_metric'),
  json_extract(result, '$.metric_name'), json_extract(result, '$.wall_s'), json_extract(result, '$.extras'),
  json_extract(result, '$.training'), json_extract(result, '$.schema_version'), json_extract(result, '$.execution')
FROM trials"""
