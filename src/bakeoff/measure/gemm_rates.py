"""The device's own matmul rates by shape (#49): the FLOP rate of each GEMM shape a capacity plan's step runs
(:func:`bakeoff.predict.capacity.gemms`), per framework and precision, measured once on this machine and kept.

Why: one FLOP rate fitted on small trials times a large step too long, because a device multiplies large matrices
faster than small ones (PyTorch fp32 on 2 cores: 87 GFLOP/s at the text classifier's ``small``, 117 at ``paper``);
the calibrated step (:attr:`bakeoff.predict.capacity.Calibration.gemm_scale`) sums the step's GEMMs, each at the rate
measured for its own shape.

Where it is measured: one child process per framework and precision (``python -m bakeoff.measure.gemm_rates
FRAMEWORK PRECISION SHAPES.json RESULT.json THREADS``), loading only that framework as a trial does, through the
framework's own ``gemm_rates`` in its engine module (beside ``matmul_rates``, the ceiling's): products of each shape
after one untimed (:func:`repeats`: from 5 for the largest to 30 for the smallest), the fastest kept. The fastest,
not the median: interference only lowers a rate, and on a shared machine it lowers a small product's most (two
threads of a millisecond's product each wait for a time slice: PyTorch's 0.1-GFLOP products ran at 2-3 GFLOP/s
with 10 processes on 2 cores, and at 70-115 in their undisturbed samples). To stay cheap (seconds a framework, not
minutes), a shape over :data:`CAP_FLOPS` is timed on a smaller one of its kind (:func:`timed_shape`: fewer
independent products first, then the largest dimension halved, never below :data:`MIN_DIM`): past that size the rate
no longer grows much.

Where it is kept: a JSON file (:func:`cache_path`: ``$BAKEOFF_GEMM_RATES``, else
``$XDG_CACHE_HOME/bakeoff/gemm_rates.json``, else ``~/.cache/bakeoff/gemm_rates.json``), under the ceiling's
fingerprint of the machine (CPU model, cores, framework version, threads, device:
:func:`bakeoff.measure.ceiling.fingerprint`) and the precision. A shape kept is not measured again; as with the
ceiling, a shape measured again (:func:`rates` with ``remeasure``) keeps the higher rate, since interference only
lowers a rate.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bakeoff.core import frameworks as records
from bakeoff.core import registry
from bakeoff.core.files import temporary_folder, write_json
from bakeoff.measure import ceiling
from bakeoff.measure.environment import usable_cores

log = logging.getLogger(__name__)

Key = tuple[int, int, int, int]
"""A GEMM shape: ``(batch, m, n, k)``, ``batch`` independent ``(m, k) @ (k, n)`` products."""

CAP_FLOPS = 4e9
"""The most FLOPs a timed product has: about 0.04 s at 100 GFLOP/s (2 CPU cores), so a plan's dozen or so distinct
shapes take seconds a framework."""
MIN_DIM = 1024
"""A dimension :func:`timed_shape` never halves below."""
REPEATS = (5, 30)
"""The fewest and the most timed products of a shape: the most for the smallest (:func:`repeats`)."""


def repeats(shape: Key) -> int:
    """Timed products of ``shape``: enough for about twice :data:`CAP_FLOPS` in all, within :data:`REPEATS`."""
    batch, m, n, k = shape
    return int(min(REPEATS[1], max(REPEATS[0], 2 * CAP_FLOPS // (2 * batch * m * n * k))))


def cache_path() -> Path:
    """``$BAKEOFF_GEMM_RATES``, else ``$XDG_CACHE_HOME/bakeoff/gemm_rates.json``, else
    ``~/.cache/bakeoff/gemm_rates.json``."""
    if os.environ.get("BAKEOFF_GEMM_RATES"):
        return Path(os.environ["BAKEOFF_GEMM_RATES"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bakeoff" / "gemm_rates.json"


def timed_shape(shape: Key) -> Key:
    """The shape timed for ``shape``: itself up to :data:`CAP_FLOPS`, else fewer independent products, then its
    largest dimension halved (not below :data:`MIN_DIM`) until it fits."""
    batch, m, n, k = shape
    while 2 * batch * m * n * k > CAP_FLOPS:
        if batch > 1:
            batch = max(1, batch // 2)
            continue
        largest = max(m, n, k)
        if largest // 2 < MIN_DIM:
            break
        if m == largest:
            m //= 2
        elif n == largest:
            n //= 2
        else:
            k //= 2
    return batch, m, n, k


def _name(shape: Key) -> str:
    return "x".join(map(str, shape))


def _read() -> dict[str, Any]:
    path = cache_path()
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def sample(product: Callable[[], object], flops: float, times: int) -> list[float]:
    """FLOP/s of ``times`` calls of ``product`` (one product of ``flops`` FLOPs, returning once it is done), after
    one untimed call (the compile or the trace): what each engine's ``gemm_rates`` times a shape with."""
    rates = []
    for i in range(times + 1):
        t0 = time.perf_counter()
        product()
        if i:
            rates.append(flops / (time.perf_counter() - t0))
    return rates


def _write(cache: dict[str, Any]) -> None:
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, cache, indent=1, sort_keys=True)


def rates(framework: str, precision: str, shapes: Iterable[Key], threads: int = 0, device: str = "cpu",
          remeasure: bool = False, timeout_s: float = 600.0, measure: bool = True) -> dict[Key, float]:
    """FLOP/s of each of ``shapes`` for ``framework`` in ``precision`` on this machine: kept ones read, the others
    (all, with ``remeasure``) measured in one child process and kept, the fastest of its samples (``measure=False``:
    the kept ones only). A
    shape that could not be measured is left out (the failure is logged), so a caller sees which are missing."""
    threads = threads or usable_cores()
    print_ = ceiling.fingerprint(ceiling.family(framework), threads, device)
    entry = f"{ceiling.key(print_)}/{precision}"
    shapes = list(dict.fromkeys(shapes))
    timed = {s: timed_shape(s) for s in shapes}
    kept = _read().get(entry, {}).get("shapes", {})
    todo = sorted({t for t in timed.values() if remeasure or _name(t) not in kept})
    if todo and measure:
        measured = _measure(framework, precision, todo, threads, device, timeout_s)
        cache = _read()  # again: another process may have kept some meanwhile
        slot = cache.setdefault(entry, {"fingerprint": print_, "precision": precision, "shapes": {}})
        for shape, samples in measured.items():
            fastest = max(samples)
            old = slot["shapes"].get(_name(shape))
            if old is None or fastest > old["flops_per_s"]:
                slot["shapes"][_name(shape)] = {"flops_per_s": fastest, "median_flops_per_s":
                                                statistics.median(samples), "samples": samples,
                                                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                                "load_average_1m": round(os.getloadavg()[0], 2)}
        _write(cache)
        kept = slot["shapes"]
    return {s: float(kept[_name(t)]["flops_per_s"]) for s, t in timed.items() if _name(t) in kept}


def _measure(framework: str, precision: str, shapes: list[Key], threads: int, device: str,
             timeout_s: float) -> dict[Key, list[float]]:
    """The child process: each shape's samples, or nothing (logged) when it failed."""
    with temporary_folder("bakeoff-gemm-") as tmp:
        given, out = Path(tmp) / "shapes.json", Path(tmp) / "rates.json"
        given.write_text(json.dumps(shapes))
        env = {**os.environ, **records.get(framework).env, "OMP_NUM_THREADS": str(threads),
               "MKL_NUM_THREADS": str(threads)}
        if device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # as the runner hides accelerators from a --device cpu trial
        t0 = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, "-m", "bakeoff.measure.gemm_rates", framework, precision,
                                   str(given), str(out), str(threads)], capture_output=True, text=True,
                                  timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired:
            log.warning("GEMM rates of %s %s: no result after %.0f s", framework, precision, timeout_s)
            return {}
        if not out.is_file():
            log.warning("GEMM rates of %s %s: exit %s: %s", framework, precision, done.returncode,
                        done.stderr[-500:].strip())
            return {}
        log.info("GEMM rates of %s %s: %d shapes in %.1f s", framework, precision, len(shapes),
                 time.perf_counter() - t0)
        samples = json.loads(out.read_text())
    return {tuple(shape): rates_ for shape, rates_ in zip(shapes, samples, strict=True)}  # type: ignore[misc]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 5:
        sys.stderr.write("usage: python -m bakeoff.measure.gemm_rates FRAMEWORK PRECISION SHAPES.json RESULT.json "
                         "THREADS\n")
        return 2
    from bakeoff.measure.isolation import refuse_foreign

    framework, precision, given, path, threads = argv
    refuse_foreign(framework)  # one framework in this process, as in a trial
    module = records.get(framework).matmul.partition(":")[0]  # a Keras row's is its backend's engine
    measure = registry.load(f"{module}:gemm_rates")
    shapes = [tuple(s) for s in json.loads(Path(given).read_text())]
    write_json(Path(path), measure(precision, shapes, [repeats(s) for s in shapes], int(threads)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
