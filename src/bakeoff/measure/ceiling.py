"""The machine's ceiling: each framework's dense matmul throughput (fp32, and bf16 where it has it) on the device a
trial would use, measured once per machine, framework version and thread count, and kept in the store.

One probe, one process (``python -m bakeoff.measure.ceiling FRAMEWORK RESULT.json [N]``), loading only that
framework, as a trial does: ``REPEATS`` timed ``(N, N) @ (N, N)`` products after warm-up, through the framework's
own ``matmul_rates`` in its engine module; the median is the ceiling and every sample is kept. A precision the
framework cannot multiply in here is recorded missing with the error, not estimated.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bakeoff import frameworks as records
from bakeoff.measure.environment import cpu_model

SIZE = 1024  # 2.1 GFLOP a product: long enough to time on a CPU, short enough to probe in seconds
REPEATS = 10
PRECISIONS = ("fp32", "bf16")


def fingerprint(framework: str, threads: int, device: str = "auto") -> dict[str, Any]:
    """What a ceiling depends on: the machine (CPU model, cores), the framework's version, threads, device."""
    from bakeoff.identity import framework_version

    return {"framework": framework, "version": framework_version(framework), "cpu": cpu_model(),
            "cores": os.cpu_count(), "threads": threads, "device": device}


def key(print_: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(print_, sort_keys=True).encode()).hexdigest()[:16]


def probe(framework: str, n: int = SIZE, repeats: int = REPEATS, threads: int = 0) -> dict[str, Any]:
    """Measure in this process (it loads ``framework``): ``{precision: {"median_flops_per_s", "samples"} or
    {"missing": reason}}``. The probe process refuses the other frameworks first (:func:`main`)."""
    module = importlib.import_module(records.get(framework).engine.split(":")[0])
    threads = threads or os.cpu_count() or 1
    out: dict[str, Any] = {"n": n, "repeats": repeats, "threads": threads, "precisions": {}}
    for precision in PRECISIONS:
        try:
            samples = module.matmul_rates(precision, n, repeats, threads)
            out["precisions"][precision] = {"median_flops_per_s": statistics.median(samples), "samples": samples}
        except Exception as exc:  # noqa: BLE001 - a precision the framework lacks here is recorded, not fatal
            out["precisions"][precision] = {"missing": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return out


def measure(framework: str, n: int = SIZE, threads: int = 0, timeout_s: float = 300.0) -> dict[str, Any]:
    """:func:`probe` in a fresh process; ``{"status": "ok", ...}`` or the failure with its reason."""
    with tempfile.TemporaryDirectory(prefix="bakeoff-ceiling-") as tmp:
        out = Path(tmp) / "ceiling.json"
        env = {**os.environ, **records.get(framework).env}
        if threads:
            env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        t0 = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, "-m", "bakeoff.measure.ceiling", framework, str(out), str(n),
                                   str(threads)], capture_output=True, text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "reason": f"no result after {timeout_s:.0f} s"}
        if not out.is_file():
            return {"status": "failed", "reason": f"exit {done.returncode}: {done.stderr[-500:].strip()}"}
        return {"status": "ok", "wall_s": time.perf_counter() - t0, **json.loads(out.read_text())}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not 2 <= len(argv) <= 4:
        sys.stderr.write("usage: python -m bakeoff.measure.ceiling FRAMEWORK RESULT.json [N [THREADS]]\n")
        return 2
    from bakeoff.measure.isolation import refuse_foreign

    refuse_foreign(argv[0])  # one framework in this process, as in a trial
    n = int(argv[2]) if len(argv) > 2 else SIZE
    threads = int(argv[3]) if len(argv) > 3 else 0
    result = probe(argv[0], n, REPEATS, threads)
    path = Path(argv[1])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
