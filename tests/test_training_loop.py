"""The shared training loop's bookkeeping, checked with a framework-free engine."""

from __future__ import annotations

import numpy as np
import pytest

from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec, Status
from bakeoff.core.workload import Dataset
from bakeoff.engines.base import Engine
from bakeoff.trial.loop import train
from bakeoff.workloads.text_classifier.workload import TextClassifierWorkload


class CountingEngine(Engine):
    """Accuracy rises by 0.1 per 4 steps from 0.5; each step 'takes' a fixed time."""

    framework = "fake"

    def setup(self, weights):
        self.steps = 0
        self.micro_sizes = []

    def train_step(self, micro_batches):
        self.micro_sizes.append([len(b["labels"]) for b in micro_batches])
        self.steps += 1
        return 1.0 / self.steps

    def gradients(self, micro_batches):
        return []

    def graph_builds(self):
        return sum(1 for s in (1, 5) if self.steps >= s)  # "traces" at steps 1 and 5, as a new shape would

    def predict(self, split, batch_size):
        accuracy = min(1.0, 0.5 + 0.1 * (self.steps // 4))
        labels = split["labels"]
        n_right = int(round(accuracy * len(labels)))
        return np.where(np.arange(len(labels)) < n_right, labels, 1 - labels).astype(np.float64)

    def num_params(self):
        return 0

    def save_checkpoint(self, directory):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "steps").write_text(str(self.steps))

    def load_checkpoint(self, directory):
        self.steps = int((directory / "steps").read_text())

    def summary_writer(self, logdir):
        raise ImportError("no writer in this test")

    def environment(self):
        return {}


def _data(n_train: int = 64) -> Dataset:
    tokens = np.ones((n_train, 8), np.int32)
    tokens[:, 6:] = 0  # 6 valid tokens per example
    labels = np.arange(n_train) % 2
    return Dataset(train={"tokens": tokens, "labels": labels}, test={"tokens": tokens[:20], "labels": labels[:20]})


def _run(engine_out: list | None = None, checkpoint_dir=None, **kw) -> TrialResult:
    spec = RunSpec(workload="text_classifier", framework="torch", **{"batch_size": 8, **kw})
    engine = CountingEngine(spec, TextClassifierWorkload(), {})
    engine.setup({})
    if engine_out is not None:
        engine_out.append(engine)
    result = TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.OK)
    return train(engine, _data(), result, checkpoint_dir=checkpoint_dir, tensorboard_dir=checkpoint_dir)


def test_budget_eval_cadence_and_time_to_target():
    r = _run(max_steps=20, eval_every=4, warmup_steps=2)
    assert len(r.step_times_s) == len(r.losses) == 20
    assert r.losses[:3] == [1.0, 0.5, pytest.approx(1 / 3)]
    assert [p["step"] for p in r.curve] == [0, 4, 8, 12, 16, 20]  # step 0: the untrained model
    assert [p["metric"] for p in r.curve] == pytest.approx([0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    # 0.75 lies half-way between the evaluations at step 8 (0.7) and step 12 (0.8): interpolated, not rounded up
    assert r.target == 0.75 and r.steps_to_target == pytest.approx(10)
    assert r.time_to_target_s == pytest.approx(sum(r.step_times_s[:8]) + sum(r.step_times_s[8:12]) / 2)
    assert r.final_metric == 1.0 and r.best_metric == 1.0
    assert r.training.steady_steps == 17  # 20 − first step − 2 warm-up steps
    assert r.steady_step_s == pytest.approx(float(np.median(r.step_times_s[3:])))
    assert r.throughput["examples_per_s"] == pytest.approx(8 / r.steady_step_s)
    assert r.units_per_step == {"tokens": 48.0}


def test_a_trial_that_measures_only_training_never_evaluates():
    spec = RunSpec(workload="text_classifier", framework="torch", batch_size=8, max_steps=6, eval_every=2)
    engine = CountingEngine(spec, TextClassifierWorkload(), {})
    engine.setup({})
    engine.predict = lambda split, batch_size: pytest.fail("a batch-size probe evaluated the test split")
    result = TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.OK)
    r = train(engine, _data(), result, evaluate_quality=False)
    assert len(r.losses) == 6 and r.throughput["examples_per_s"] > 0  # trained and timed as any trial
    assert r.curve == [] and r.final_metric is None and r.time_to_target_s is None
    assert r.training.evaluation == "none: a trial that measures only training (a batch-size probe)"


def test_stop_at_target_and_epoch_budget():
    r = _run(max_epochs=5, eval_every=4, stop_at_target=True)
    assert r.steps_to_target == pytest.approx(10) and len(r.step_times_s) == 12  # stopped at the evaluation
    r = _run(max_epochs=1.5, eval_every=100)
    assert len(r.step_times_s) == 12  # 64 examples / batch 8 = 8 steps per epoch; 1.5 epochs
    assert [p["step"] for p in r.curve] == [0, 12]  # the start and the end of training are always evaluated


def test_a_first_evaluation_past_the_target_interpolates_from_the_untrained_model():
    r = _run(max_steps=8, eval_every=8, warmup_steps=0)  # step 0: 0.5, step 8: 0.7; target 0.75 not reached
    assert r.time_to_target_s is None and r.final_metric == pytest.approx(0.7)
    r = _run(max_steps=12, eval_every=12, warmup_steps=0)  # step 0: 0.5, step 12: 0.8
    assert r.steps_to_target == pytest.approx(12 * 0.25 / 0.3)
    assert r.time_to_target_s == pytest.approx(sum(r.step_times_s) * 0.25 / 0.3)


class FakeProbe:
    """A memory probe whose use the test sets: training holds 100 more bytes, evaluation 1000 more."""

    kind = "fake"

    def __init__(self) -> None:
        self.now, self.high, self.log = 5_000, 9_000, []  # the import peaked at 9,000

    def current(self):
        return self.now

    def peak(self):
        return self.high

    def reset_peak(self):
        self.high = self.now
        return True

    def use(self, extra: int) -> None:
        self.high = max(self.high, self.now + extra)


def _trained_with(probe: FakeProbe, held_by_first_evaluation: int = 0) -> TrialResult:
    """A trial of 8 steps, evaluated every 4, on ``probe``: each step peaks 100 above what is held, each evaluation
    1,000 above (its own peak), and the first evaluation leaves ``held_by_first_evaluation`` held."""

    class MemoryEngine(CountingEngine):
        def memory_probe(self):
            return probe

        def train_step(self, micro_batches):
            probe.use(100)
            return super().train_step(micro_batches)

        def predict(self, split, batch_size):
            probe.use(1_000)  # evaluation's peak stays out of the training figure
            if probe.now == 5_000:
                probe.now += held_by_first_evaluation
            return super().predict(split, batch_size)

    spec = RunSpec(workload="text_classifier", framework="torch", batch_size=8, max_steps=8, eval_every=4)
    engine = MemoryEngine(spec, TextClassifierWorkload(), {})
    engine.setup({})
    return train(engine, _data(), TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.OK))


def test_memory_baseline_training_increment_and_total_peak_are_told_apart():
    r = _trained_with(FakeProbe())
    assert r.memory_kind == "fake" and r.memory_baseline_bytes == 5_000
    assert r.memory_train_peak_bytes == 5_100 and r.memory_increment_bytes == 100
    assert r.peak_memory_bytes == 9_000  # the import's peak, not training's
    assert r.memory_increment_bytes < r.peak_memory_bytes


def test_what_the_step_0_evaluation_leaves_held_counts_against_training_as_a_later_evaluations_does():
    """The baseline is the built model: an evaluation that leaves memory held (TensorFlow's oneDNN caches after a
    batch of 256 held ≈ 950 MiB at the text classifier's `small`) is in the training increment, whichever evaluation
    it was. Taken after the step-0 evaluation, the baseline hid it, and TensorFlow's increment read a third of what
    it was without evaluation."""
    r = _trained_with(FakeProbe(), held_by_first_evaluation=500)
    assert r.curve[0]["step"] == 0  # the step-0 evaluation ran
    assert r.memory_baseline_bytes == 5_000  # before it
    assert r.memory_increment_bytes == 600  # training's 100 beside the 500 the evaluation left held


def test_gradient_accumulation_groups_micro_batches_into_one_step():
    engines: list = []
    r = _run(engines, batch_size=4, grad_accum=4, max_epochs=1, eval_every=100)
    # 64 examples / (4 × 4) = 4 optimizer steps per epoch, each over 4 micro-batches of 4
    assert engines[0].micro_sizes == [[4, 4, 4, 4]] * 4
    assert len(r.step_times_s) == 4 and r.examples_per_step == 16
    assert r.units_per_step == {"tokens": 96.0}  # 16 examples × 6 valid tokens


def test_a_step_larger_than_the_epoch_is_rejected():
    with pytest.raises(ValueError, match="batch_size × grad_accum = 128 examples; the training set has 64"):
        _run(batch_size=32, grad_accum=4, max_steps=1)


def test_resume_continues_from_the_checkpoint_without_repeating_steps(tmp_path):
    r = _run(max_steps=12, eval_every=4, checkpoint_every=8, checkpoint_dir=tmp_path)  # checkpoint at step 8
    assert len(r.step_times_s) == 12 and r.training.resumed_at_steps == []
    assert r.extras["tensorboard_error"] == "no TensorBoard events written: no writer in this test"
    resumed: list = []
    r2 = _run(resumed, max_steps=16, eval_every=4, checkpoint_every=8, checkpoint_dir=tmp_path)
    assert r2.training.resumed_at_steps == [8]
    assert len(resumed[0].micro_sizes) == 8  # only steps 9-16 ran in the resumed engine
    assert len(r2.step_times_s) == len(r2.losses) == 16 and r2.losses[8] == 1 / 9
    assert [p["step"] for p in r2.curve] == [0, 4, 8, 12, 16]


def test_steps_that_build_graphs_are_counted():
    r = _run(max_steps=12, eval_every=100, warmup_steps=0)
    assert r.training.graph_builds == 2 and r.training.graph_build_steps == [1, 5]
    excess = sum(max(0.0, r.step_times_s[i - 1] - r.steady_step_s) for i in (1, 5))
    assert r.training.graph_build_s == pytest.approx(excess)
