"""The machine's ceiling: each framework's dense matmul throughput (fp32, and bf16 where it has it) on the device a
trial would use, measured once per machine, framework version and thread count, and kept in the store.

Where it is measured: ``bakeoff env`` runs one probe process per framework (``python -m bakeoff.measure.ceiling
FRAMEWORK RESULT.json [N [THREADS]]``), loading only that framework, as a trial does. A run whose store keeps no
ceiling for a trial's fingerprint asks that trial to probe (its request's ``probe_ceiling``,
:class:`bakeoff.core.contract.TrialRequest`): after its result is complete (off
every clock and memory figure), in the process that trained, with the threads the trial was given. Either way:
``REPEATS`` timed ``(N, N) @ (N, N)`` products after warm-up, through the framework's own ``matmul_rates`` in its
engine module; the median is the ceiling and every sample is kept. A precision the framework cannot multiply in here
is recorded missing with the error, not estimated. A precision this device multiplies far slower than fp32 (bf16 on a
CPU without bf16 instructions: PyTorch's bf16 product of 1024 took 2.5 s on a 2-core EPYC, 0.84 GFLOP/s against
fp32's 76) is timed on a smaller ``N`` (down to ``N/4``), the largest whose products fit :data:`BUDGET_S` at the
rate of a product timed at half its size, and its entry says which ``n``: otherwise the probe added a minute to the
trial that ran it.

Interference only lowers a matmul rate (another process on the cores, a busy neighbour of a virtual machine), and
on a shared 2-core VM one probe's median ranged from 118 to 190 GFLOP/s (PyTorch fp32) from one probe to the next.
So the kept ceiling is the highest median measured for its fingerprint (:func:`higher`): a trial probes once, and
``bakeoff env --reprobe`` measures again, raising the kept ceiling when it finds more. Every MFU records the
ceiling and the spread of the samples it was measured against. A Keras row multiplies with its backend's framework
(:func:`family`).

MFU (:func:`utilisation`): model FLOPs per second over the ceiling in the trial's precision. Model FLOPs per second
= the workload's ``flops_per_example`` (training: forward and backward counted as 3× the forward's matmul and
convolution FLOPs, attention's score and value products included: the text classifier's on the padded sequence the
model computes on, speech's on the mean utterance; embedding lookups, norms, activations and the optimizer not
counted) × steady examples/s. fp16 trials have no ceiling (the probe
measures fp32 and bf16), nor do multi-process trials yet (a ceiling is one process's): their MFU is missing with
that reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bakeoff.core import frameworks as records
from bakeoff.core import registry
from bakeoff.core.files import temporary_folder, write_json
from bakeoff.core.result import CeilingProbe, Mfu, TrialResult
from bakeoff.core.spec import Parallelism, RunSpec, Status
from bakeoff.measure.environment import cpu_model, usable_cores

SIZE = 1024  # 2.1 GFLOP a product: long enough to time on a CPU, short enough to probe in seconds
REPEATS = 20  # about 0.6 s of fp32 products on a 2-core CPU: what a trial's probe adds to its process
BUDGET_S = 3.0
"""Seconds of products (warm-up included) a precision may take; a slower one is timed on a smaller ``n``."""
PRECISIONS = ("fp32", "bf16")


def family(framework: str) -> str:
    """The framework whose matmul a row's ceiling is: itself, or a Keras row's backend (``keras-jax`` -> ``jax``)."""
    loads = records.get(framework).loads
    return next((name for name in records.markers() if records.get(name).loads == loads), framework)


def fingerprint(framework: str, threads: int, device: str = "auto") -> dict[str, Any]:
    """What a ceiling depends on: the machine (CPU model, cores), the framework's version, threads, device."""
    from bakeoff.core.identity import framework_version

    return {"framework": framework, "version": framework_version(framework), "cpu": cpu_model(),
            "cores": os.cpu_count(), "threads": threads, "device": device}


def key(print_: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(print_, sort_keys=True).encode()).hexdigest()[:16]


def probe(framework: str, n: int = SIZE, repeats: int = REPEATS, threads: int = 0) -> dict[str, Any]:
    """Measure in this process (it loads ``framework``): ``{precision: {"median_flops_per_s", "samples"} or
    {"missing": reason}}``, with ``threads`` set first (0: as already set, in a trial process). The probe process
    refuses the other frameworks first (:func:`main`)."""
    rates = registry.load(records.get(framework).matmul)  # a Keras row's is its backend's
    out: dict[str, Any] = {"n": n, "repeats": repeats, "threads": threads, "precisions": {},
                           "load_average_1m_at_start": round(os.getloadavg()[0], 2)}
    for precision in PRECISIONS:
        try:
            size = _size_within_budget(rates, precision, n, repeats, threads)
            samples = rates(precision, size, repeats, threads)
            out["precisions"][precision] = {"median_flops_per_s": statistics.median(samples), "samples": samples,
                                            "n": size}
        except Exception as exc:  # noqa: BLE001 - a precision the framework lacks here is recorded, not fatal
            out["precisions"][precision] = {"missing": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return out


def _size_within_budget(rates: Callable[..., list[float]], precision: str, n: int, repeats: int,
                        threads: int) -> int:
    """The largest of ``n``, ``n/2``, ``n/4`` (never below ``n/4``) whose ``repeats`` products and 3 warm-ups take at
    most :data:`BUDGET_S`: each doubling is predicted from one product timed at the size below it (small products
    run at a lower rate than large ones, so a prediction from ``n/4`` alone would shrink a fast precision too)."""
    size = max(1, n // 4)
    while size < n:
        rate = rates(precision, size, 1, threads)[0]
        bigger = min(n, size * 2)
        if (repeats + 3) * 2 * bigger**3 / rate > BUDGET_S:
            break
        size = bigger
    return size


def size_note(n: int | None) -> str:
    """What ``bakeoff env`` and the report add to a ceiling timed on products smaller than :data:`SIZE` (``None``:
    an entry from before sizes were recorded, timed at :data:`SIZE`)."""
    return "" if n in (None, SIZE) else f"; on {n}x{n} products, too slow for {SIZE} within the probe's {BUDGET_S:g} s"


def measure(framework: str, n: int = SIZE, threads: int = 0, timeout_s: float = 300.0,
            device: str = "auto") -> dict[str, Any]:
    """:func:`probe` in a fresh process on ``device`` (as a trial's ``--device``); ``{"status": "ok", ...}`` or the
    failure with its reason."""
    with temporary_folder("bakeoff-ceiling-") as tmp:
        out = Path(tmp) / "ceiling.json"
        env = {**os.environ, **records.get(framework).env}
        if threads:
            env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        if device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # as the runner hides accelerators from a --device cpu trial
        t0 = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, "-m", "bakeoff.measure.ceiling", framework, str(out), str(n),
                                   str(threads)], capture_output=True, text=True, timeout=timeout_s, env=env)
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "reason": f"no result after {timeout_s:.0f} s"}
        if not out.is_file():
            return {"status": "failed", "reason": f"exit {done.returncode}: {done.stderr[-500:].strip()}"}
        return {"status": "ok", "wall_s": time.perf_counter() - t0, "where": "probe process",
                **json.loads(out.read_text())}


def higher(new: dict[str, Any], kept: dict[str, Any] | None, precision: str = "fp32") -> bool:
    """Whether probe result ``new`` should replace the ``kept`` one: none kept, or a higher median in
    ``precision`` (the kept ceiling is the highest median measured: interference only lowers a rate)."""
    if kept is None:
        return True
    def median(result: dict[str, Any]) -> float:
        return float(result["precisions"].get(precision, {}).get("median_flops_per_s", 0.0))
    return median(new) > median(kept["result"])


def in_trial(spec: RunSpec, result: TrialResult) -> None:
    """In a trial process asked to (its request's ``probe_ceiling``), after its result is complete: probe with the
    threads the trial set, into its ``ceiling_probe`` section (the runner keeps it in the store). A failure is
    recorded there."""
    if result.status is not Status.OK:
        return
    t0 = time.perf_counter()
    try:
        measured = {"status": "ok", **probe(spec.framework.value, threads=0)}
    except Exception as exc:  # noqa: BLE001 - a ceiling that could not be probed leaves the trial's result as it is
        measured = {"status": "failed", "reason": f"{type(exc).__name__}: {str(exc)[:300]}"}
    result.ceiling_probe = CeilingProbe(**measured, wall_s=time.perf_counter() - t0, where="trial process")


@dataclasses.dataclass(frozen=True)
class Need:
    """The ceiling a trial's MFU is measured against: its store key and fingerprint, or why there is none."""

    key: str | None
    fingerprint: dict[str, Any]
    reason: str = ""


def need(spec: RunSpec) -> Need:
    """Which kept ceiling ``spec``'s trial is measured against (the runner's side: no framework imported)."""
    if spec.parallelism is not Parallelism.NONE:
        return Need(None, {}, "not computed for multi-process trials yet (a ceiling is one process's)")
    print_ = fingerprint(family(spec.framework.value), spec.threads or usable_cores(), spec.device.value)
    return Need(key(print_), print_)


def utilisation(result: TrialResult, kept: dict[str, Any] | None, wanted: Need,
                flops_per_example: float | None) -> Mfu:
    """The trial's MFU against the kept ceiling (``Store.ceiling`` row), or why there is none (``missing``)."""
    precision = str(result.spec.get("precision", "fp32"))
    if flops_per_example is None:
        return Mfu(missing=f"the {result.spec.get('workload')} workload does not count its FLOPs")
    if wanted.key is None:
        return Mfu(missing=wanted.reason)
    if kept is None:
        return Mfu(missing="no ceiling kept for this machine, framework version and thread count (its probe "
                           "failed: see the result's ceiling_probe)")
    entry = kept["result"]["precisions"].get(precision)
    if entry is None:
        return Mfu(missing=f"no {precision} ceiling: the probe measures {' and '.join(PRECISIONS)}")
    if "missing" in entry:
        return Mfu(missing=f"no {precision} ceiling on this machine: {entry['missing'][:200]}")
    rate = result.throughput.get("examples_per_s")
    if rate is None:
        return Mfu(missing="no steady throughput to count FLOPs from")
    achieved = flops_per_example * rate
    peak = float(entry["median_flops_per_s"])
    samples = entry.get("samples") or [peak]
    device = str(result.environment.get("device", wanted.fingerprint.get("device", "")))
    return Mfu(value=achieved / peak, model_flops_per_s=achieved, flops_per_example=flops_per_example,
               ceiling_flops_per_s=peak, ceiling_range=[min(samples), max(samples)],
               ceiling_n=int(entry.get("n", kept["result"].get("n", SIZE))), precision=precision,
               ceiling_framework=wanted.fingerprint["framework"],
               ceiling_version=wanted.fingerprint["version"], ceiling_key=wanted.key,
               ceiling_measured_at=kept["measured_at"], ceiling_where=kept["result"].get("where", "probe process"),
               threads=wanted.fingerprint["threads"],
               device_kind="GPU" if any(m in device.lower() for m in ("cuda", "gpu")) else "CPU")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not 2 <= len(argv) <= 4:
        sys.stderr.write("usage: python -m bakeoff.measure.ceiling FRAMEWORK RESULT.json [N [THREADS]]\n")
        return 2
    from bakeoff.measure.isolation import refuse_foreign

    refuse_foreign(argv[0])  # one framework in this process, as in a trial
    n = int(argv[2]) if len(argv) > 2 else SIZE
    threads = (int(argv[3]) if len(argv) > 3 else 0) or usable_cores()
    write_json(Path(argv[1]), probe(argv[0], n, REPEATS, threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
