"""How ``store_schema3.sqlite`` was written: by bakeoff at b06b4d1 (schema 3), whose own code put every figure that
schema 4 types (distributed, MFU, ceiling probe, run order, adaptive repeats) in ``extras``. Kept as the record
of what the fixture holds; it runs only against that bakeoff:

    git archive b06b4d1 src tests/fake_results.py | tar -x -C /tmp/b06
    PYTHONPATH=/tmp/b06/src:/tmp/b06/tests python tests/data/write_store_schema3.py tests/data/store_schema3.sqlite

An adaptive run (3 runs, up to 5) of the text classifier in order seed 7: PyTorch eager and TensorFlow graph on
one device, each with its MFU (``ceiling.utilisation`` against a ceiling the first trial probed, kept in the
store as the runner keeps it); PyTorch eager under DDP over 2 ranks, twice (the launcher's own ``merge`` of two rank
results carrying the engine's figures and ``measure.sync``'s record); one TensorFlow parameter-server trial; one
multi-worker trial whose worker failed (the runner's failure record).
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import fake_results as fake
from bakeoff.core.result import SCHEMA_VERSION
from bakeoff.core.spec import RunSpec, Status
from bakeoff.measure import ceiling, sync
from bakeoff.results.store import Store
from bakeoff.run import adaptive, launchers
from bakeoff.run.executors import local

ARGS = ["spec.json", "result.json", "", ""]
PROBE = {"status": "ok", "n": 1024, "repeats": 20, "threads": 0, "load_average_1m_at_start": 0.42,
         "precisions": {"fp32": {"median_flops_per_s": 1.0e11, "samples": [0.9e11, 1.0e11, 1.1e11], "n": 1024},
                        "bf16": {"missing": "RuntimeError: no bf16 matmul here"}},
         "wall_s": 1.25, "where": "trial process"}


def _ddp(result, rank: int, digest: str):
    r = fake.respec(result, parallelism="data_parallel", workers=2)
    r.extras["launch_s"] = 0.8 + 0.1 * rank
    r.extras["rank"] = rank
    r.extras["distributed"] = {
        "strategy": "DistributedDataParallel (gloo), 2 ranks", "backend": "gloo", "setup_s": 0.31,
        "setup_parts_s": {"process_group_s": 0.3, "ddp_wrap_s": 0.01},
        "sync": sync.figures([0.004, 0.005, 0.006], 4_938_268, "torch.distributed.all_reduce of buffers shaped as "
                             "DDP's gradient bucket of the last step ([1234567] elements)", allreduces_per_step=1.0,
                             buckets=1, rounds_per_step=1.0, loss_allreduces_per_step=1),
        "replica_weights_sha256": [digest]}
    return r


def main(path: Path) -> None:
    assert SCHEMA_VERSION == 3, "run with bakeoff at b06b4d1 (see the module docstring)"
    path.unlink(missing_ok=True)
    plan = adaptive.record(3, 5)
    single = [*fake.repeats("torch", "eager", [940, 950, 960], [2.0, 2.1, 2.2], final_metric=[0.80] * 3),
              *fake.repeats("tensorflow", "graph", [510, 520, 530], [3.9, 4.1, 4.3], final_metric=[0.81] * 3)]
    ddp = []
    for i, rate in enumerate([1500, 1600]):
        ranks = [_ddp(fake.trial("torch", "eager", repeat=i, examples_per_s=rate, time_to_target_s=1.5), rank, "ab")
                 for rank in (0, 1)]
        spec = ranks[0].run_spec
        group = launchers.plan(spec, ARGS, {}, ports=[29500], cores=2)
        merged = launchers.merge(spec, group, ranks, launchers.GroupOutcome(
            codes={"torchrun": 0}, peak_rss_bytes={"torchrun": 90 * 2**20}))
        merged.extras["log"] = f"logs/ddp-{i}.log"
        ddp.append(merged)
    ps = fake.respec(fake.trial("tensorflow", "graph", examples_per_s=700), parallelism="parameter_server", workers=2)
    ps.extras["distributed"] = {
        "strategy": "ParameterServerStrategy (2 workers, 1 parameter server)", "setup_s": 1.5, "servers_wait_s": 0.7,
        "sync": {"method": "no all-reduce: pull and push", "per_step_s": 0.012, "samples_s": [0.011, 0.012, 0.013],
                 "dispatch_s": 0.001, "allreduces_per_step": 0.0, "transfers_per_step": 24, "bytes_per_step": 9876},
        "asynchronous": {"in_flight": 2, "step_losses": [0.69, 0.68]}, "replica_weights_sha256": ["cd"]}
    group = launchers.plan(ps.run_spec, ARGS, {}, ports=[1, 2, 3, 4], cores=2)
    ps = launchers.merge(ps.run_spec, group, [ps] * group.ranks, launchers.GroupOutcome(
        codes={"worker 0": 0, "worker 1": 0, "ps 0": None}, peak_rss_bytes={"worker 0": 400 * 2**20,
                                                                           "ps 0": 200 * 2**20}))
    spec = RunSpec(workload="text_classifier", framework="tensorflow", execution="graph", parallelism="multi_worker",
                   workers=2, max_steps=fake.STEPS, batch_size=fake.BATCH, eval_every=10,
                   content=fake.content("tensorflow"))
    failed = local._failure(spec, Status.FAILED, "worker 1 of the trial's 2 processes exited with code 1")
    failed.extras["distributed"] = {"launcher": "tf_config", "first_failure": "worker 1 of the trial's 2 processes",
                                    "exit_codes": {"worker 0": -9, "worker 1": 1},
                                    "logs": ["logs/mw.log", "logs/mw.worker1.log"]}
    results = [*single, *ddp, ps, failed]
    with Store(path) as store:
        for position, result in enumerate(results, 1):
            result.annotate(plan)
            result.extras["order"] = {"position": position, "of": len(results), "seed": 7}
            wanted = ceiling.need(result.run_spec)
            if result.status is Status.OK:
                kept = store.ceiling(wanted.key) if wanted.key else None
                if kept is None and wanted.key:
                    result.extras["ceiling_probe"] = dict(PROBE)  # the trial probed, as in_trial records it
                result.extras["mfu"] = local._utilisation(store, wanted, kept, result)
            store.put(result, "adaptive")
    with sqlite3.connect(path) as db:
        db.execute("VACUUM")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
