"""scripts/gpu-check (issue #28) without a GPU: the dry run lists every CUDA path with a command bakeoff's own
parser accepts; a real run on a machine with no GPU exits 2 saying why; and the judges fail a trial or a
deployment row that did not run on a GPU, or an fp32 trial whose TF32 was not off as read."""

from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_the_dry_run_lists_every_path_with_commands_bakeoff_accepts(tmp_path):
    from bakeoff.cli.main import build_parser

    done = _run("--dry-run", "--gpus", "8", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("29 paths for 8 GPU(s)")
    for path in ("torch fp32, TF32 off", "tensorflow fp16", "jax bf16", "torch.compile on the GPU",
                 "tf.function + XLA on the GPU", "jax.jit on the GPU", "data parallel x 8: DDP over NCCL",
                 "data parallel x 8: MirroredStrategy", "data parallel x 8: JAX mesh",
                 "multi-worker x 2 on this machine: torch", "fp16 under MirroredStrategy x 8",
                 "deploy torch-tensorrt, torch-onnx (ONNX Runtime CUDA), aoti", "matmul ceiling: jax",
                 "energy: NVML counter, plausible per example", "energy x 8: DDP, each rank its own GPU",
                 "Slurm --gpus-per-node=1", "Ray num_gpus=1", "Slurm --gpus-per-node=2: multi-worker x 2",
                 "Ray num_gpus=2: multi-worker x 2"):
        assert any(path in line for line in lines), path
    parser = build_parser()
    for line in lines[1:]:
        command = shlex.split(line.split(maxsplit=1)[1].split(sys.executable, 1)[1])
        if command[:2] == ["-m", "bakeoff.cli"]:
            args = parser.parse_args(command[2:])  # exits (SystemExit) on a flag bakeoff does not take
            assert args.device == "cuda"
    assert not (tmp_path / "out").exists()  # a dry run writes nothing
    one = _run("--dry-run", "--gpus", "1")  # one GPU: no data parallel, no multi-worker
    assert one.stdout.startswith("19 paths for 1 GPU(s)") and "data parallel" not in one.stdout


def test_a_run_on_a_machine_without_a_gpu_exits_2_saying_why():
    done = _run()
    assert done.returncode == 2
    assert "gpu-check: no NVIDIA GPU on this machine" in done.stderr and done.stdout == ""


def test_the_judges_fail_what_did_not_run_on_a_gpu():
    gc = _module()
    fp32 = next(c for c in gc.checks(2) if c.path == "torch fp32, TF32 off")
    ok = {"status": "ok", "peak_memory_bytes": 1, "environment": {"device": "cuda:0", "tf32": False}}
    assert gc.judge_trial(fp32, [ok]) == ""
    assert gc.judge_trial(fp32, [{**ok, "environment": {"device": "cpu", "tf32": False}}]) == \
        "ran on 'cpu', not a GPU"
    assert gc.judge_trial(fp32, [{**ok, "environment": {"device": "cuda:0", "tf32": True}}]).startswith("TF32 not off")
    assert gc.judge_trial(fp32, [{"status": "unsupported", "reason": "no GPU", "environment": {}}]) == \
        "unsupported: no GPU"
    rows = [{"format": "torch-onnx", "status": "ok", "inference": {"device": "cuda:0", "parity": "ok"}},
            {"format": "aoti", "status": "ok", "inference": {"device": "cpu", "parity": "ok"}}]
    assert gc.judge_deploy(rows) == "aoti ran on 'cpu', not a GPU"
    assert gc.judge_deploy(rows[:1]) == ""


def test_the_energy_judge_wants_each_gpus_counter_and_a_power_between_idle_and_the_board_limit():
    gc = _module()
    one = next(c for c in gc.checks(2) if c.path == "energy: NVML counter, plausible per example")
    bounds = {0: (60.0, 700.0), 1: (60.0, 700.0)}  # an H100 SXM: about 60 W idle, 700 W board limit
    # 10 steady steps of 512 examples over 2 s at 300 W: 600 J
    energy = {"missing": "", "steady_j": 600.0, "steady_s": 2.0, "steady_steps": 10, "per_example_j": 600 / 5120,
              "domains": {"nvml gpu 0 (NVIDIA H100 80GB HBM3)": 600.0}}
    trial = {"examples_per_step": 512, "energy": energy}
    assert gc.judge_energy(one, [trial], bounds) == ""
    idle = {**energy, "domains": {"nvml gpu 0 (NVIDIA H100 80GB HBM3)": 50.0}}  # 25 W: below idle, a counter unread
    assert gc.judge_energy(one, [{**trial, "energy": idle}], bounds) == (
        "nvml gpu 0 (NVIDIA H100 80GB HBM3): 50 J over 2 s of steady steps is 25 W, outside 48–770 W (idle 60 W, "
        "board limit 700 W)")
    rapl_only = {**energy, "domains": {"rapl package-0": 600.0}}
    assert gc.judge_energy(one, [{**trial, "energy": rapl_only}], bounds) == (
        "0 NVML counters read, not 1: ['rapl package-0']")
    assert gc.judge_energy(one, [{**trial, "energy": {"missing": "pynvml is not installed"}}], bounds) == (
        "energy not measured: pynvml is not installed")


def test_power_bounds_read_each_gpus_idle_counter_and_its_board_limit():
    gc = _module()

    class Nvml:
        readings = iter([1_000_000, 2_000_000, 1_000_000 + 0, 2_000_000 + 0])  # before, before, after, after

        def nvmlInit(self):  # noqa: N802 - pynvml's names
            pass

        def nvmlDeviceGetCount(self):  # noqa: N802
            return 2

        def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
            return i

        def nvmlDeviceGetTotalEnergyConsumption(self, h):  # noqa: N802
            return next(self.readings)

        def nvmlDeviceGetEnforcedPowerLimit(self, h):  # noqa: N802
            return 700_000 if h == 0 else 350_000  # mW

    bounds = gc.power_bounds(Nvml(), idle_s=0.01)
    assert bounds == {0: (0.0, 700.0), 1: (0.0, 350.0)}  # no joules while idle in this fake; limits in W


def test_a_cluster_path_whose_tool_is_missing_is_skipped_saying_why(monkeypatch):
    gc = _module()
    slurm = next(c for c in gc.checks(1) if c.needs == "sbatch")
    monkeypatch.setattr(gc.shutil, "which", lambda name: None)
    assert gc.missing_tool(slurm).startswith("skipped: no sbatch here")
    lines = []
    rows = gc.run_all([slurm], Path("/nonexistent"), lines.append)
    assert rows == [(slurm, gc.missing_tool(slurm), 0.0)] and lines[0].startswith("skip  Slurm --gpus-per-node=1")
