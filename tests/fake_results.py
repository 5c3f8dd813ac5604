"""Hand-made, realistic TrialResults for the analysis and report tests (no framework needed).

The default bake-off (:func:`default_results`), text_classifier/tiny, 100 steps of 32 examples, 3 repeats each:

=================  ==============  ==========  ============  =====  ======================
configuration      examples/s      first step  to target s   final  memory MiB
                                                                    baseline + increment
=================  ==============  ==========  ============  =====  ======================
torch/graph        940 950 960     1.2         2.0 2.1 2.2   0.80   260 + 140
torch/eager        690 700 710     0.05        2.9 3.0 3.1   0.80   250 + 120
tensorflow/graph   510 520 530     0.8         3.9 4.1 4.3   0.81   330 + 180
tensorflow/eager   280 300 320     0.1         never         0.75   320 + 210
tensorflow/xla     failed (repeat 0)
=================  ==============  ==========  ============  =====  ======================

Steady step times jitter around their median by about 15% (IQR / median), as measured on a shared CPU; the
median of each trial's steady steps is exactly ``32 / examples_per_s``. The whole-trial peak is the training peak
plus 8 MiB of evaluation. Threads: PyTorch 16 intra / 16 inter, TensorFlow 16 / 1 (as the engines set them).

Each trial records what a real one does besides its measurements: the spec's ``content`` (bakeoff version, config
hash, framework version, and a hash per data file), the resolved config and the data set's facts in ``setup``
(the shipped fine-foods reviews unless told otherwise), steady steps, epochs (``training``) and its place in the
run order (``order``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bakeoff.core.result import Order, Setup, Training, TrialResult
from bakeoff.core.spec import RunSpec, Status
from bakeoff.results.store import Store

TARGET = 0.78
BATCH = 32
STEPS = 100
TRAIN_ROWS = 4000
BAKEOFF_VERSION = "0.1.0+9f8e7d6c5b4a3210"
CONFIG = {"vocab_size": 4000, "seq_len": 128, "d_model": 64, "num_heads": 4, "d_ff": 128, "num_layers": 2,
          "dropout": 0.1, "learning_rate": 0.001, "num_classes": 2, "layer_norm_eps": 1e-05}
DATA_INFO = {"source": "Amazon fine-food reviews (modeldata::small_fine_foods), 4000 train / 1000 test",
             "classes": ["great", "other"], "vocab_size_used": 4000, "majority_rate": 0.658}
MIB = 2**20
XLA_REASON = ("Traceback (most recent call last):\n  File \"engine.py\", line 88, in step\n"
              "UnimplementedError: XLA compilation is not supported for op 'StringToHashBucketFast' on CPU")
VERSIONS = {"torch": "2.13.0", "tensorflow": "2.21.0"}
INTER_OP = {"torch": 16, "tensorflow": 1}
JITTER = 0.11  # standard deviation of the relative step-time noise: an IQR of about 15% of the median


def environment(framework: str, load: tuple[float, float] = (0.4, 1.1)) -> dict:
    return {"cpu": "AMD EPYC 7B13", "cores": 16, "device": "cpu", "python": "3.11.7",
            "load_average_1m_at_start": load[0], "load_average_1m_at_end": load[1],
            framework: VERSIONS.get(framework, "?"), "intra_op_threads": 16,
            "inter_op_threads": INTER_OP.get(framework, 1)}


# The spec fields that seed a trial's step-time noise: those RunSpec had when the goldens were written, so a field
# added to RunSpec later (config, target, content) changes no golden number.
NOISE_FIELDS = ("workload", "framework", "preset", "execution", "precision", "parallelism", "workers", "batch_size",
                "grad_accum", "max_steps", "max_epochs", "max_seconds", "eval_every", "warmup_steps", "stop_at_target",
                "checkpoint_every", "learning_rate", "seed", "repeat", "device", "threads", "data")


def noise_key(spec: RunSpec) -> str:
    """The seed of a trial's step-time noise: a hash of its :data:`NOISE_FIELDS`."""
    raw = {k: v for k, v in spec.to_dict().items() if k in NOISE_FIELDS}
    return hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:16]


def content(framework: str, data_hashes: dict[str, str] | None = None, bakeoff: str = BAKEOFF_VERSION) -> dict:
    """``RunSpec.content`` as the runner fills it: a 16-character hash per data file, the config, the versions."""
    return {**{f"data:{k}": h for k, h in (data_hashes or {}).items()}, "bakeoff": bakeoff,
            "config": "c0ffee0123456789", framework: f"{framework} {VERSIONS.get(framework, '?')}"}


def step_times(first_step_s: float, steady: float, n: int, *, key: str, warmup: int = 3,
               jitter: float = JITTER) -> list[float]:
    """The first step, then ``n - 1`` steps jittered around ``steady``; the median of the steady ones (after the
    first and ``warmup`` more) is exactly ``steady``. Seeded by ``key``, so a trial's steps never change."""
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    noise = np.abs(1 + jitter * rng.standard_normal(n - 1))
    noise /= np.median(noise[warmup:])
    return [first_step_s, *(steady * noise).tolist()]


def trial(framework: str, execution: str, *, repeat: int = 0, seed: int = 0, examples_per_s: float = 500.0,
          first_step_s: float = 0.5, time_to_target_s: float | None = None, final_metric: float = 0.8,
          baseline_mib: float = 250.0, increment_mib: float = 150.0, import_s: float = 2.0, build_s: float = 0.1,
          preset: str = "tiny", target: float | None = TARGET, precision: str = "fp32", steps: int = STEPS,
          jitter: float = JITTER, load: tuple[float, float] = (0.4, 1.1), data: dict[str, str] | None = None,
          data_hashes: dict[str, str] | None = None, bakeoff: str = BAKEOFF_VERSION,
          data_info: dict | None = None, batch_size: int = BATCH) -> TrialResult:
    """One successful trial whose every field agrees with the numbers given (``steps`` trained, of ``STEPS``).

    ``data`` are the spec's data options, ``data_hashes`` the content hashes of the files they name.
    """
    spec = RunSpec(workload="text_classifier", framework=framework, execution=execution, preset=preset,
                   max_steps=STEPS, seed=seed, repeat=repeat, batch_size=batch_size, eval_every=10,
                   precision=precision, data=data or {}, content=content(framework, data_hashes, bakeoff))
    steady = BATCH / examples_per_s
    times = step_times(first_step_s, steady, steps, key=noise_key(spec), jitter=jitter)
    clock = np.cumsum(times)  # training clock after each step
    train_end = float(clock[-1])
    # Quality rises linearly in training time through (0, 0.5) and, when reached, (time_to_target_s, target).
    knots = [(0.0, 0.5)] + ([(time_to_target_s, target)] if time_to_target_s and target else []) + [
        (train_end, final_metric)]

    def metric_at(t: float) -> float:
        for (t0, m0), (t1, m1) in zip(knots, knots[1:], strict=False):
            if t <= t1:
                return m0 + (m1 - m0) * (t - t0) / (t1 - t0)
        return final_metric

    curve = [{"step": float(s), "train_s": float(clock[s - 1]), "metric": 0.0} for s in range(10, steps + 1, 10)]
    for point in curve:
        point["metric"] = round(metric_at(point["train_s"]), 4)
    reached = time_to_target_s is not None and target is not None
    # Interpolated like the engine: steps (a float) where the training clock crosses time_to_target_s.
    steps_to_target = float(np.interp(time_to_target_s, clock, np.arange(1, steps + 1))) if reached else None
    baseline, increment = int(baseline_mib * MIB), int(increment_mib * MIB)
    return TrialResult(
        spec=spec.to_dict(), key=spec.key(), status=Status.OK, environment=environment(framework, load),
        import_s=import_s, build_s=build_s, first_step_s=first_step_s, step_times_s=times,
        losses=[0.69 * 0.99**i for i in range(steps)], examples_per_step=BATCH, steady_step_s=steady,
        throughput={"examples_per_s": examples_per_s}, memory_kind="rss", memory_baseline_bytes=baseline,
        memory_train_peak_bytes=baseline + increment, memory_increment_bytes=increment,
        peak_memory_bytes=baseline + increment + 8 * MIB, curve=curve, metric_name="accuracy", target=target,
        time_to_target_s=time_to_target_s, steps_to_target=steps_to_target,
        final_metric=curve[-1]["metric"] if steps < STEPS else final_metric,
        best_metric=max(p["metric"] for p in curve), num_params=1_234_567, train_s=train_end,
        wall_s=train_end + import_s + 1.0,
        training=Training(steady_steps=steps - 1 - spec.warmup_steps, epochs=steps * batch_size / TRAIN_ROWS,
                          **target_record(preset, data_info)),
        order=Order(position=1, of=1, seed=0),
        setup=Setup(config=dict(CONFIG), data=dict(DATA_INFO if data_info is None else data_info)))


def target_record(preset: str, data_info: dict | None) -> dict[str, str]:
    """``training.target_rule`` and ``target_source`` as a trial records them: derived from user data when its facts
    hold a target, else text_classifier's preset target, measured on the shipped data."""
    derived = (data_info or {}).get("target")
    if derived:
        return {"target_rule": derived["rule"], "target_source": "derived"}
    return {"target_rule": f"measured for preset {preset} on the shipped data", "target_source": "measured"}


def failed(framework: str, execution: str, *, repeat: int = 0, seed: int = 0, reason: str = XLA_REASON,
           status: Status = Status.FAILED) -> TrialResult:
    """A trial that did not succeed: nothing measured but the reason."""
    spec = RunSpec(workload="text_classifier", framework=framework, execution=execution, max_steps=STEPS,
                   seed=seed, repeat=repeat, batch_size=BATCH, eval_every=10, content=content(framework))
    return TrialResult(spec=spec.to_dict(), key=spec.key(), status=status, reason=reason,
                       environment=environment(framework), import_s=3.4, metric_name="accuracy", target=TARGET,
                       setup=Setup(config=dict(CONFIG), data=dict(DATA_INFO)))


def repeats(framework: str, execution: str, examples_per_s: Sequence[float], time_to_target_s: Sequence, *,
            final_metric: Sequence[float], first_step_s: float = 0.5, baseline_mib: float = 250.0,
            increment_mib: float = 150.0, **kwargs) -> list[TrialResult]:
    """One trial per repeat, zipping the per-repeat numbers. First step and memory vary from run to run like real
    ones (±3% and ±1%, in the order 1, 1 - x, 1 + x, ...), so their medians over 3 runs are the numbers given."""
    def wobble(i: int, x: float) -> float:
        return 1 + x * (0, -1, 1)[i % 3] * (1 + i // 3)

    return [trial(framework, execution, repeat=i, examples_per_s=e, time_to_target_s=t, final_metric=f,
                  first_step_s=first_step_s * wobble(i, 0.03), baseline_mib=baseline_mib * wobble(i, 0.01),
                  increment_mib=increment_mib * wobble(i, 0.01), **kwargs)
            for i, (e, t, f) in enumerate(zip(examples_per_s, time_to_target_s, final_metric, strict=True))]


def default_results() -> list[TrialResult]:
    """The bake-off in the module docstring: PyTorch (graph) wins clearly; TF XLA failed; TF eager is noisy."""
    return [
        *repeats("torch", "graph", [940, 950, 960], [2.0, 2.1, 2.2], final_metric=[0.80, 0.81, 0.80],
                 first_step_s=1.2, baseline_mib=260, increment_mib=140, import_s=1.9, build_s=0.05),
        *repeats("torch", "eager", [690, 700, 710], [2.9, 3.0, 3.1], final_metric=[0.80, 0.80, 0.81],
                 first_step_s=0.05, baseline_mib=250, increment_mib=120, import_s=1.9, build_s=0.05),
        *repeats("tensorflow", "graph", [510, 520, 530], [3.9, 4.1, 4.3], final_metric=[0.81, 0.82, 0.81],
                 first_step_s=0.8, baseline_mib=330, increment_mib=180, import_s=3.4, build_s=0.3),
        *repeats("tensorflow", "eager", [280, 300, 320], [None, None, None], final_metric=[0.75, 0.74, 0.76],
                 first_step_s=0.1, baseline_mib=320, increment_mib=210, import_s=3.4, build_s=0.3),
        failed("tensorflow", "xla"),
    ]


def readme_command(command: str, flag: str) -> list[str]:
    """The arguments after ``bakeoff`` of the README's first ``bakeoff COMMAND ... FLAG ...`` (in backticks), as
    written: a test that runs it keeps the README true."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    pattern = rf"`(bakeoff {command} [^`]*{re.escape(flag)}[^`]*)`"
    return next(m.group(1) for m in re.finditer(pattern, readme)).split()[1:]


def store_as_readme(folder: Path, results: Sequence[TrialResult], suite: str = "quick") -> None:
    """``results`` stored where the README's commands find them, run in ``folder``: ``results/bakeoff.sqlite``."""
    with Store(folder / "results" / "bakeoff.sqlite") as store:
        for result in results:
            store.put(result, suite)


def respec(result: TrialResult, **changes) -> TrialResult:
    """``result`` with its spec's fields changed (and its key to match); its measurements untouched."""
    raw = {**result.spec, **changes}
    return dataclasses.replace(result, spec=RunSpec.from_dict(raw).to_dict(), key=RunSpec.from_dict(raw).key())


def brute_force_throughput(results: Sequence[TrialResult], rng: np.random.Generator,
                           resamples: int = 20_000) -> np.ndarray:
    """Throughput replicates of one configuration by the plainest two-level bootstrap, to check bakeoff's against:
    draw the runs with replacement, then each drawn run's steady steps with replacement; a run's rate is its
    examples per step over the median drawn step, the configuration's the median over its drawn runs."""
    steady = np.array([r.step_times_s[1 + r.run_spec.warmup_steps:] for r in results])  # (runs, steady steps)
    n, m = steady.shape
    runs = rng.integers(n, size=(resamples, n))
    steps = steady[runs[..., None], rng.integers(m, size=(resamples, n, m))]
    return np.median(results[0].examples_per_step / np.median(steps, axis=2), axis=1)


def quick_results() -> list[TrialResult]:
    """The quick suite's shape, synthetic: text_classifier/tiny PyTorch (eager) against TensorFlow (graph), and
    mnist/tiny and autoencoder/tiny with JAX (graph) too; 3 repeats each. PyTorch wins text_classifier and mnist;
    on the autoencoder PyTorch leads JAX by differences that are unsettled (no winner)."""
    def on(workload: str, results: list[TrialResult]) -> list[TrialResult]:
        return [respec(r, workload=workload) for r in results]

    return [
        *on("text_classifier", [
            *repeats("torch", "eager", [690, 700, 710], [2.9, 3.0, 3.1], final_metric=[0.80, 0.80, 0.81],
                     first_step_s=0.05, increment_mib=120),
            *repeats("tensorflow", "graph", [510, 520, 530], [3.9, 4.1, 4.3], final_metric=[0.81, 0.82, 0.81],
                     first_step_s=0.8, increment_mib=180)]),
        *on("mnist", [
            *repeats("torch", "eager", [2900, 3000, 3100], [1.0, 1.1, 1.2], final_metric=[0.97, 0.97, 0.98],
                     first_step_s=0.04, increment_mib=60),
            *repeats("tensorflow", "graph", [1900, 2000, 2100], [1.9, 2.0, 2.1], final_metric=[0.97, 0.97, 0.97],
                     first_step_s=0.6, increment_mib=90),
            *repeats("jax", "graph", [2300, 2400, 2500], [1.6, 1.7, 1.8], final_metric=[0.97, 0.98, 0.97],
                     first_step_s=0.4, increment_mib=70)]),
        *on("autoencoder", [
            *repeats("torch", "eager", [1500, 1800, 2100], [1.4, 2.0, 2.6], final_metric=[0.90, 0.86, 0.93],
                     first_step_s=0.05, increment_mib=80, jitter=0.25),
            *repeats("tensorflow", "graph", [900, 1000, 1100], [2.5, 3.0, 3.5], final_metric=[0.88, 0.9, 0.89],
                     first_step_s=0.7, increment_mib=110),
            *repeats("jax", "graph", [1450, 1750, 2150], [1.5, 2.1, 2.5], final_metric=[0.89, 0.92, 0.87],
                     first_step_s=0.5, increment_mib=85, jitter=0.25)]),
    ]


def verdict_body(verdict: str) -> str:
    """A verdict without its closing "What would settle it: ..." sentence (one clause per unsettled criterion)."""
    return verdict.split(" What would settle it: ")[0]
