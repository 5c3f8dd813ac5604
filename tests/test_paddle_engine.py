"""The Paddle engine through the real trial path (``python -m bakeoff.trial``, one process per trial) and in
process: to_static builds the step's program once, in the first step; a killed trial resumes to the same losses
bit for bit (parameters, Adam's state and the dropout generator restored); a Paddle trial loads no other framework;
Paddle's Adam is PyTorch's, ε in the same place; accumulation is exact over micro-batches of different shapes; the
matmul ceiling multiplies in the precision it names; the profiler writes a trace with the step markers.
Runtime: about 40 s on 2 shared CPUs (three trials, two at a time, then the in-process checks).
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from bakeoff.core import registry
from bakeoff.core.spec import RunSpec

pytestmark = pytest.mark.skipif(not registry.installed("paddle"), reason="needs paddle (pip install 'bakeoff[paddle]')")

# As tests/test_jax_engine.py kills a trial: the process exits just before training step BAKEOFF_TEST_DIE_AT_STEP.
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
    # dropout stays on (the tiny preset's 0.1): resuming must restore the dropout generator too
    return RunSpec(**{"workload": "mnist", "framework": "paddle", "execution": "graph", "max_steps": 8,
                      "eval_every": 8, "batch_size": 32, "device": "cpu", **kw})


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
    """Three trials, two at a time: to_static fp32 (checkpointing every 4 steps), eager fp32 accumulating 2
    micro-batches, and the to_static trial again killed before step 6 then resumed from its step-4 checkpoint."""
    tmp = tmp_path_factory.mktemp("paddle_trials")
    (tmp / "sitecustomize.py").write_text(DIE_AT_STEP)
    graph = _spec(checkpoint_every=4)
    die = {"PYTHONPATH": f"{tmp}:{os.environ.get('PYTHONPATH', '')}", "BAKEOFF_TEST_DIE_AT_STEP": "6"}
    with ThreadPoolExecutor(2) as pool:
        straight = pool.submit(_trial, graph, tmp, "graph")
        eager = pool.submit(_trial, _spec(execution="eager", grad_accum=2), tmp, "eager")
        killed = pool.submit(_trial, graph, tmp, "resumed", die)
        out = {"graph": straight.result()[1], "eager": eager.result()[1]}
        code, result = killed.result()
    out["killed_code"] = {"code": code, "result": result}
    out["resumed"] = _trial(graph, tmp, "resumed")[1]
    return out


@pytest.mark.slow
def test_a_to_static_trial_builds_its_program_once_in_the_first_step(trials):
    r = trials["graph"]
    assert r["status"] == "ok", r.get("reason") or r
    assert r["training"]["graph_builds"] == 1 and r["training"]["graph_build_steps"] == [1]
    assert r["extras"]["to_static_programs"] == 1
    assert r["training"]["graph_build_s"] > 0
    env = r["environment"]
    assert env["mixed_precision"] == "off" and env["tf32"] is False and env["device"] == "cpu"
    assert env["framework_version"] == __import__("paddle").__version__
    assert len(r["losses"]) == 8 and 1.5 < r["losses"][0] < 3.5  # a real 10-class cross-entropy
    assert r["num_params"] == 5_258


@pytest.mark.slow
def test_an_eager_trial_accumulates_and_builds_nothing(trials):
    r = trials["eager"]
    assert r["status"] == "ok", r.get("reason") or r
    assert r["training"]["graph_builds"] == 0 and r["training"]["graph_build_steps"] == []
    assert r["examples_per_step"] == 64 and len(r["losses"]) == 8  # 2 micro-batches of 32 per step
    assert 1.5 < r["losses"][0] < 3.5


@pytest.mark.slow
def test_a_killed_trial_resumes_to_the_same_losses_bit_for_bit(trials):
    assert trials["killed_code"]["code"] == 7  # died before step 6, after the step-4 checkpoint
    resumed, straight = trials["resumed"], trials["graph"]
    assert resumed["status"] == "ok", resumed.get("reason") or resumed
    assert resumed["training"]["resumed_at_steps"] == [4]
    assert resumed["losses"] == straight["losses"]  # parameters, Adam state and the dropout generator restored
    assert resumed["training"]["graph_build_steps"] == [5]  # a new process builds the program again


@pytest.mark.slow
@pytest.mark.parametrize("name", ["graph", "eager", "resumed"])
def test_paddle_trials_load_no_other_framework(trials, name):
    r = trials[name]
    loaded = r["environment"]["frameworks_loaded"]
    assert list(loaded) == ["paddle"], loaded
    assert loaded["paddle"]["modules"] and loaded["paddle"]["libraries"]
    assert r["memory_kind"] == "rss" and 0 < r["memory_baseline_bytes"] <= r["peak_memory_bytes"]


# --- in process ------------------------------------------------------------------------------------------------


def _engine(workload: str = "mnist", **kw):
    from bakeoff.trial.build import build_trial

    spec = RunSpec(**{"workload": workload, "framework": "paddle", "max_steps": 4, "batch_size": 8, "device": "cpu",
                      **kw})
    parts = build_trial(spec, {"dropout": 0.0})
    return parts.build_engine(), parts.workload, parts.data


@pytest.mark.parametrize("execution", ["eager", "graph"])
def test_accumulation_over_micro_batches_of_different_shapes_is_exact(execution):
    engine, wl, data = _engine(execution=execution)
    batch = next(wl.batches(data.train, 8, 0, 0))
    parts = [{k: v[:3] for k, v in batch.items()}, {k: v[3:] for k, v in batch.items()}]  # 3 and 5 examples
    whole, accumulated = engine.canonical_gradients([batch]), engine.canonical_gradients(parts)
    for name, g in whole.items():
        assert np.abs(accumulated[name] - g).max() <= 1e-6 * np.abs(g).max(), name
    builds = engine.graph_builds()
    engine.train_step(parts)  # the same shapes again: nothing new to build
    assert engine.graph_builds() == builds == (3 if execution == "graph" else 0)  # shapes 8, 3 and 5


def test_paddle_adam_is_torch_adam():
    # PyTorch: p -= lr/(1-b1^t) · m / (√v/√(1-b2^t) + ε); Paddle's adam kernel: p -= lr·√(1-b2^t)/(1-b1^t) · m /
    # (√v + ε·√(1-b2^t)) — the same expression times √(1-b2^t)/√(1-b2^t). A form with ε outside the bias
    # correction (TF1's) would move the ε-regime entries (|g| ≪ ε) 30 times less on the first step. The
    # gradients span that regime; the params start at 0, so that the updates are compared.
    torch = pytest.importorskip("torch")
    import paddle

    rng = np.random.default_rng(0)
    grads = [(rng.normal(size=64) * np.logspace(-9, 0, 64)).astype(np.float32) for _ in range(20)]
    tp = torch.nn.Parameter(torch.zeros(64))
    topt = torch.optim.Adam([tp], lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    pp = paddle.create_parameter([64], "float32", default_initializer=paddle.nn.initializer.Constant(0.0))
    popt = paddle.optimizer.Adam(learning_rate=1e-3, beta1=0.9, beta2=0.999, epsilon=1e-8, parameters=[pp])
    path = np.zeros(64)  # the length of each entry's walk: what rounding accumulates against
    for g in grads:
        before = tp.detach().numpy().copy()
        tp.grad = torch.from_numpy(g)
        topt.step()
        path += np.abs(tp.detach().numpy() - before)
        (pp * paddle.to_tensor(g)).sum().backward()  # the gradient of <p, g> is g
        popt.step()
        popt.clear_grad()
    assert path.min() > 1e-4  # every entry moved, the ε-regime ones by a tenth of lr a step
    difference = np.abs(pp.numpy() - tp.detach().numpy())
    assert np.all(difference <= 2e-5 * path), (difference / path).max()


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_matmul_ceiling_multiplies_in_its_precision(precision):
    import paddle

    from bakeoff.frameworks.paddle import engine

    rates = engine.matmul_rates(precision, 128, 3, 0)
    assert len(rates) == 3 and all(r > 0 for r in rates)
    product, dtype = engine._multiplier(precision, "cpu")
    a = paddle.to_tensor(np.random.default_rng(0).standard_normal((64, 64), dtype=np.float32))
    exact = a.numpy().astype(np.float64) @ a.numpy().astype(np.float64)
    error = np.abs(product(a.astype(dtype), a.astype(dtype)).astype("float32").numpy() - exact).max()
    # bf16 rounds each input to 8 bits (u = 2⁻⁸): errors near u·|a|·|a|·√k; fp32's are 5 orders smaller
    assert (error > 1e-2) if precision == "bf16" else (error < 1e-4), error


def test_the_profiler_writes_a_chrome_trace_with_the_step_markers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    engine, wl, data = _engine(execution="eager")
    batches = wl.batches(data.train, 8, 0, 0)
    with engine.profiler(tmp_path) as trace:
        for step in (1, 2):
            with trace.step(step):
                engine.train_step([next(batches)])
    assert [f.name for f in tmp_path.iterdir()] == [f"{socket.gethostname()}.perfetto_trace.json.gz"]
    assert trace.tool == "paddle.profiler"  # and no ./profiler_log/, where Paddle's default would write
    # Paddle's Chrome export names each span with its duration: "ProfilerStep#1[58.538 ms]"
    events = json.loads(gzip.decompress(next(tmp_path.iterdir()).read_bytes()))["traceEvents"]
    names = {str(e.get("name")).split("[")[0] for e in events}
    assert {"ProfilerStep#1", "ProfilerStep#2", "Conv2D"} <= names


def test_eager_bf16_and_fp16_on_a_cpu_are_refused_naming_why():
    from bakeoff.engines.base import Unsupported

    with pytest.raises(Unsupported, match="dygraph AMP"):
        _engine(execution="eager", precision="bf16")
    with pytest.raises(Unsupported, match="fp16 with loss scaling needs a CUDA device"):
        _engine(execution="graph", precision="fp16")
