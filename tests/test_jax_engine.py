"""The JAX engine through the real trial path (``python -m bakeoff.trial``, one process per trial) and in process:
jit builds the step once and its compile lands in the first step, bf16 is in force, accumulation is exact even
over micro-batches of different shapes, a killed trial resumes to the same losses bit for bit, TensorBoard events
are written without loading another framework, optax's Adam is PyTorch's, and xla and fp16 are refused before
any process starts (by its record), naming what is accepted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from bakeoff.core import registry
from bakeoff.core.spec import RunSpec

pytestmark = pytest.mark.skipif(not registry.installed("jax"), reason="needs jax (pip install 'bakeoff[jax]')")

# As tests/test_modes.py kills a trial: the process exits just before training step BAKEOFF_TEST_DIE_AT_STEP.
DIE_AT_STEP = """
import os
limit = os.environ.get("BAKEOFF_TEST_DIE_AT_STEP")
if limit:
    import bakeoff.trial.loop as loop

    calls, units = [0], loop._units

    def counting_units(workload, micro_batches):  # called once per step, just before train_step
        calls[0] += 1
        if calls[0] == int(limit):
            os._exit(7)
        return units(workload, micro_batches)

    loop._units = counting_units
"""


def _spec(**kw) -> RunSpec:
    # dropout stays on (the tiny preset's 0.1): resuming must restore the dropout key too
    return RunSpec(**{"workload": "mnist", "framework": "jax", "execution": "graph", "max_steps": 8, "eval_every": 8,
                      "batch_size": 32, "device": "cpu", **kw})


def _trial(spec: RunSpec, tmp: Path, name: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    """Run ``python -m bakeoff.trial`` with a checkpoint and a TensorBoard folder under ``tmp/name``."""
    folder = tmp / name
    folder.mkdir(exist_ok=True)
    (folder / "spec.json").write_text(spec.to_json())
    args = [sys.executable, "-m", "bakeoff.trial", str(folder / "spec.json"), str(folder / "result.json"),
            str(tmp / f"{name}-ckpt"), str(folder / "tb")]
    run = subprocess.run(args, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})
    result = folder / "result.json"
    return run.returncode, json.loads(result.read_text()) if result.exists() else {"stderr": run.stderr[-3000:]}


@pytest.fixture(scope="module")
def trials(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """Three trials, two at a time: jit fp32 (checkpointing every 4 steps), eager bf16 accumulating 2 micro-batches,
    and the jit trial again killed before step 6 then resumed from its step-4 checkpoint."""
    tmp = tmp_path_factory.mktemp("jax_trials")
    (tmp / "sitecustomize.py").write_text(DIE_AT_STEP)
    graph = _spec(checkpoint_every=4)
    die = {"PYTHONPATH": f"{tmp}:{os.environ.get('PYTHONPATH', '')}", "BAKEOFF_TEST_DIE_AT_STEP": "6"}
    with ThreadPoolExecutor(2) as pool:
        straight = pool.submit(_trial, graph, tmp, "graph")
        eager = pool.submit(_trial, _spec(execution="eager", precision="bf16", grad_accum=2), tmp, "eager")
        killed = pool.submit(_trial, graph, tmp, "resumed", die)
        out = {"graph": straight.result()[1], "eager": eager.result()[1]}
        code, result = killed.result()
    out["killed_code"] = {"code": code, "result": result}
    out["resumed"] = _trial(graph, tmp, "resumed")[1]
    out["tmp"] = {"path": str(tmp)}
    return out


@pytest.mark.slow
def test_a_jitted_trial_builds_its_step_once_and_pays_the_compile_in_the_first_step(trials):
    r = trials["graph"]
    assert r["status"] == "ok", r.get("reason") or r
    assert r["training"]["graph_builds"] == 1 and r["training"]["graph_build_steps"] == [1]
    assert r["extras"]["train_step_traces"] == 1 and r["extras"]["jax_xla_compile_count"] >= 2  # step, predict
    assert r["first_step_s"] > 5 * r["steady_step_s"]  # XLA's compile of the whole step is in the first step
    assert r["training"]["graph_build_s"] > 0
    env = r["environment"]
    assert env["mixed_precision"] == "off" and env["execution"] == "jax.jit (whole step)"
    assert env["framework_version"] == __import__("jax").__version__ and env["device"] == "cpu:0"
    assert {"flax_version", "optax_version", "jaxlib_version", "xla_flags"} <= set(env)
    assert len(r["losses"]) == 8 and 1.5 < r["losses"][0] < 3.5  # a real 10-class cross-entropy
    assert r["num_params"] == 5_258


@pytest.mark.slow
def test_an_eager_bf16_trial_runs_op_by_op_in_bf16_accumulating(trials):
    r = trials["eager"]
    assert r["status"] == "ok", r.get("reason") or r
    assert r["training"]["graph_builds"] == 0 and r["training"]["graph_build_steps"] == []
    assert r["environment"]["mixed_precision"].startswith("flax dtype=bfloat16")
    assert r["environment"]["execution"] == "op by op (no jit)"
    assert r["examples_per_step"] == 64 and len(r["losses"]) == 8  # 2 micro-batches of 32 per step
    assert 1.5 < r["losses"][0] < 3.5


@pytest.mark.slow
def test_a_killed_trial_resumes_to_the_same_losses_bit_for_bit(trials):
    assert trials["killed_code"]["code"] == 7  # died before step 6, after the step-4 checkpoint
    resumed, straight = trials["resumed"], trials["graph"]
    assert resumed["status"] == "ok", resumed.get("reason") or resumed
    assert resumed["training"]["resumed_at_steps"] == [4]
    assert resumed["losses"] == straight["losses"]  # params, Adam state and the dropout key restored
    assert resumed["training"]["graph_build_steps"] == [5]  # a new process compiles the step again


@pytest.mark.slow
@pytest.mark.parametrize("name", ["graph", "eager", "resumed"])
def test_jax_trials_load_no_other_framework_and_write_tensorboard_events(trials, name):
    r = trials[name]
    loaded = r["environment"]["frameworks_loaded"]
    assert list(loaded) == ["jax"], loaded  # flax, optax and the event writer import neither TF nor torch
    assert loaded["jax"]["modules"] and loaded["jax"]["libraries"]
    assert r["memory_kind"] == "rss" and 0 < r["memory_baseline_bytes"] <= r["peak_memory_bytes"]
    logdir = Path(trials["tmp"]["path"]) / name / "tb"
    assert list(logdir.glob("events.out.tfevents.*"))
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir))
    events.Reload()
    steps = sorted({e.step for e in events.Scalars("train/loss")})
    assert steps == list(range(1, 9))  # the resumed trial: both attempts wrote into the same run
    assert sorted({e.step for e in events.Scalars("eval/accuracy")}) == [0, 8]


# --- in process ------------------------------------------------------------------------------------------------


def _engine(workload: str = "mnist", **kw):
    from bakeoff.trial.build import build_trial

    spec = RunSpec(**{"workload": workload, "framework": "jax", "max_steps": 4, "batch_size": 8, "device": "cpu",
                      **kw})
    parts = build_trial(spec, {"dropout": 0.0})
    return parts.build_engine(), parts.workload, parts.data


def test_accumulation_over_micro_batches_of_different_shapes_is_exact():
    # Under jit (eager accumulation: the MNIST parity probe and the eager trial; op by op, 3 new shapes cost 30 s)
    engine, wl, data = _engine(execution="graph")
    batch = next(wl.batches(data.train, 8, 0, 0))
    parts = [{k: v[:3] for k, v in batch.items()}, {k: v[3:] for k, v in batch.items()}]  # 3 and 5 examples
    whole, accumulated = engine.canonical_gradients([batch]), engine.canonical_gradients(parts)
    for name, g in whole.items():
        assert np.abs(accumulated[name] - g).max() <= 1e-6 * np.abs(g).max(), name
    builds = engine.graph_builds()
    engine.train_step(parts)
    engine.train_step(parts)  # the same shapes again: nothing new to compile
    assert engine.graph_builds() - builds == 1  # the step for this pair of shapes, compiled once


def test_optax_adam_is_torch_adam():
    # PyTorch: p -= lr/(1-b1^t) · m / (√v/√(1-b2^t) + ε); optax: p -= lr · m̂ / (√v̂ + ε) — one expression. What
    # differs is rounding, mostly optax's bias corrections 1 − βᵗ computed in fp32 (1 − 0.999 is 1.3e-5 off;
    # PyTorch's are float64 on the host): steps differ by 6.5e-6 relative, far inside the parity tolerances. The
    # gradients span Adam's ε regime (tiny entries) too; the params start at 0, so that the updates are compared.
    torch = pytest.importorskip("torch")
    import jax.numpy as jnp
    import optax

    rng = np.random.default_rng(0)
    grads = [(rng.normal(size=64) * np.logspace(-9, 0, 64)).astype(np.float32) for _ in range(20)]
    tp = torch.nn.Parameter(torch.zeros(64))
    topt = torch.optim.Adam([tp], lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    opt = optax.adam(1e-3, b1=0.9, b2=0.999, eps=1e-8)
    jp = jnp.zeros(64)
    state = opt.init(jp)
    path = np.zeros(64)  # the length of each entry's walk: what rounding accumulates against
    for g in grads:
        before = tp.detach().numpy().copy()
        tp.grad = torch.from_numpy(g)
        topt.step()
        path += np.abs(tp.detach().numpy() - before)
        updates, state = opt.update(jnp.asarray(g), state, jp)
        jp = optax.apply_updates(jp, updates)
    assert path.min() > 1e-4  # every entry moved, the ε-regime ones (|g| ≪ ε) by a tenth of lr a step
    difference = np.abs(np.asarray(jp) - tp.detach().numpy())
    assert np.all(difference <= 2e-5 * path), (difference / path).max()  # measured worst: 7.5e-6


@pytest.mark.parametrize(("field", "value", "accepted"), [
    ("execution", "xla", "jax.jit is XLA compilation: use graph; accepted: graph, eager"),
    ("precision", "fp16", "JAX has no fp16 precision in bakeoff; accepted: fp32, bf16"),
])
def test_what_jax_cannot_run_is_refused_before_a_process_starts_naming_the_accepted_modes(field, value, accepted):
    spec = RunSpec(**{"workload": "mnist", "framework": "jax", "max_steps": 4, field: value})
    assert registry.unsupported(spec) == accepted  # its record's reason: the engine holds no second copy


def test_each_jax_process_takes_its_own_gpu_and_a_mesh_takes_as_many_devices_as_replicas(monkeypatch):
    import jax

    from bakeoff.engines.base import Unsupported
    from bakeoff.frameworks.jax import distributed as jax_distributed
    from bakeoff.frameworks.jax import engine as jax_engine
    from bakeoff.measure.environment import local_rank

    # jax.distributed's local_device_ids from the local rank the launcher gives each process (tests/test_launchers)
    ranks = [local_rank({"BAKEOFF_LOCAL_RANK": str(i)}) for i in range(4)]
    assert [jax_distributed.local_device_ids(r, gpus=8) for r in ranks] == [[0], [1], [2], [3]]
    assert jax_distributed.local_device_ids(1, gpus=0) is None  # no GPU: the process's CPU device
    # the GPUs a process counts: none for a CPU jaxlib under --device auto, the machine's with a CUDA plugin
    monkeypatch.setattr(jax_distributed, "cuda_devices", lambda: (8, ""))
    auto, cuda = (RunSpec(workload="mnist", framework="jax", device=d, max_steps=2) for d in ("auto", "cuda"))
    monkeypatch.setattr(jax_distributed, "cuda_build", lambda framework: False)
    assert jax_distributed.usable_gpus(auto) == 0 and jax_distributed.usable_gpus(cuda) == 8
    monkeypatch.setattr(jax_distributed, "cuda_build", lambda framework: True)
    assert jax_distributed.usable_gpus(auto) == 8
    with pytest.raises(Unsupported, match="local rank 1 needs a GPU of its own, and this machine shows 1"):
        jax_distributed.local_device_ids(1, gpus=1)

    class Device:  # what mesh_devices reads of a jax.Device
        def __init__(self, id_: int, process: int) -> None:
            self.id, self.process_index, self.platform = id_, process, "gpu"

    eight = [Device(i, 0) for i in range(8)]
    assert [d.id for d in jax_distributed.mesh_devices(eight, workers=2)] == [0, 1]  # data parallel × 2 of 8 GPUs
    with pytest.raises(Unsupported, match="needs 4 gpu devices, one each; JAX sees 2"):
        jax_distributed.mesh_devices(eight[:2], workers=4)
    # over jax.distributed, one device per process, whatever each process holds
    two_processes = [Device(0, 0), Device(1, 0), Device(2, 1), Device(3, 1)]
    assert [d.id for d in jax_distributed.mesh_devices(two_processes, workers=2, processes=2)] == [0, 2]

    # the memory probe's device is this process's own GPU, not the first of every process's
    own, other = Device(5, 1), Device(0, 0)
    monkeypatch.setattr(jax, "devices", lambda backend=None: [other, own])
    monkeypatch.setattr(jax, "local_devices", lambda process_index=None, backend=None: [own])
    spec = RunSpec(workload="mnist", framework="jax", parallelism="multi_worker", workers=2, device="cuda",
                   max_steps=2)
    assert jax_engine._pick_device(spec) is own
