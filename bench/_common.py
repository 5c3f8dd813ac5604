"""Shared set-up for benchmarks: the product's own engine, built exactly as a trial builds it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def build_engine(framework: str, workload_name: str = "text_classifier", **spec_fields: Any):  # noqa: ANN201
    """(engine, workload, data, spec) for a CPU spec, the model built from the workload's initial weights."""
    from bakeoff.core.spec import RunSpec
    from bakeoff.trial.build import build_trial

    spec = RunSpec(**{"workload": workload_name, "framework": framework, "max_steps": 10**6, "device": "cpu",
                      **spec_fields})
    parts = build_trial(spec)
    return parts.build_engine(), parts.workload, parts.data, spec


def in_child(script: str, *args: str) -> dict:
    """Run ``script --child ARGS`` in a fresh interpreter (one framework per process) and read its JSON line."""
    out = subprocess.run([sys.executable, script, "--child", *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
