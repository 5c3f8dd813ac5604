"""``--batch-size auto``: the largest batch that trains without running out of memory, probed in fresh processes.

Each probe is a real trial of a few steps (first step, compile included, and two more) in its own process, so a
probe that runs out of memory cannot poison the next one; it never evaluates the test split (it asks about
memory, not quality, and evaluating a large preset on the CPU costs more than its steps). On CPU the memory limit is
a cap on the trial process's resident set (default: half the machine's memory), enforced while the probe runs
(:func:`~bakeoff.run.executors.local.run_one`'s ``memory_cap``); on a GPU it is the device's memory, and the
framework's own out-of-memory error ends the probe. Sizes grow as powers of two, or by a fixed step when one is
given, until a probe fails or the training set is exhausted.

Probes are trials run by :func:`bakeoff.run.executors.local.run_one`, so SIGINT or SIGTERM during the search kills
the running probe's process group and raises :class:`bakeoff.run.process.Interrupted`, as during the run itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from bakeoff.core.result import BatchSearch
from bakeoff.core.spec import RunSpec, SpecError, Status
from bakeoff.measure.environment import total_memory
from bakeoff.run import process
from bakeoff.run.executors.local import run_one
from bakeoff.run.runner import data_key

PROBE_STEPS = 3


def default_memory_cap() -> int:
    return (total_memory() or 8 * 2**30) // 2  # half the RAM (8 GiB assumed when the OS does not say)


def search(spec: RunSpec, train_size: int, log_dir: Path, memory_cap: int | None = None, step: int | None = None,
           start: int = 8, timeout_s: float = 900,
           progress: Callable[[RunSpec, Status], None] | None = None) -> BatchSearch:
    """Find the largest trainable batch size for ``spec`` (its own batch_size is ignored)."""
    cap = memory_cap or default_memory_cap()
    sizes = _sizes(start, step, train_size // spec.grad_accum)
    probes: list[dict] = []
    best: dict | None = None
    for size in sizes:
        probe = dataclasses.replace(spec, batch_size=size, max_steps=PROBE_STEPS, max_epochs=None, max_seconds=None,
                                    eval_every=10**9, warmup_steps=0, stop_at_target=False, checkpoint_every=0)
        try:
            result = run_one(probe, timeout_s, log_dir, memory_cap=cap, evaluate=False)  # memory only
        except process.Interrupted as exc:
            exc.stopped = f"batch-size probe {probe.model()} {probe.label()} batch {size}"
            raise
        row = {"batch_size": size, "status": result.status.value, "peak_memory_bytes": result.peak_memory_bytes,
               "memory_kind": result.memory_kind, "reason": result.reason}
        probes.append(row)
        if progress:
            progress(probe, result.status)
        if result.status is not Status.OK:
            break
        if result.memory_kind.startswith("rss") and result.peak_memory_bytes and result.peak_memory_bytes > cap:
            row["status"], row["reason"] = "out_of_memory", "peak resident memory passed the cap"
            break
        best = row
    if best is None:
        first = probes[0]
        raise SpecError(f"no batch size fits for {spec.label()}: batch {first['batch_size']} ended "
                        f"{first['status']} ({first['reason'][:200]})")
    return BatchSearch(batch_size=best["batch_size"], peak_memory_bytes=best["peak_memory_bytes"],
                        memory_kind=best["memory_kind"], probes=probes)


def _sizes(start: int, step: int | None, limit: int) -> list[int]:
    sizes, size = [], (step or start)
    while size <= limit:
        sizes.append(size)
        size = size + step if step else size * 2
    return sizes or [limit]


def resolve(specs: Sequence[RunSpec], train_sizes: dict[tuple, int], log_dir: Path, memory_cap: int | None,
            step: int | None, timeout_s: float,
            progress: Callable[[RunSpec, Status], None] | None = None) -> tuple[list[RunSpec], dict[str, BatchSearch]]:
    """Search once per configuration (seeds and repeats share it); return the specs with the found sizes and
    the search record per new spec key."""
    found: dict[RunSpec, BatchSearch] = {}
    out, records = [], {}
    with process.interruptible():
        for spec in specs:
            config = dataclasses.replace(spec, seed=0, repeat=0, batch_size=1)
            if config not in found:
                size = train_sizes[data_key(spec)]
                found[config] = search(spec, size, log_dir, memory_cap, step, timeout_s=timeout_s,
                                       progress=progress)
            resolved = dataclasses.replace(spec, batch_size=found[config].batch_size)
            out.append(resolved)
            records[resolved.key()] = found[config]
    return out, records
