"""Implementation efficiency on this machine: bakeoff's training step of each framework against a public reference
implementation of the same model in the same framework (transformers' BERT encoder, keras-hub's
TransformerEncoder, an encoder as the Flax examples write it), so that a verdict's margin can be read against the
gap an implementation alone would make.

``bench/reference_efficiency.py --store PATH`` measures it (the references are the ``bench`` extra, not a product
dependency) and keeps one record per (framework, mode, preset, variant) under this machine's fingerprint — CPU
model, cores, threads and the framework's version, as the matmul ceiling is kept (:mod:`bakeoff.measure.ceiling`);
``bakeoff env`` shows the records of this machine. Nothing here imports a framework.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bakeoff.measure.environment import cpu_model

if TYPE_CHECKING:
    from bakeoff.results.store import Store

CASE_FIELDS = ("mode", "preset", "variant")
"""What, beside the machine, one record is of (``mode``: the framework's own name for it, ``torch.compile``)."""


def fingerprint(row: Mapping[str, Any], threads: int) -> dict[str, Any]:
    """What a record depends on: the machine (CPU model, cores), the framework's version, threads, and the case."""
    from bakeoff.core.identity import framework_version

    return {"framework": row["framework"], "version": framework_version(row["framework"]), "cpu": cpu_model(),
            "cores": os.cpu_count(), "threads": threads, **{k: row[k] for k in CASE_FIELDS}}


def key(print_: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(dict(print_), sort_keys=True).encode()).hexdigest()[:16]


def keep(store: Store, rows: Sequence[Mapping[str, Any]], threads: int) -> None:
    """Keep each measured row (a later measurement of the same fingerprint replaces the earlier one)."""
    for row in rows:
        print_ = fingerprint(row, threads)
        store.put_efficiency(key(print_), print_, dict(row))


def this_machine(store: Store) -> list[dict[str, Any]]:
    """The kept records measured on a machine like this one (same CPU model and cores), newest first."""
    return [r for r in store.efficiencies()
            if (r["fingerprint"]["cpu"], r["fingerprint"]["cores"]) == (cpu_model(), os.cpu_count())]


def describe(record: Mapping[str, Any]) -> str:
    """One line: ``PyTorch 2.13.0 eager small (same architecture): 0.98x (0.96–1.01) of transformers' ...``."""
    from bakeoff.core import frameworks

    f, r = record["fingerprint"], record["result"]
    what = {"same": "same architecture, dropout 0", "preset": "the preset's dropout"}.get(f["variant"], f["variant"])
    head = (f"{frameworks.get(f['framework']).display} {f['version']} {f['mode']} {f['preset']} ({what}), "
            f"{f['threads']} threads")
    if "ratio" not in r:
        return f"{head}: not comparable ({r['bakeoff_params']:,} parameters, the reference's {r['reference_params']:,})"
    lo, hi = r["interval"]
    rounds = r["rounds"]
    evidence = f"{len(rounds)} round{'s' if len(rounds) != 1 else ''} of {len(rounds[0][0])} step pairs"
    return (f"{head}: {r['ratio']:.2f}x the reference's speed (95% interval {lo:.2f}–{hi:.2f}; "
            f"{r['bakeoff_examples_per_s']:.1f} against {r['reference_examples_per_s']:.1f} examples/s; "
            f"{evidence}), {r['verdict']}; measured {record['measured_at']}")
