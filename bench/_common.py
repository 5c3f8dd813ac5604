"""Shared set-up for benchmarks: the product's own engine, built exactly as a trial builds it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def build_engine(framework: str, workload_name: str = "text_classifier", **spec_fields: Any):  # noqa: ANN201
    """(engine, workload, data, spec) for a CPU spec, the model built from the workload's initial weights."""
    from bakeoff.core import registry
    from bakeoff.core.spec import RunSpec

    spec = RunSpec(**{"workload": workload_name, "framework": framework, "max_steps": 10**6, "device": "cpu",
                      **spec_fields})
    workload = registry.workload(workload_name)
    data = workload.load_data(spec)
    config = workload.config(spec.preset, spec, data)
    engine = registry.engine_class(framework)(spec, workload, config)
    engine.setup(workload.init_weights(config, 0))
    return engine, workload, data, spec


def in_child(script: str, *args: str) -> dict:
    """Run ``script --child ARGS`` in a fresh interpreter (one framework per process) and read its JSON line."""
    out = subprocess.run([sys.executable, script, "--child", *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
