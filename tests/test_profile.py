"""Profiles on request (``bakeoff run --profile``): the framework's own trace of a few steps after training, which
changes no recorded figure, and whose failure does not fail the trial."""

from __future__ import annotations

import contextlib
import gzip
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bakeoff.core import registry
from bakeoff.core.contract import TrialRequest
from bakeoff.core.result import TrialResult
from bakeoff.core.spec import RunSpec, Status
from bakeoff.engines.base import Unsupported
from bakeoff.run.executors import local
from bakeoff.trial import profile
from bakeoff.trial.loop import next_steps, train
from bakeoff.workloads.text_classifier.workload import TextClassifierWorkload
from test_training_loop import CountingEngine, _data


class ProfilingEngine(CountingEngine):
    """Records the labels of every step it trains on, and profiles into a file (or fails where told)."""

    def setup(self, weights):
        super().setup(weights)
        self.trained: list[list[list[int]]] = []
        self.marked: list[int] = []
        self.fail: str | None = None

    def train_step(self, micro_batches):
        self.trained.append([b["labels"].tolist() for b in micro_batches])
        return super().train_step(micro_batches)

    def profiler(self, directory):
        if self.fail == "unsupported":
            raise Unsupported("no profiler here")
        return self._trace(directory)

    @contextlib.contextmanager
    def _trace(self, directory):
        if self.fail == "start":
            raise RuntimeError("profiler busy")
        engine = self

        class Trace:
            tool = "fake"

            def step(self, number):
                engine.marked.append(number)
                return contextlib.nullcontext()

        yield Trace()
        if self.fail == "stop":
            raise OSError("disk full")
        (directory / "trace.pt.trace.json").write_text("{}")


def _trained(max_steps: int, grad_accum: int = 1) -> tuple[ProfilingEngine, TrialResult]:
    spec = RunSpec(workload="text_classifier", framework="torch", batch_size=8, max_steps=max_steps,
                   eval_every=100, grad_accum=grad_accum)
    engine = ProfilingEngine(spec, TextClassifierWorkload(), {})
    engine.setup({})
    result = TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.OK)
    return engine, train(engine, _data(), result)


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_next_steps_are_the_steps_a_longer_run_takes(grad_accum):
    # 64 examples in batches of 8: 8 micro-batches an epoch; 4 steps of 2 end the epoch, the next ones cross it
    longer, _ = _trained(7, grad_accum)
    shorter, _ = _trained(4, grad_accum)
    steps = next_steps(shorter, _data())
    assert [[b["labels"].tolist() for b in next(steps)] for _ in range(3)] == longer.trained[4:7]


def test_profile_runs_warmup_then_marked_steps_and_changes_no_figure(tmp_path):
    engine, result = _trained(4)
    before = json.dumps(result.to_dict(), sort_keys=True)
    request = profile.Request(tmp_path / "p", steps=3)
    profile.profile(engine, next_steps(engine, _data()), request, result, first_step=5)
    record, result.profile = result.profile, None
    assert json.dumps(result.to_dict(), sort_keys=True) == before  # only the profile section was added
    assert len(engine.trained) == 4 + profile.WARMUP_STEPS + 3
    assert engine.marked == [6, 7, 8]  # step 5 is the unprofiled warm-up
    assert record.files == {"trace.pt.trace.json": 2} and record.tool == "fake" and record.error == ""
    assert record.steps == 3 and record.first_step == 6 and len(record.profiled_step_s) == 3
    assert record.view == [f"open {tmp_path / 'p' / 'trace.pt.trace.json'} in https://ui.perfetto.dev "
                           "(or chrome://tracing)"]
    assert profile.describe(record).startswith(f"{tmp_path / 'p'} (fake, 3 steps, ")


@pytest.mark.parametrize(("fail", "steps_taken", "message"), [
    ("start", 1 + 3, "the profiler did not start: RuntimeError: profiler busy"),  # steps taken: ranks wait on them
    ("stop", 1 + 3, "no profile written into {p}: OSError: disk full"),
    ("unsupported", 0, "no profile written into {p}: Unsupported: no profiler here"),  # before any step
])
def test_a_profiler_failure_is_recorded_not_raised(tmp_path, fail, steps_taken, message):
    engine, result = _trained(4)
    engine.fail = fail
    profile.profile(engine, next_steps(engine, _data()), profile.Request(tmp_path / "p", 3), result, 5)
    assert result.profile.files == {} and result.status is Status.OK
    assert result.profile.error == message.format(p=tmp_path / "p") == profile.describe(result.profile)
    assert len(engine.trained) == 4 + steps_taken


def test_request_travels_in_the_trial_request(tmp_path):
    request = profile.Request(tmp_path, 7)
    spec = RunSpec(workload="mnist", framework="torch", max_steps=2)
    asked = TrialRequest.read(TrialRequest(spec, tmp_path / "result.json", **request.asked()).write(
        tmp_path / "request.json"))
    assert profile.Request.from_trial(asked) == request
    assert profile.Request.from_trial(TrialRequest(spec, tmp_path / "result.json")) is None
    with pytest.raises(ValueError, match="profile steps must be a positive integer, got 0"):
        profile.Request(tmp_path, 0)


# --- real trial processes ---------------------------------------------------------------------------------------

FRAMEWORKS = [pytest.param(fw, marks=pytest.mark.skipif(not registry.installed(fw), reason=f"needs {fw}"))
              for fw in ("torch", "tensorflow", "jax")]

EXPECTED = {  # what each framework's profiler writes, as (pattern, a check of the content)
    "torch": [("*.pt.trace.json", lambda p: any(e.get("name") == "ProfilerStep#6"
                                                for e in json.loads(p.read_text())["traceEvents"]))],
    "tensorflow": [("plugins/profile/*/*.xplane.pb", lambda p: b"train" in p.read_bytes())],
    "jax": [("plugins/profile/*/*.xplane.pb", lambda p: b"train" in p.read_bytes()),
            ("plugins/profile/*/perfetto_trace.json.gz", lambda p: b"traceEvents" in gzip.decompress(p.read_bytes()))],
}


def _spec(framework: str) -> RunSpec:
    execution = "eager" if framework == "torch" else "graph"  # each framework's production mode
    return RunSpec(workload="mnist", framework=framework, execution=execution, max_steps=4, eval_every=2,
                   batch_size=32, device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_profiled_trial_writes_the_trace_and_measures_the_same(tmp_path, framework):
    spec = _spec(framework)
    keep = framework == "torch"  # the kept model is the trained one, not the profiled one
    plain = local.run_one(spec, 300, tmp_path / "logs", keep_dir=tmp_path / "plain-model" if keep else None)
    folder = tmp_path / "profile"
    profiled = local.run_one(spec, 300, tmp_path / "logs", keep_dir=tmp_path / "profiled-model" if keep else None,
                              profile=profile.Request(folder, steps=3))
    assert plain.status is profiled.status is Status.OK, (plain.reason, profiled.reason)
    assert plain.profile is None
    record = profiled.profile
    assert record.directory == str(folder) and record.steps == 3 and record.first_step == 6
    for pattern, check in EXPECTED[framework]:
        [path] = folder.glob(pattern)
        assert record.files[str(path.relative_to(folder))] == path.stat().st_size > 0
        assert check(path), path
    assert record.view
    # off the training clock: the same steps, losses (bit for bit), curve and steady-step bookkeeping
    assert profiled.losses == plain.losses and len(profiled.step_times_s) == len(plain.step_times_s) == 4
    assert [p["metric"] for p in profiled.curve] == [p["metric"] for p in plain.curve]
    assert profiled.train_s == sum(profiled.step_times_s) and profiled.final_metric == plain.final_metric
    assert profiled.training.steady_steps == plain.training.steady_steps
    if keep:
        with np.load(tmp_path / "plain-model" / "weights.npz") as a, \
                np.load(tmp_path / "profiled-model" / "weights.npz") as b:
            assert all(np.array_equal(a[k], b[k]) for k in a.files)


@pytest.mark.slow
@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
def test_a_profile_that_cannot_be_written_leaves_the_trial_ok(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    result = local.run_one(_spec("torch"), 300, tmp_path / "logs",
                            profile=profile.Request(tmp_path / "file" / "profile", steps=2))
    assert result.status is Status.OK, result.reason
    assert result.profile.files == {}
    assert result.profile.error.startswith(f"no profile written into {tmp_path / 'file' / 'profile'}: "
                                           "NotADirectoryError")


@pytest.mark.slow
@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
def test_bakeoff_run_profile_reaches_the_trial_and_says_where(tmp_path):
    args = [sys.executable, "-m", "bakeoff.cli", "run", "--workload", "mnist", "--framework", "torch",
            "--execution", "eager", "--max-steps", "2", "--eval-every", "2", "--batch-size", "32", "--store",
            "r.sqlite", "--no-report", "--profile", "--profile-steps", "2"]
    r = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    folder = Path("r") / "profiles" / "mnist" / "tiny" / "torch-eager" / "seed0"  # as the TensorBoard run
    [trace] = (tmp_path / folder).glob("*.pt.trace.json")
    said = " ".join(r.stdout.split())
    assert f"profile mnist/tiny torch/eager seed 0: {folder} (torch.profiler, 2 steps, " in said
    [(raw,)] = sqlite3.connect(tmp_path / "r.sqlite").execute("SELECT result FROM trials").fetchall()
    stored = json.loads(raw)
    assert stored["profile"]["files"] == {trace.name: trace.stat().st_size}
    assert "profile" not in stored["spec"]  # no part of the trial's key

    again = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "no profile for 1 trial whose stored result was reused (mnist/tiny torch/eager seed 0): add --fresh " \
           "to re-run them with the profiler" in " ".join(again.stdout.split())
