"""What a store holds, for people: suites with trial counts and dates, one line per trial, and pruning.

Framework-free and fast: rows are read with :meth:`bakeoff.results.store.Store.trials`, which decodes no samples.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bakeoff.core.spec import SpecError, Status
from bakeoff.results.store import Store
from bakeoff.results.tables import TrialRow


@dataclasses.dataclass(frozen=True)
class Filters:
    """Which stored trials a command is about; every field given must match."""

    suite: str | None = None
    workload: str | None = None
    framework: str | None = None
    statuses: tuple[Status, ...] | None = None
    older_than_days: float | None = None
    stale: bool = False  # only trials whose content does not match this installation (:func:`stale_reason`)

    @property
    def any(self) -> bool:
        return any(v not in (None, False) for v in dataclasses.astuple(self))


def parse_statuses(text: str | None) -> tuple[Status, ...] | None:
    """``"failed,timeout"`` -> statuses; raises :class:`SpecError` naming the accepted ones."""
    if text is None:
        return None
    return tuple(Status.parse(s.strip(), "status") for s in text.split(",") if s.strip())


def stale_reason(row: TrialRow) -> str | None:
    """Why a stored trial's content no longer matches this installation (another bakeoff version or package hash,
    or another version of its framework), so no run here would reuse it; ``None`` when it matches."""
    from bakeoff.core.identity import bakeoff_version, framework_version

    content = dict(row.spec.get("content") or {})
    if "bakeoff" not in content:
        return "stored without content hashes (before trials were keyed by content)"
    if content["bakeoff"] != bakeoff_version():
        return f"bakeoff {content['bakeoff']}, installed {bakeoff_version()}"
    installed = framework_version(row.framework)
    if row.framework in content and content[row.framework] != installed:
        return f"{content[row.framework]}, installed {installed}"
    return None


def select(store: Store, filters: Filters, now: datetime | None = None) -> list[TrialRow]:
    """The stored trials ``filters`` match, oldest first."""
    before = None
    if filters.older_than_days is not None:
        if filters.older_than_days < 0:
            raise SpecError(f"--older-than must be a number of days >= 0, got {filters.older_than_days!r}")
        before = (now or datetime.now(UTC)) - timedelta(days=filters.older_than_days)
    rows = store.trials(suite=filters.suite, workload=filters.workload, framework=filters.framework,
                        statuses=filters.statuses, before=before)
    return [r for r in rows if stale_reason(r) is not None] if filters.stale else rows


def _figure(value: float | None, fmt: str) -> str:
    return "" if value is None else fmt.format(value)


def reason_line(reason: str) -> str:
    """A failure's reason in one line: its last line that says something (a traceback's exception), not a rule
    of ``=`` that torchrun closes its report with nor a launcher's exit note (``srun: error: ...``)."""
    lines = [line.strip() for line in reason.strip().splitlines()
             if any(c.isalnum() for c in line) and not line.startswith("srun: ")]
    return (lines[-1] if lines else "")[:100]


def trial_line(row: TrialRow) -> str:
    """``key  suite  workload/preset  label  seed N  status  figures  date`` (figures: ex/s, time to target, final
    metric, wall time; a failure's reason instead)."""
    if row.status is Status.OK:
        figures = [_figure(row.examples_per_s, "{:,.0f} ex/s"),
                   _figure(row.time_to_target_s, "target in {:.1f} s") or "target not reached",
                   _figure(row.final_metric, f"{row.metric_name or 'metric'} {{:.3f}}"),
                   _figure(row.wall_s, "wall {:.0f} s")]
        if resumed := row.training.resumed_at_steps:
            figures.append(f"resumed at step {', '.join(str(s) for s in resumed)}")
        what = ", ".join(f for f in figures if f)
    else:
        what = reason_line(row.reason)
    seed = f"seed {row.seed}" + (f" repeat {row.repeat}" if row.repeat != row.seed else "")
    return (f"{row.key}  {row.suite}  {row.workload}/{row.preset}  {row.label}  {seed}  "
            f"{row.status.value}  {what}  {row.finished_at:%Y-%m-%d %H:%M}")


def suite_lines(rows: Sequence[TrialRow]) -> list[str]:
    """Per suite: trial count by status, and the dates of its first and last trial."""
    out = []
    for suite in sorted({r.suite for r in rows}):
        mine = [r for r in rows if r.suite == suite]
        counts = Counter(r.status.value for r in mine)
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: (kv[0] != "ok", kv[0])))
        first, last = min(r.finished_at for r in mine), max(r.finished_at for r in mine)
        when = f"{first:%Y-%m-%d %H:%M}" + (f" to {last:%Y-%m-%d %H:%M}" if last != first else "")
        configs = len({(r.workload, r.preset, r.label) for r in mine})
        out.append(f"suite {suite}: {len(mine)} trials ({statuses}) of {configs} configurations, {when}")
    return out


def remove(store: Store, rows: Sequence[TrialRow]) -> int:
    """Delete the trials and the files the store's folder holds for them: log, checkpoint, TensorBoard run (only
    inside :attr:`Store.artifacts`). Returns how many trials were deleted."""
    root = store.artifacts.resolve()
    for row in rows:
        paths = [store.artifacts / "checkpoints" / row.key, store.artifacts / "logs" / f"{row.key}.log",
                 store.artifacts / "logs" / f"{row.key}.request.json"]  # a request a killed run left
        paths += [Path(p) for p in (row.execution.log, row.execution.tensorboard) if p]
        for path in paths:
            if not path.resolve().is_relative_to(root) or not path.exists():
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    return store.delete(r.key for r in rows)
