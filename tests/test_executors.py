"""The executor contract (:mod:`bakeoff.run.executors.executor`): whatever executes the trials, and in whatever order
they finish, the runner (:mod:`bakeoff.run.runner`) stores each result once, in this process, with its planned place
in the run; a resumed run skips them; ``--executor`` names an executor or exits 2 naming the accepted ones. No
framework: the trials' results are made here (a fraction of a second in all)."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from bakeoff.core.result import Setup, TrialResult
from bakeoff.core.spec import RunSpec, SpecError, Status
from bakeoff.results.store import Store
from bakeoff.run import runner
from bakeoff.run.executors import local, parse
from bakeoff.run.executors.executor import Done, Executor, Started, TrialJob, resources
from bakeoff.run.executors.local import LocalExecutor


def _specs() -> list[RunSpec]:
    return [RunSpec(workload="mnist", framework=framework, seed=seed, max_steps=2)
            for framework in ("torch", "jax") for seed in (0, 1)]


class LastFirst(Executor):
    """Takes every job at once (as a cluster's executor submits them) and hands the results back last first."""

    name = "last-first"

    def __init__(self) -> None:
        self.submitted: list[TrialJob] = []

    def run(self, jobs: Iterable[TrialJob], started: Started, done: Done) -> None:
        self.submitted = list(jobs)
        for job in self.submitted:
            started(job)
        for job in reversed(self.submitted):
            spec = job.spec
            done(job, TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.OK, extras={"node": "n1"}))


def test_results_that_come_back_in_any_order_are_each_stored_once_in_their_planned_place(tmp_path) -> None:
    executor, events = LastFirst(), []
    with Store(tmp_path / "r.sqlite") as store:
        summary = runner.run(_specs(), store, "s", progress=lambda event, spec, result: events.append(event),
                             executor=executor)
        stored = {r.key: r for r in store.results()}
    planned = {job.spec.key(): job.position for job in executor.submitted}
    assert len(executor.submitted) == 4 and sorted(planned.values()) == [1, 2, 3, 4]
    assert {r.key for r in summary.ran} == set(stored) == set(planned)
    assert {key: r.order.position for key, r in stored.items()} == planned  # the plan's place, not the finish's
    assert all(r.extras["node"] == "n1" for r in stored.values())
    assert events == ["queued"] * 4 + ["start"] * 4 + ["done"] * 4

    with Store(tmp_path / "r.sqlite") as store:  # resumed: nothing is handed to the executor again
        again = LastFirst()
        summary = runner.run(_specs(), store, "s", executor=again)
    assert again.submitted == [] and len(summary.skipped) == 4 and summary.ran == []


def test_a_trial_its_framework_cannot_run_is_recorded_here_and_never_reaches_the_executor(tmp_path) -> None:
    """PyTorch has no parameter-server strategy and so no launcher: the distributed suite's trial of it once reached
    the Slurm executor, whose resource request had no launcher to read, and the whole run stopped."""
    specs = [RunSpec(workload="text_classifier", framework=framework, execution=execution, max_steps=2,
                     parallelism="parameter_server", workers=2)
             for framework, execution in (("torch", "eager"), ("tensorflow", "graph"))]
    executor = LastFirst()
    with Store(tmp_path / "r.sqlite") as store:
        runner.run(specs, store, "s", executor=executor)
        stored = {r.spec["framework"]: r for r in store.results()}
    assert [job.spec.framework.value for job in executor.submitted] == ["tensorflow"]
    assert stored["torch"].status is Status.UNSUPPORTED and "parameter-server" in stored["torch"].reason
    assert stored["tensorflow"].status is Status.OK


def test_the_local_executor_runs_the_next_job_only_after_the_last_is_stored(tmp_path, monkeypatch) -> None:
    stored_before: list[int] = []

    def run_here(job: TrialJob) -> TrialResult:
        with Store(tmp_path / "r.sqlite", readonly=True) as store:
            stored_before.append(len(store.results()))
        spec = job.spec
        return TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.FAILED, reason="made here",
                           setup=Setup(started_at=1000.0 + job.position))

    monkeypatch.setattr(local, "run_here", run_here)
    with Store(tmp_path / "r.sqlite") as store:
        runner.run(_specs(), store, "s", executor=LocalExecutor())
        results = store.results()
    assert stored_before == [0, 1, 2, 3]
    record = results[0].execution.executor
    assert record["name"] == "local" and record["started_at"] > 1000 and "scheduling_s" in record


def test_executor_names_are_checked_before_anything_runs() -> None:
    assert isinstance(parse("local"), LocalExecutor) and isinstance(parse(" Local "), LocalExecutor)
    with pytest.raises(SpecError, match="unknown executor; accepted: local"):
        parse("kubernetes")
    with pytest.raises(SpecError, match="local takes no argument"):
        parse("local=here")


def test_a_trial_asks_for_the_cores_and_gpus_its_processes_use() -> None:
    whole = resources(RunSpec(workload="mnist", framework="torch", max_steps=2))
    assert (whole.cpus, whole.gpus, whole.gpus_required) == (None, 1, False)  # one process, every core
    two = resources(RunSpec(workload="mnist", framework="torch", max_steps=2, parallelism="data_parallel",
                            workers=2, threads=3, device="cpu"))
    assert (two.cpus, two.gpus) == (6, 0)  # 2 ranks × 3 threads
    ps = resources(RunSpec(workload="mnist", framework="tensorflow", max_steps=2, parallelism="parameter_server",
                           workers=2, threads=1, device="cuda"))
    assert (ps.cpus, ps.gpus_required) == (4, True)  # 1 thread each: chief, 2 workers, 1 parameter server


def test_device_cuda_is_checked_on_this_machine_only_when_the_trials_run_here(monkeypatch) -> None:
    monkeypatch.setattr(runner, "cuda_devices", lambda: (0, "no NVIDIA GPU is visible"))
    specs = [RunSpec(workload="mnist", framework="torch", max_steps=2, device="cuda")]
    with pytest.raises(SpecError, match="--device cuda: no NVIDIA GPU is visible"):
        runner.validate(specs)
    assert runner.validate(specs, here=False)  # a cluster's nodes have their own GPUs: its executor checks them
