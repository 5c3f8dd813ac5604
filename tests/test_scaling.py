"""Scaling analysis and its report section, from hand-made distributed results (no framework needed)."""

from __future__ import annotations

import pytest

from bakeoff.analysis.scaling import scaling_rows, scaling_sentence
from bakeoff.analysis.stats import summarise_groups
from bakeoff.core.result import Distributed
from bakeoff.measure import sync
from bakeoff.report.render import render_report
from fake_results import repeats, respec


def _distributed(results, parallelism: str, workers: int, sync_s: float | None = 0.01, cores: int = 16,
                 identical: bool = True):
    out = []
    for r in results:
        r = respec(r, parallelism=parallelism, workers=workers)
        r.environment["cores"] = cores
        r.distributed = Distributed(
            strategy="DistributedDataParallel (gloo)", replicas=workers, startup_s=6.5, launch_s=1.2,
            sync={"method": "a separately timed all-reduce of the gradients", "per_step_s": sync_s,
                  "allreduces_per_step": 1.0},
            replicas_identical=identical if workers > 1 else None,
            ranks=[{"rank": i, "peak_memory_bytes": (300 + 10 * i) * 2**20} for i in range(workers)],
            warnings=[f"{workers} replicas on {cores} CPU cores: ..."] if workers > cores else [])
        out.append(r)
    return out


def _torch(examples_per_s, **kwargs):
    return repeats("torch", "eager", examples_per_s, [None] * len(examples_per_s),
                   final_metric=[0.8] * len(examples_per_s), **kwargs)


def test_efficiency_is_throughput_over_n_times_the_one_replica_run() -> None:
    results = [*_distributed(_torch([500, 500, 500]), "data_parallel", 1),
               *_distributed(_torch([800, 800, 800]), "data_parallel", 2),
               *_torch([600, 600, 600])]
    rows = scaling_rows(summarise_groups(results))
    by_workers = {r.workers: r for r in rows}
    assert sorted(by_workers) == [1, 2]
    # 2 replicas against the same strategy with 1 replica (not the single-device run): 800 / (2 × 500)
    assert by_workers[2].efficiency == pytest.approx(0.8)
    assert by_workers[2].baseline.label == "torch/eager/data_parallelx1"
    low, high = by_workers[2].efficiency_interval
    assert low <= 0.8 <= high
    # 1 replica against the single-device run: what the strategy itself costs
    assert by_workers[1].efficiency == pytest.approx(500 / 600)
    assert by_workers[2].replicas_identical is True
    assert by_workers[2].strategy == "DDP"


def test_one_run_a_side_gives_an_efficiency_without_an_interval() -> None:
    """#51: a 95% interval was printed from one run of each configuration (its steps' spread, not the runs')."""
    results = [*_distributed(_torch([500]), "data_parallel", 1), *_distributed(_torch([800]), "data_parallel", 2)]
    rows = {r.workers: r for r in scaling_rows(summarise_groups(results))}
    assert rows[2].efficiency == pytest.approx(800 / (2 * 500)) and rows[2].efficiency_interval is None


def test_without_a_one_replica_run_the_single_device_run_is_the_baseline() -> None:
    results = [*_distributed(_torch([700, 700, 700]), "data_parallel", 2), *_torch([500, 500, 500])]
    (row,) = scaling_rows(summarise_groups(results))
    assert row.baseline.label == "torch/eager"
    assert row.efficiency == pytest.approx(0.7)


def test_sentence_names_efficiency_sync_share_and_shared_cores() -> None:
    results = [*_distributed(_torch([700, 700, 700]), "data_parallel", 2, sync_s=32 / 700 * 0.25, cores=2),
               *_torch([500, 500, 500])]
    for r in results:
        r.environment["cores"] = 2  # the single-device runs too: one machine
    configs = summarise_groups(results)
    sentence = scaling_sentence(scaling_rows(configs), configs)
    assert "PyTorch DDP (eager) at 2 replicas runs at 70% scaling efficiency against one device" in sentence
    assert "one step's gradient all-reduce timed alone 25% of a step" in sentence
    assert "n = 3 vs 3." in sentence
    one = summarise_groups([*_distributed(_torch([700]), "data_parallel", 2), *_torch([500, 500, 500])])
    assert "provisional (n = 1 vs 3; 3 runs per side needed)" in scaling_sentence(scaling_rows(one), one)
    assert "On 2 CPU cores shared by 2 replicas" in sentence


def test_no_distributed_trials_no_scaling() -> None:
    configs = summarise_groups(_torch([500, 510, 520]))
    assert scaling_rows(configs) == []
    assert scaling_sentence([], configs) is None


def test_report_has_a_scaling_table_and_chart(tmp_path) -> None:
    results = [*_distributed(_torch([500, 500, 500]), "data_parallel", 1),
               *_distributed(_torch([800, 800, 800]), "data_parallel", 2, identical=False),
               *_torch([600, 600, 600]),
               *repeats("tensorflow", "graph", [400, 410, 420], [None] * 3, final_metric=[0.8] * 3)]
    paths = render_report(results, tmp_path)
    text = paths["markdown"].read_text()
    assert "### Scaling" in text
    row = next(line for line in text.splitlines() if line.startswith("| torch/eager/data_parallelx2 | DDP"))
    assert "| 2 |" in row and "80%" in row and "**no**" in row  # replicas differed: shown, not hidden
    assert "Scaling: PyTorch DDP (eager) at 2 replicas runs at 80% scaling efficiency" in text
    assert "All-reduce alone: one step's gradient synchronisation, timed on its own after training" in text
    assert "DDP: a separately timed all-reduce of the gradients." in text
    assert "| all-reduce alone (ms) | all-reduce alone / step (%) |" in text
    assert paths["scaling"].read_bytes()[:4] == b"\x89PNG"
    plain = render_report(_torch([500, 510, 520]), tmp_path / "plain")
    assert "scaling" not in plain and "### Scaling" not in plain["markdown"].read_text()


def test_the_common_sync_method_is_said_once_and_each_frameworks_call_after_it(tmp_path) -> None:
    torch_sync = sync.figures([0.002] * 3, 400, "all_reduce of DDP's buckets")
    tf_sync = sync.figures([0.003] * 3, 400, "two reductions through strategy.run")
    results = [*_distributed(_torch([500, 500, 500]), "data_parallel", 1),
               *_distributed(_torch([800, 800, 800]), "data_parallel", 2),
               *_distributed(repeats("tensorflow", "graph", [400] * 3, [None] * 3, final_metric=[0.8] * 3),
                             "none", 1),
               *_distributed(repeats("tensorflow", "graph", [700] * 3, [None] * 3, final_metric=[0.8] * 3),
                             "data_parallel", 2)]
    for r in results:
        tensorflow = r.run_spec.framework == "tensorflow"
        r.distributed.sync = {**(tf_sync if tensorflow else torch_sync), "allreduces_per_step": 1.0}
    text = " ".join(render_report(results, tmp_path)["markdown"].read_text().split())
    assert text.count(sync.DEFINITION) == 1
    assert f"The same method in every framework: {sync.DEFINITION}. What each one's timed call ran:" in text
    assert "DDP: all_reduce of DDP's buckets." in text
    assert "MirroredStrategy: two reductions through strategy.run." in text


def test_accumulation_is_compared_with_one_micro_batch_per_step() -> None:
    step = 32 / 700
    results = [*_distributed(_torch([700, 700, 700]), "data_parallel", 2, sync_s=0.2 * step),
               *[respec(r, grad_accum=2) for r in _distributed(_torch([700, 700, 700]), "data_parallel", 2,
                                                                sync_s=0.1 * step)],
               *_torch([500, 500, 500])]
    for r in results[3:6]:
        r.distributed.sync["per_step_s"] = 0.1 * r.steady_step_s
    configs = summarise_groups(results)
    sentence = scaling_sentence(scaling_rows(configs), configs)
    assert ("One step's gradient all-reduce timed alone, against the step, accumulating micro-batches: PyTorch DDP "
            "at 2 replicas: 20% with 1 micro-batch per step, 10% with 2, 1 all-reduce per step.") in sentence


def test_xla_under_a_strategy_that_compiles_less_than_the_step_is_named(tmp_path) -> None:
    results = [*_distributed(repeats("tensorflow", "xla", [500] * 3, [None] * 3, final_metric=[0.8] * 3),
                             "data_parallel", 2),
               *repeats("tensorflow", "xla", [400] * 3, [None] * 3, final_metric=[0.8] * 3)]
    for r in results[:3]:
        r.distributed.xla_scope = "each replica's forward and backward (local_sums)"
    configs = summarise_groups(results)
    (row,) = scaling_rows(configs)
    assert row.xla_scope == "each replica's forward and backward (local_sums)"
    sentence = scaling_sentence([row], configs)
    assert "XLA compiled less than the whole step in tensorflow/xla/data_parallelx2" in sentence
    text = render_report(results, tmp_path)["markdown"].read_text()
    assert ("tensorflow/xla/data_parallelx2: XLA compiled each replica's forward and backward (local_sums), not the "
            "whole step as on one device.") in text


def test_parameter_servers_are_not_strong_scaling_and_their_pull_and_push_is_no_share_of_a_step(tmp_path) -> None:
    tf = [*_distributed(repeats("tensorflow", "graph", [900] * 3, [None] * 3, final_metric=[0.8] * 3),
                        "parameter_server", 2, sync_s=0.5),
          *repeats("tensorflow", "graph", [500] * 3, [None] * 3, final_metric=[0.8] * 3)]
    configs = summarise_groups(tf)
    (row,) = scaling_rows(configs)
    assert row.efficiency == pytest.approx(0.9)  # 900 against 2 x 500: N workers against N times one device
    assert row.config.value("sync_s") == 0.5 and row.config.value("sync_share") is None  # steps overlap
    sentence = scaling_sentence([row], configs)
    assert "each worker taking whole global batches, steps in flight at once (not strong scaling)" in sentence
    assert "timed alone" not in sentence
    text = render_report(tf, tmp_path)["markdown"].read_text()
    assert "its efficiency is N workers' throughput against N times one device's, not strong scaling" in text
