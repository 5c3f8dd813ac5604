"""Hand-made, realistic TrialResults for the analysis and report tests (no framework needed).

The default bake-off (:func:`default_results`), text_classifier/tiny, 100 steps of 32 examples, 3 repeats each:

=================  ==============  ==========  ============  =====  ==========
configuration      examples/s      first step  to target s   final  memory MiB
=================  ==============  ==========  ============  =====  ==========
torch/graph        940 950 960     1.2         2.0 2.1 2.2   0.80   410
torch/eager        690 700 710     0.05        2.9 3.0 3.1   0.80   380
tensorflow/graph   510 520 530     0.8         3.9 4.1 4.3   0.81   520
tensorflow/eager   280 300 320     0.1         never         0.75   540
tensorflow/xla     failed (repeat 0)
=================  ==============  ==========  ============  =====  ==========
"""

from __future__ import annotations

from collections.abc import Sequence

from bakeoff.spec import RunSpec, Status, TrialResult

TARGET = 0.78
BATCH = 32
STEPS = 100
MIB = 2**20
XLA_REASON = ("Traceback (most recent call last):\n  File \"engine.py\", line 88, in step\n"
              "UnimplementedError: XLA compilation is not supported for op 'StringToHashBucketFast' on CPU")
VERSIONS = {"torch": "2.13.0", "tensorflow": "2.21.0"}


def environment(framework: str) -> dict:
    return {"cpu": "AMD EPYC 7B13", "threads": 16, "device": "cpu", "python": "3.11.7",
            framework: VERSIONS.get(framework, "?")}


def trial(framework: str, execution: str, *, repeat: int = 0, seed: int = 0, examples_per_s: float = 500.0,
          first_step_s: float = 0.5, time_to_target_s: float | None = None, final_metric: float = 0.8,
          peak_mib: float = 400.0, import_s: float = 2.0, build_s: float = 0.1, preset: str = "tiny",
          target: float | None = TARGET, precision: str = "fp32") -> TrialResult:
    """One successful trial whose every field agrees with the numbers given."""
    spec = RunSpec(workload="text_classifier", framework=framework, execution=execution, preset=preset,
                   max_steps=STEPS, seed=seed, repeat=repeat, batch_size=BATCH, eval_every=10, precision=precision)
    steady = BATCH / examples_per_s
    steps = [first_step_s] + [steady] * (STEPS - 1)
    train_end = sum(steps)
    # Quality rises linearly in training time through (0, 0.5) and, when reached, (time_to_target_s, target).
    knots = [(0.0, 0.5)] + ([(time_to_target_s, target)] if time_to_target_s and target else []) + [
        (train_end, final_metric)]

    def metric_at(t: float) -> float:
        for (t0, m0), (t1, m1) in zip(knots, knots[1:], strict=False):
            if t <= t1:
                return m0 + (m1 - m0) * (t - t0) / (t1 - t0)
        return final_metric

    curve = [{"step": float(s), "train_s": first_step_s + (s - 1) * steady, "metric": 0.0} for s in range(10, 101, 10)]
    for point in curve:
        point["metric"] = round(metric_at(point["train_s"]), 4)
    return TrialResult(
        spec=spec.to_dict(), key=spec.key(), status=Status.OK, environment=environment(framework),
        import_s=import_s, build_s=build_s, first_step_s=first_step_s, step_times_s=steps,
        losses=[0.69 * 0.99**i for i in range(STEPS)], examples_per_step=BATCH, steady_step_s=steady,
        throughput={"examples_per_s": examples_per_s}, peak_memory_bytes=int(peak_mib * MIB), memory_kind="rss",
        curve=curve, metric_name="accuracy", target=target, time_to_target_s=time_to_target_s,
        steps_to_target=None, final_metric=final_metric, best_metric=max(final_metric, curve[-1]["metric"]),
        num_params=1_234_567, train_s=train_end, wall_s=train_end + import_s + 1.0)


def failed(framework: str, execution: str, *, repeat: int = 0, seed: int = 0, reason: str = XLA_REASON,
           status: Status = Status.FAILED) -> TrialResult:
    """A trial that did not succeed: nothing measured but the reason."""
    spec = RunSpec(workload="text_classifier", framework=framework, execution=execution, max_steps=STEPS,
                   seed=seed, repeat=repeat, batch_size=BATCH, eval_every=10)
    return TrialResult(spec=spec.to_dict(), key=spec.key(), status=status, reason=reason,
                       environment=environment(framework), import_s=3.4, metric_name="accuracy", target=TARGET)


def repeats(framework: str, execution: str, examples_per_s: Sequence[float], time_to_target_s: Sequence, *,
            final_metric: Sequence[float], **kwargs) -> list[TrialResult]:
    """One trial per repeat, zipping the per-repeat numbers."""
    return [trial(framework, execution, repeat=i, examples_per_s=e, time_to_target_s=t, final_metric=f, **kwargs)
            for i, (e, t, f) in enumerate(zip(examples_per_s, time_to_target_s, final_metric, strict=True))]


def default_results() -> list[TrialResult]:
    """The bake-off in the module docstring: PyTorch (graph) wins clearly; TF XLA failed; TF eager is noisy."""
    return [
        *repeats("torch", "graph", [940, 950, 960], [2.0, 2.1, 2.2], final_metric=[0.80, 0.81, 0.80],
                 first_step_s=1.2, peak_mib=410, import_s=1.9, build_s=0.05),
        *repeats("torch", "eager", [690, 700, 710], [2.9, 3.0, 3.1], final_metric=[0.80, 0.80, 0.81],
                 first_step_s=0.05, peak_mib=380, import_s=1.9, build_s=0.05),
        *repeats("tensorflow", "graph", [510, 520, 530], [3.9, 4.1, 4.3], final_metric=[0.81, 0.82, 0.81],
                 first_step_s=0.8, peak_mib=520, import_s=3.4, build_s=0.3),
        *repeats("tensorflow", "eager", [280, 300, 320], [None, None, None], final_metric=[0.75, 0.74, 0.76],
                 first_step_s=0.1, peak_mib=540, import_s=3.4, build_s=0.3),
        failed("tensorflow", "xla"),
    ]
