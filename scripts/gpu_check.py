"""Prove bakeoff's CUDA paths on a machine with NVIDIA GPUs, in minutes (issue #28): every path below runs as
bakeoff runs it (the CLI, one store per check) and the script prints a table of path x pass/fail with the error.

    scripts/gpu-check --dry-run [--gpus N]   # the table of paths and the commands; runs nothing (CPU or GPU)
    scripts/gpu-check [--out DIR]            # run them; exits 1 if any fails, 2 on a machine with no GPU
    scripts/gpu-check --install --torch-index URL   # first, the README's GPU instructions, scripted

The paths: fp32 trials with TF32 off (as each framework reads it back) and fp16/bf16 trials in every framework,
each with the allocator's peak memory; torch.compile, tf.function + XLA and jax.jit on the GPU; data parallel
over every visible GPU (DDP over NCCL, MirroredStrategy, a JAX mesh) and multi-worker on this machine (one GPU per
rank); fp16 under MirroredStrategy; deployment to the GPU formats (Torch-TensorRT, ONNX Runtime's CUDA provider,
AOTInductor), each row's device and parity read from its row; the matmul ceiling; energy from NVML's counter
(issue #52: read, and plausible — each GPU's joules over the steady steps between its idle power and its board
limit times their time — in one process and, with 2 GPUs or more, each DDP rank its own GPU); the cluster
executors' GPU requests on this machine as a one-node cluster, where one is set up (Slurm's ``--gpus-per-node``
through ``sbatch``, Ray's ``num_gpus`` through a local Ray instance; a path whose tool is missing is skipped, said
so). Trials are the MNIST CNN, tiny, 20 steps (the energy paths: 2,000, so the counter sees seconds of training):
the point is that each path runs, not what it measures.

Until a GPU is lent, ``--dry-run`` is what is checked (tests/test_gpu_check.py). Nothing here imports a framework:
each check is a separate bakeoff process.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # run from a checkout, before or after the install

from bakeoff.measure.environment import cuda_devices  # noqa: E402  (imports no framework)

TRIAL = ["--workload", "mnist", "--max-steps", "20", "--eval-every", "100", "--batch-size", "64", "--device", "cuda",
         "--no-report", "--fresh", "--timeout", "300"]
ENERGY_TRIAL = ["--workload", "mnist", "--max-steps", "2000", "--eval-every", "1000", "--batch-size", "512",
                "--device", "cuda", "--no-report", "--fresh", "--timeout", "300"]
IDLE_S = 5.0
"""Seconds each GPU's energy counter is read with nothing running, before the checks: its idle power."""
POWER_SLACK = (0.8, 1.1)
"""How far a GPU's mean power over the steady steps may fall below its idle power and rise above its board limit
before the energy figure is implausible: idle power drifts, and the counter updates in steps, not continuously."""
DEPLOY = ["--workload", "mnist", "--max-steps", "20", "--device", "cuda", "--calls", "50", "--examples", "64"]
TORCH_GPU_PACKAGES = ["torch-tensorrt", "onnxruntime-gpu"]  # the deployment formats' GPU runtimes


@dataclasses.dataclass(frozen=True)
class Check:
    """One CUDA path: the bakeoff command that exercises it and how its stored outcome is judged."""

    path: str  # what it proves
    kind: str  # "trial", "deploy" or "ceiling": what the command writes, and how it is read
    args: tuple[str, ...]  # after ``bakeoff`` (trial, deploy) or ``python -m bakeoff.measure.ceiling``
    fp32: bool = False  # the trial must record TF32 off
    needs: str = ""  # a tool the path runs through ("sbatch", "ray"): skipped, said so, where it is missing
    gpus: int = 0  # energy: the GPUs whose NVML counters the trial must have read

    def command(self, store: Path) -> list[str]:
        if self.kind == "ceiling":
            return [sys.executable, "-m", "bakeoff.measure.ceiling", *self.args, str(store.with_suffix(".json"))]
        return [sys.executable, "-m", "bakeoff.cli", *self.args, "--store", str(store)]


def checks(gpus: int) -> list[Check]:
    """Every path, for a machine with ``gpus`` visible GPUs (data parallel takes them all; multi-worker 2)."""
    out = []
    for fw, eager in (("torch", "eager"), ("tensorflow", "graph"), ("jax", "graph")):
        out.append(Check(f"{fw} fp32, TF32 off", "trial", ("run", "--framework", fw, "--execution", eager,
                                                             "--precision", "fp32", *TRIAL), fp32=True))
        for precision in ("bf16", "fp16") if fw != "jax" else ("bf16",):
            out.append(Check(f"{fw} {precision}", "trial", ("run", "--framework", fw, "--execution", eager,
                                                              "--precision", precision, *TRIAL)))
    for fw, compiled, words in (("torch", "graph", "torch.compile"), ("tensorflow", "xla", "tf.function + XLA"),
                                ("jax", "graph", "jax.jit")):
        out.append(Check(f"{words} on the GPU", "trial", ("run", "--framework", fw, "--execution", compiled, *TRIAL)))
    if gpus >= 2:
        for fw, words in (("torch", "DDP over NCCL"), ("tensorflow", "MirroredStrategy"), ("jax", "JAX mesh")):
            out.append(Check(f"data parallel x {gpus}: {words}", "trial",
                             ("run", "--framework", fw, "--parallelism", "data_parallel", "--workers", str(gpus),
                              *_batch(TRIAL, gpus))))
            out.append(Check(f"multi-worker x 2 on this machine: {fw}", "trial",
                             ("run", "--framework", fw, "--parallelism", "multi_worker", "--workers", "2", *TRIAL)))
        out.append(Check(f"fp16 under MirroredStrategy x {gpus}", "trial",
                         ("run", "--framework", "tensorflow", "--parallelism", "data_parallel", "--workers", str(gpus),
                          "--precision", "fp16", *_batch(TRIAL, gpus))))
    # one kept model, three formats: one training, each format's row judged
    out.append(Check("deploy torch-tensorrt, torch-onnx (ONNX Runtime CUDA), aoti on the GPU, with parity", "deploy",
                     ("deploy", "--framework", "torch", "--formats", "torch-tensorrt,torch-onnx,aoti", *DEPLOY)))
    out.append(Check("deploy tf-onnx (ONNX Runtime CUDA), with parity", "deploy",
                     ("deploy", "--framework", "tensorflow", "--formats", "tf-onnx", *DEPLOY)))
    for fw in ("torch", "tensorflow", "jax"):
        out.append(Check(f"matmul ceiling: {fw}", "ceiling", (fw,)))
    out.append(Check("energy: NVML counter, plausible per example", "energy",
                     ("run", "--framework", "torch", "--execution", "eager", *ENERGY_TRIAL), gpus=1))
    if gpus >= 2:
        out.append(Check(f"energy x {gpus}: DDP, each rank its own GPU", "energy",
                         ("run", "--framework", "torch", "--parallelism", "data_parallel", "--workers", str(gpus),
                          *_batch(ENERGY_TRIAL, gpus)), gpus=gpus))
    out.append(Check("Slurm --gpus-per-node=1 (one-node cluster)", "trial",
                     ("run", "--framework", "torch", "--execution", "eager", "--executor", "slurm", *TRIAL),
                     needs="sbatch"))
    out.append(Check("Ray num_gpus=1 (a local Ray instance)", "trial",
                     ("run", "--framework", "torch", "--execution", "eager", "--executor", "ray", *TRIAL),
                     needs="ray"))
    if gpus >= 2:
        out.append(Check("Slurm --gpus-per-node=2: multi-worker x 2", "trial",
                         ("run", "--framework", "torch", "--parallelism", "multi_worker", "--workers", "2",
                          "--executor", "slurm", *TRIAL), needs="sbatch"))
        out.append(Check("Ray num_gpus=2: multi-worker x 2 (local Ray)", "trial",
                         ("run", "--framework", "torch", "--parallelism", "multi_worker", "--workers", "2",
                          "--executor", "ray", *TRIAL), needs="ray"))
    return out


def missing_tool(check: Check) -> str:
    """Why ``check`` cannot run here ('' when it can): its cluster tool is not installed."""
    if check.needs == "sbatch" and shutil.which("sbatch") is None:
        return "skipped: no sbatch here (set up Slurm on this machine as a one-node cluster to check it)"
    if check.needs == "ray" and importlib.util.find_spec("ray") is None:
        return "skipped: Ray is not installed (pip install 'ray[default]')"
    return ""


def power_bounds(nvml: Any = None, idle_s: float = IDLE_S) -> dict[int, tuple[float, float]]:
    """Each GPU's idle power (its energy counter over ``idle_s`` seconds with nothing running) and its board power
    limit as enforced, in watts, by NVML index. ``nvml``: the ``pynvml`` module (nvidia-ml-py)."""
    if nvml is None:
        import pynvml as nvml
    nvml.nvmlInit()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    before = [nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in handles]
    started = time.perf_counter()
    time.sleep(idle_s)
    seconds = time.perf_counter() - started
    after = [nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in handles]
    return {i: ((b - a) / 1e3 / seconds, nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3)
            for i, (h, a, b) in enumerate(zip(handles, before, after, strict=True))}


def judge_energy(check: Check, results: list[dict[str, Any]], bounds: dict[int, tuple[float, float]]) -> str:
    """'' when every trial read the NVML counter of each GPU it trained on and each GPU's mean power over the steady
    steps lies between its idle power and its board limit (:data:`POWER_SLACK`), else why not."""
    for r in results:
        energy = r.get("energy") or {}
        if energy.get("missing") or energy.get("steady_s") is None:
            return f"energy not measured: {energy.get('missing') or 'no energy section'}"
        gpus = {d: j for d, j in energy.get("domains", {}).items() if "nvml gpu" in d}
        if len(gpus) != check.gpus:
            return f"{len(gpus)} NVML counters read, not {check.gpus}: {sorted(energy.get('domains', {}))}"
        seconds = energy["steady_s"]
        for domain, joules in gpus.items():
            index = int(re.search(r"nvml gpu (\d+)", domain).group(1))
            idle, limit = bounds[index]
            low, high = idle * POWER_SLACK[0], limit * POWER_SLACK[1]
            if not low * seconds <= joules <= high * seconds:
                return (f"{domain}: {joules:.4g} J over {seconds:.3g} s of steady steps is {joules / seconds:.4g} W, "
                        f"outside {low:.4g}–{high:.4g} W (idle {idle:.4g} W, board limit {limit:.4g} W)")
        per_example = energy.get("per_example_j")
        expected = energy["steady_j"] / (energy["steady_steps"] * r["examples_per_step"])
        if per_example is None or abs(per_example - expected) > 1e-9 * expected:
            return f"energy per example {per_example} is not the steady joules over the steady examples ({expected})"
    return ""


def _batch(args: list[str], gpus: int) -> list[str]:
    """The trial's arguments with a global batch that divides over ``gpus`` replicas (32 each)."""
    args = list(args)
    args[args.index("--batch-size") + 1] = str(32 * gpus)
    return args


def _on_gpu(device: Any) -> bool:
    return any(m in str(device).lower() for m in ("cuda", "gpu"))


def judge_trial(check: Check, results: list[dict[str, Any]]) -> str:
    """'' when every stored trial ran on a GPU and succeeded (fp32: with TF32 off as read), else why not."""
    if not results:
        return "no trial stored"
    for r in results:
        env = r.get("environment", {})
        if r.get("status") != "ok":
            return f"{r.get('status')}: {str(r.get('reason', ''))[:300]}"
        if not _on_gpu(env.get("device")):
            return f"ran on {env.get('device')!r}, not a GPU"
        if check.fp32 and env.get("tf32") is not False:
            return f"TF32 not off as read: {env.get('tf32_settings')}"
        if not r.get("peak_memory_bytes"):
            return "no peak memory recorded"
    return ""


def judge_deploy(rows: list[dict[str, Any]]) -> str:
    """'' when every format's row succeeded on a GPU with parity, else why not."""
    if not rows:
        return "no deployment row stored"
    problems = []
    for row in rows:
        inference = row.get("inference", {})
        if row.get("status") != "ok":
            problems.append(f"{row.get('format')}: {row.get('status')} at {row.get('stage', '?')}: "
                            f"{str(row.get('reason', ''))[:300]}")
        elif not _on_gpu(inference.get("device")):
            problems.append(f"{row.get('format')} ran on {inference.get('device')!r}, not a GPU")
        elif inference.get("parity") != "ok":
            problems.append(f"{row.get('format')}: parity {inference.get('parity')}")
    return "; ".join(problems)


def judge_ceiling(result: dict[str, Any]) -> str:
    missing = {p: e["missing"] for p, e in result.get("precisions", {}).items() if "missing" in e}
    return f"missing: {missing}" if missing or not result.get("precisions") else ""


def _outcome(check: Check, store: Path, bounds: dict[int, tuple[float, float]]) -> str:
    if check.kind == "ceiling":
        path = store.with_suffix(".json")
        return judge_ceiling(json.loads(path.read_text())) if path.exists() else "the probe wrote no result"
    if not store.exists():
        return "nothing stored"
    from bakeoff.results.store import Store

    with Store(store) as s:
        if check.kind == "deploy":
            return judge_deploy(s.deployments())
        results = [r.to_dict() for r in s.results()]
        return judge_trial(check, results) or (judge_energy(check, results, bounds) if check.kind == "energy" else "")


def install_commands(torch_index: str) -> list[list[str]]:
    """The README's GPU instructions: the CUDA builds into this environment, then the GPU deployment runtimes."""
    pip = [sys.executable, "-m", "pip"]
    return [[*pip, "uninstall", "-y", "tensorflow-cpu"],
            [*pip, "install", "tensorflow[and-cuda]==2.21.0", "jax[cuda12]==0.10.2"],
            [*pip, "install", "--index-url", torch_index, "torch==2.13.0"],
            [*pip, "install", *TORCH_GPU_PACKAGES]]


def run_all(todo: list[Check], out: Path, say: Callable[[str], None],
            bounds: dict[int, tuple[float, float]] | None = None) -> list[tuple[Check, str, float]]:
    rows = []
    for i, check in enumerate(todo):
        if skipped := missing_tool(check):
            rows.append((check, skipped, 0.0))
            say(f"skip  {check.path}  {skipped}")
            continue
        store = out / f"check{i:02d}.sqlite"
        started = time.perf_counter()
        with (out / f"check{i:02d}.log").open("w") as log:
            code = subprocess.run(check.command(store), stdout=log, stderr=subprocess.STDOUT, cwd=out).returncode
        why = _outcome(check, store, bounds or {})
        if not why and code != 0:
            why = f"exit {code} (log: {out / f'check{i:02d}.log'})"
        rows.append((check, why, time.perf_counter() - started))
        say(f"{'pass' if not why else 'FAIL'}  {check.path}  ({rows[-1][2]:.0f} s){'  ' + why if why else ''}")
    return rows


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the paths and commands; run nothing")
    parser.add_argument("--gpus", type=int, help="GPUs to plan for (default: those visible here, at least 2 in a "
                                                 "dry run so every path is shown)")
    parser.add_argument("--out", type=Path, help="where stores and logs go (default: a new temporary folder)")
    parser.add_argument("--install", action="store_true", help="install the CUDA builds first (README's steps)")
    parser.add_argument("--torch-index", help="with --install: PyTorch's CUDA wheel index, from the selector on "
                                              "PyTorch's Get Started page")
    args = parser.parse_args(argv)
    visible, why = cuda_devices()
    gpus = args.gpus or (visible if visible or not args.dry_run else 2)
    out = args.out or Path(tempfile.gettempdir()) / "bakeoff-gpu-check-XXXX"  # made only to run
    if args.install and not args.torch_index:
        parser.error("--install needs --torch-index (PyTorch's CUDA wheel index for torch 2.13.0)")
    if args.dry_run:
        if args.install:
            say("install:")
            for command in install_commands(args.torch_index):
                say("  " + shlex.join(command))
        say(f"{len(checks(gpus))} paths for {gpus} GPU(s) ({visible} visible here{': ' + why if why else ''}):")
        for i, check in enumerate(checks(gpus)):
            say(f"{i:3d}  {check.path:<52} {check.kind:<8} {shlex.join(check.command(out / f'check{i:02d}.sqlite'))}")
        return 0
    if not visible:
        sys.stderr.write(f"gpu-check: {why}; nothing to prove here (--dry-run prints what it would run)\n")
        return 2
    if args.install:
        for command in install_commands(args.torch_index):
            say("+ " + shlex.join(command))
            subprocess.run(command, check=True)
    out = args.out or Path(tempfile.mkdtemp(prefix="bakeoff-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    bounds = power_bounds()  # before any check: the GPUs idle
    say("GPU power, idle – board limit: " + ", ".join(f"{i}: {a:.0f}–{b:.0f} W" for i, (a, b) in bounds.items()))
    rows = run_all(checks(gpus), out, say, bounds)
    failed = [r for r in rows if r[1] and not r[1].startswith("skipped")]
    skipped = [r for r in rows if r[1].startswith("skipped")]
    say("\n| path | result | s | error |\n|---|---|---|---|")
    for check, why, seconds in rows:
        result = "skip" if why.startswith("skipped") else "fail" if why else "pass"
        say(f"| {check.path} | {result} | {seconds:.0f} | {why.replace('|', '/')} |")
    say(f"\n{len(rows) - len(failed) - len(skipped)} of {len(rows)} paths pass ({len(skipped)} skipped) in "
        f"{time.perf_counter() - started:.0f} s on {visible} GPU(s); stores and logs in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
