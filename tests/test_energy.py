"""Energy from the machine's counters (issue #52): RAPL read from fake powercap trees (which domains count, wraps,
a root-only counter), NVML from a fake module (which GPUs, a GPU without the counter), and the training loop's
figures from counters a fake engine advances by known joules per step."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bakeoff.core import registry
from bakeoff.core.result import Energy, TrialResult
from bakeoff.core.spec import RunSpec, Status
from bakeoff.measure import energy
from bakeoff.measure.energy import NOT_MEASURED, EnergyMeter, describe, nvml_counters, rapl_counters
from bakeoff.results.store import Store
from bakeoff.trial.loop import energy_meter, train
from bakeoff.workloads.text_classifier.workload import TextClassifierWorkload
from test_training_loop import CountingEngine, _data, _run

MAX_RANGE = 262_143_328_850  # a Xeon's max_energy_range_uj


def zone(directory: Path, name: str, energy_uj: int, max_range: int = MAX_RANGE) -> Path:
    directory.mkdir(parents=True)
    (directory / "name").write_text(f"{name}\n")
    (directory / "energy_uj").write_text(f"{energy_uj}\n")
    (directory / "max_energy_range_uj").write_text(f"{max_range}\n")
    return directory


def powercap(root: Path) -> Path:
    """A client-and-server mix as Linux lays it out: every zone linked at the top and nested in its parent; package-0
    with core, uncore and dram subzones; psys (the platform); package-0 again through the MMIO interface."""
    devices = root / "devices"
    package = zone(devices / "intel-rapl" / "intel-rapl:0", "package-0", 1_000_000)
    zone(package / "intel-rapl:0:0", "core", 500_000)
    zone(package / "intel-rapl:0:1", "uncore", 100_000)
    zone(package / "intel-rapl:0:2", "dram", 2_000_000)
    zone(devices / "intel-rapl" / "intel-rapl:1", "psys", 9_000_000)
    zone(devices / "intel-rapl-mmio" / "intel-rapl-mmio:0", "package-0", 7_000_000)
    top = root / "class"
    top.mkdir()
    (top / "intel-rapl").symlink_to(devices / "intel-rapl")
    (top / "intel-rapl-mmio").symlink_to(devices / "intel-rapl-mmio")
    for z in ("intel-rapl:0", "intel-rapl:1"):
        (top / z).symlink_to(devices / "intel-rapl" / z)
    for z in ("intel-rapl:0:0", "intel-rapl:0:1", "intel-rapl:0:2"):
        (top / z).symlink_to(package / z)
    (top / "intel-rapl-mmio:0").symlink_to(devices / "intel-rapl-mmio" / "intel-rapl-mmio:0")
    return top


def test_rapl_counts_packages_and_dram_once_never_psys_core_uncore_or_the_mmio_copy(tmp_path):
    counters, unreadable = rapl_counters(powercap(tmp_path))
    assert [c.domain for c in counters] == ["rapl package-0", "rapl package-0 dram"]
    assert [c.read() for c in counters] == [1_000_000, 2_000_000]  # the MSR interface's package, not MMIO's 7 J
    assert unreadable == {}


def test_a_counter_that_wraps_is_added_back_and_counted(tmp_path):
    root = tmp_path / "powercap"
    package = zone(root / "intel-rapl:0", "package-0", MAX_RANGE - 328_850)
    meter = EnergyMeter(*rapl_counters(root))
    meter.begin()
    (package / "energy_uj").write_text("671150\n")  # past the range: 328,850 + 671,150 µJ = 1 J
    assert meter.end(0.5, steady=True) == pytest.approx(1.0)
    assert meter.figures(examples_per_step=4)["wraps"] == 1
    assert meter.figures(examples_per_step=4)["per_example_j"] == pytest.approx(0.25)


def test_a_root_only_counter_is_named_with_why_not_dropped(tmp_path, monkeypatch):
    root = powercap(tmp_path)
    real = Path.read_text

    def read_text(self, *args, **kwargs):
        if self.name == "energy_uj":  # as a non-root user reads it since Linux 5.10
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    meter = EnergyMeter.for_trial([], root=root)
    assert not meter.measuring
    assert meter.missing() == (f"rapl package-0: {root}/intel-rapl:0/energy_uj: {energy.ROOT_ONLY}; "
                               f"rapl package-0 dram: {root}/intel-rapl:0:2/energy_uj: {energy.ROOT_ONLY}")


def test_no_counters_says_so(tmp_path):
    meter = EnergyMeter.for_trial([], root=tmp_path)  # no powercap zones, a CPU trial: no NVML either
    assert meter.missing() == NOT_MEASURED == "no RAPL or NVML counters here"
    assert meter.figures(8) == {"missing": NOT_MEASURED, "domains": {}, "wraps": 0, "unreadable": {}, "not_read": {}}


class FakeNvml:
    """pynvml's calls bakeoff makes, over GPUs whose counters (mJ) the test sets; ``old`` GPUs lack the counter."""

    def __init__(self, millijoules: dict[int, int], old: tuple[int, ...] = ()) -> None:
        self.millijoules, self.old, self.started = millijoules, old, False

    def nvmlInit(self):  # noqa: N802 - pynvml's names
        self.started = True

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802
        return index

    def nvmlDeviceGetName(self, handle):  # noqa: N802
        return b"Tesla P100" if handle in self.old else "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):  # noqa: N802
        if handle in self.old:
            raise RuntimeError("Not Supported")
        return self.millijoules[handle]


def test_nvml_reads_the_trials_gpus_through_cuda_visible_devices():
    nvml = FakeNvml({2: 10_000, 3: 20_000})
    counters, unreadable = nvml_counters([1], nvml, environ={"CUDA_VISIBLE_DEVICES": "2,3"})
    assert [c.domain for c in counters] == ["nvml gpu 1 (NVIDIA H100 80GB HBM3)"]  # visible 1 is NVML's 3
    meter = EnergyMeter(counters, unreadable)
    meter.begin()
    nvml.millijoules[3] = 27_500
    assert meter.end(0.1, steady=True) == pytest.approx(7.5)
    assert nvml.started


def test_a_gpu_without_the_counter_is_named():
    counters, unreadable = nvml_counters([0], FakeNvml({}, old=(0,)), environ={})
    assert counters == [] and unreadable == {"nvml gpu 0": "no energy counter: Not Supported"}


def test_which_counters_a_process_reads(monkeypatch, tmp_path):
    nvml = FakeNvml({0: 0, 1: 0, 2: 0})
    real = energy.nvml_counters
    monkeypatch.setattr(energy, "nvml_counters", lambda gpus, _nvml=None, environ=None: real(gpus, nvml, environ))

    dev = tmp_path / "dev"
    dev.mkdir()
    for i in range(2):  # a machine with 2 GPUs
        (dev / f"nvidia{i}").touch()

    def read(spec: RunSpec, device: str, environ: dict) -> tuple[list[str], dict[str, str]]:
        meter = energy_meter(spec, {"device": device}, {energy.POWERCAP_ROOT_ENV: "/nonexistent", **environ}, dev)
        return [c.domain.split(" (")[0] for c in meter.counters], meter.not_read

    one = RunSpec(workload="mnist", framework="torch", max_steps=2)
    assert read(one, "cpu", {}) == ([], {})
    assert read(one, "cuda:0", {})[0] == ["nvml gpu 0"]  # one process, one GPU
    mirrored = RunSpec(workload="mnist", framework="tensorflow", parallelism="data_parallel", workers=2, max_steps=2)
    assert read(mirrored, "/GPU:0", {})[0] == ["nvml gpu 0", "nvml gpu 1"]  # one process over two replicas
    ddp = RunSpec(workload="mnist", framework="torch", parallelism="data_parallel", workers=2, max_steps=2)
    assert read(ddp, "cuda:1", {"LOCAL_RANK": "1"}) == (  # a rank: its own GPU; RAPL left to local rank 0
        ["nvml gpu 1"], {"rapl": "read by local rank 0 of this machine (the packages are shared)"})
    workers = RunSpec(workload="mnist", framework="tensorflow", parallelism="multi_worker", workers=3, max_steps=2,
                      batch_size=48)
    assert read(workers, "/GPU:0", {"BAKEOFF_LOCAL_RANK": "2"}) == ([], {  # GPU 0 again, round-robin
        "rapl": "read by local rank 0 of this machine (the packages are shared)",
        "nvml": "GPU 0 is read by local rank 0, whose GPU this rank shares"})


class Powered(CountingEngine):
    """Each training step moves the fake package counter by 2 J and DRAM by 0.5 J; evaluation uses none."""

    package: Path
    dram: Path

    def train_step(self, micro_batches):
        for path, joules in ((self.package, 2.0), (self.dram, 0.5)):
            path.write_text(str(int(path.read_text()) + int(joules * 1e6)))
        return super().train_step(micro_batches)


def _trained(root: Path, checkpoint_dir: Path | None = None, **kw) -> TrialResult:
    spec = RunSpec(workload="text_classifier", framework="torch", **{"batch_size": 8, **kw})
    engine = Powered(spec, TextClassifierWorkload(), {})
    engine.package, engine.dram = root / "intel-rapl:0" / "energy_uj", root / "intel-rapl:0:2" / "energy_uj"
    engine.setup({})
    result = TrialResult(spec=spec.to_dict(), key=spec.key(), status=Status.OK)
    return train(engine, _data(), result, checkpoint_dir=checkpoint_dir)


def test_the_loop_records_energy_per_step_per_example_on_the_curve_and_to_target(tmp_path, monkeypatch):
    monkeypatch.setenv(energy.POWERCAP_ROOT_ENV, str(powercap(tmp_path)))
    root = Path(str(tmp_path / "class"))
    r = _trained(root, max_steps=20, eval_every=4, warmup_steps=2, target=0.75)
    e = r.energy
    assert e.missing == "" and e.steady_steps == 17  # 20 steps less the first and 2 warm-up
    assert e.domains == {"rapl package-0": pytest.approx(34.0), "rapl package-0 dram": pytest.approx(8.5)}
    assert e.per_step_j == pytest.approx(2.5) and e.per_example_j == pytest.approx(2.5 / 8)
    assert e.train_j == pytest.approx(50.0)  # every step, the first and the warm-up included
    assert [p["train_j"] for p in r.curve] == pytest.approx([0.0, 10.0, 20.0, 30.0, 40.0, 50.0])
    # accuracy 0.5 + 0.1 per 4 steps: 0.7 at step 8, 0.8 at 12; 0.75 crossed half-way, at step 10: 25 J
    assert r.steps_to_target == pytest.approx(10.0) and e.to_target_j == pytest.approx(25.0)


def test_a_resumed_trial_keeps_counting_from_the_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv(energy.POWERCAP_ROOT_ENV, str(powercap(tmp_path / "tree")))
    root = tmp_path / "tree" / "class"
    ckpt = tmp_path / "ckpt"
    _trained(root, ckpt, max_steps=8, eval_every=4, checkpoint_every=4, target=0.75)
    r = _trained(root, ckpt, max_steps=16, eval_every=4, checkpoint_every=4, target=0.75)
    assert r.training.resumed_at_steps == [8]
    assert [p["train_j"] for p in r.curve] == pytest.approx([0.0, 10.0, 20.0, 30.0, 40.0])
    assert r.energy.train_j == pytest.approx(40.0) and r.energy.to_target_j == pytest.approx(25.0)


def test_without_counters_the_loop_says_why_and_the_curve_has_no_energy(tmp_path, monkeypatch):
    monkeypatch.setenv(energy.POWERCAP_ROOT_ENV, str(tmp_path))
    r = _run(max_steps=8, eval_every=4)
    assert r.energy.missing == NOT_MEASURED and r.energy.per_example_j is None
    assert all("train_j" not in p for p in r.curve)


def _measured(per_example_j: float, steps: int = 10, batch: int = 32) -> Energy:
    joules = per_example_j * batch * steps
    return Energy(steady_j=joules, steady_s=1.0, steady_steps=steps, per_step_j=joules / steps,
                  per_example_j=per_example_j, mean_w=joules, train_j=2 * joules, to_target_j=joules,
                  domains={"rapl package-0": joules})


def _with_energy(results: list[TrialResult]) -> list[TrialResult]:
    """The default bake-off with PyTorch's trials at 2 mJ an example, TensorFlow's on a machine with no counters."""
    for r in results:
        if r.status is Status.OK:
            torch = r.spec["framework"] == "torch"
            r.energy = _measured(0.002) if torch else Energy(missing=NOT_MEASURED)
    return results


def test_energy_is_a_criterion_off_by_default_and_usable_with_a_weight():
    from bakeoff.analysis.decide import decide
    from bakeoff.analysis.stats import summarise_groups
    from fake_results import default_results

    results = _with_energy(default_results())
    for r in results:
        if r.spec["framework"] == "tensorflow" and r.status is Status.OK:
            r.energy = _measured(0.004)
    plain = decide(summarise_groups(results))
    assert "energy" not in plain.weights and "energy" not in plain.excluded
    weighted = decide(summarise_groups(results), {"energy": 0.2})
    assert weighted.weights["energy"] == pytest.approx(0.2 / 1.2)
    assert weighted.head_to_head["energy"].ratio == pytest.approx(0.5)  # 2 mJ against 4 mJ an example
    assert weighted.head_to_head["energy"].outcome == "better"


def test_the_report_has_energy_columns_where_measured_and_says_where_not(tmp_path):
    from bakeoff.report.render import render_report
    from fake_results import default_results

    md = render_report(_with_energy(default_results()), tmp_path)["markdown"].read_text()
    table = md.split("### Configurations\n", 1)[1].split("\n#", 1)[0]
    header = next(line for line in table.splitlines() if line.startswith("| configuration"))
    assert "| energy / example | energy to target |" in header
    rows = {cells[0]: cells for line in table.splitlines()[2:] if line.startswith("|")
            for cells in [[c.strip() for c in line.strip("|").split(" | ")]]}
    energy_column = header.strip("|").split(" | ").index("energy / example")
    assert rows["torch/graph"][energy_column] == "2"  # mJ
    assert rows["tensorflow/graph"][energy_column].startswith("—")
    assert ("tensorflow/eager, tensorflow/graph: energy: not measured — no RAPL or NVML counters here." in table)


def test_with_no_counters_anywhere_the_report_says_so_in_one_line():
    from bakeoff.analysis.stats import summarise_groups
    from bakeoff.report.config_tables import _energy_note
    from fake_results import default_results

    results = default_results()
    for r in results:
        r.energy = Energy(missing=NOT_MEASURED)
    assert _energy_note(summarise_groups(results)) == "energy: not measured — no RAPL or NVML counters here."


def test_a_trial_describes_its_energy_in_one_line():
    record = dataclasses.replace(_measured(0.002), wraps=1, mean_w=64.0,
                                 unreadable={"rapl package-0 dram": f"energy_uj: {energy.ROOT_ONLY}"})
    assert describe(record) == (
        "energy: 2 mJ per training example, 64 W, 0.64 J to target over 10 steady steps, measured by the counters "
        "rapl package-0 (RAPL: the whole package, other processes on it included); 1 counter wrap-around added "
        "back; not read: rapl package-0 dram (energy_uj: permission denied (Linux makes energy_uj readable by root "
        "only since 2020))")
    assert describe(None) == "energy: not measured — stored before bakeoff measured energy"


def test_a_groups_energy_is_its_ranks_sum_each_counter_once():
    from bakeoff.run import launchers
    from test_launchers import _rank, _spec

    spec = _spec()
    plan = launchers.plan(spec, ["spec.json", "result.json", "", ""], {}, ports=[1], cores=2)
    ranks = [_rank(0, "aa"), _rank(1, "aa")]
    ranks[0].energy = _measured(0.003)  # GPU 0 and the machine's RAPL packages
    ranks[1].energy = dataclasses.replace(_measured(0.002), domains={"nvml gpu 1": 0.64})  # its GPU only
    merged = launchers.merge(spec, plan, ranks, launchers.GroupOutcome(codes={"torchrun": 0}))
    assert merged.energy.per_step_j == pytest.approx(0.096 + 0.064)  # 32 examples × (3 + 2) mJ
    assert merged.energy.per_example_j == pytest.approx(0.005)
    assert sorted(merged.energy.domains) == ["rank 0 rapl package-0", "rank 1 nvml gpu 1"]


def test_mlflow_says_why_energy_is_missing_not_that_the_target_was_missed():
    from bakeoff.results.mlflow_log import metrics
    from fake_results import trial

    unmeasured = trial("torch", "eager", time_to_target_s=None)
    unmeasured.energy = Energy(missing=NOT_MEASURED)
    assert metrics(unmeasured)[1]["energy_to_target_j"] == NOT_MEASURED
    never = trial("torch", "eager", time_to_target_s=None)
    never.energy = dataclasses.replace(_measured(0.002), to_target_j=None)
    assert metrics(never)[1]["energy_to_target_j"] == f"the target {never.target:g} was not reached"
    assert metrics(never)[0]["energy_per_example_j"] == 0.002


@pytest.mark.skipif(not registry.installed("torch"), reason="needs PyTorch")
def test_a_real_trial_records_energy_from_the_counters_it_is_pointed_at(tmp_path):
    """``bakeoff run`` in a subprocess, its powercap root a fake tree whose package counter a thread here advances
    (about 5 W): the trial records it, domain by domain, on its curve, and ``bakeoff show`` says so."""
    package = zone(tmp_path / "powercap" / "intel-rapl:0", "package-0", 1_000_000)
    stop = threading.Event()

    def advance() -> None:
        value = 1_000_000
        while not stop.is_set():
            value += 5_000  # µJ a millisecond
            (package / "energy_uj.tmp").write_text(str(value))
            os.replace(package / "energy_uj.tmp", package / "energy_uj")  # a reader never sees half a number
            time.sleep(0.001)

    writer = threading.Thread(target=advance, daemon=True)
    writer.start()
    env = {**os.environ, energy.POWERCAP_ROOT_ENV: str(tmp_path / "powercap")}
    cli = [sys.executable, "-m", "bakeoff.cli"]
    try:
        done = subprocess.run([*cli, "run", "--workload", "mnist", "--framework", "torch", "--execution", "eager",
                               "--max-steps", "5", "--eval-every", "5", "--batch-size", "8", "--no-report", "--store",
                               "r.sqlite"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    finally:
        stop.set()
        writer.join()
    assert done.returncode == 0, done.stderr
    with Store(tmp_path / "r.sqlite", readonly=True) as store:
        [result] = store.results()
    e = result.energy
    assert e.missing == "" and list(e.domains) == ["rapl package-0"] and e.steady_steps == 1  # 5 - first - 3 warm-up
    assert e.train_j > 0 and e.train_j >= e.steady_j >= 0
    assert [p["train_j"] for p in result.curve] == [0.0, e.train_j]  # step 0 and step 5
    shown = subprocess.run([*cli, "show", "--store", "r.sqlite", result.key], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=120)
    assert shown.stdout.splitlines()[1].startswith("energy: ") and "measured by the counters rapl package-0" in \
        shown.stdout.splitlines()[1]
