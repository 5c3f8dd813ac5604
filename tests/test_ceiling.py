"""The machine's ceiling: each framework's matmul throughput measured in its own process, kept in the store under
the machine's fingerprint, and shown by `bakeoff env`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bakeoff import registry
from bakeoff.measure import ceiling
from bakeoff.store import Store

INSTALLED = [fw for fw in ("torch", "tensorflow", "jax") if registry.installed(fw)]


@pytest.mark.parametrize("framework", INSTALLED)
def test_each_framework_measures_its_matmul_rate_in_its_own_process(framework):
    got = ceiling.measure(framework, n=128, threads=1)
    assert got["status"] == "ok", got
    assert got["n"] == 128 and got["threads"] == 1
    fp32 = got["precisions"]["fp32"]
    assert len(fp32["samples"]) == ceiling.REPEATS and all(s > 0 for s in fp32["samples"])
    # 2·128³ FLOPs take microseconds: any CPU does between 0.1 GFLOP/s and 100 TFLOP/s.
    assert 1e8 < fp32["median_flops_per_s"] < 1e14
    bf16 = got["precisions"]["bf16"]
    assert "median_flops_per_s" in bf16 or bf16["missing"]  # measured, or missing with the error


def test_a_precision_that_cannot_be_multiplied_is_missing_with_the_reason(monkeypatch):
    monkeypatch.setattr(ceiling, "PRECISIONS", ("fp32", "int3"))
    got = ceiling.probe("torch", n=64, repeats=2, threads=1) if "torch" in INSTALLED else pytest.skip("no torch")
    assert got["precisions"]["int3"]["missing"].startswith("KeyError")


def test_fingerprint_keys_the_machine_version_and_threads(tmp_path):
    a, b = ceiling.fingerprint("torch", 1), ceiling.fingerprint("torch", 2)
    assert ceiling.key(a) != ceiling.key(b) and ceiling.key(a) == ceiling.key(ceiling.fingerprint("torch", 1))
    with Store(tmp_path / "s.sqlite") as store:
        assert store.ceiling(ceiling.key(a)) is None
        store.put_ceiling(ceiling.key(a), a, {"precisions": {"fp32": {"median_flops_per_s": 1e11}}})
        kept = store.ceiling(ceiling.key(a))
    assert kept["fingerprint"] == a and kept["result"]["precisions"]["fp32"]["median_flops_per_s"] == 1e11


def test_env_measures_once_then_shows_what_is_kept(tmp_path):
    store = tmp_path / "s.sqlite"

    def env(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "bakeoff.cli", "env", "--store", str(store), "--threads", "1",
                               *args], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "none kept (no store yet)" in env("--no-probe")
    first = env()
    assert '"cores"' in first and "matmul ceiling (1024x1024 products, median of 10, 1 threads" in first
    lines = [line for line in first.splitlines() if "GFLOP/s" in line]
    assert len(lines) == len(INSTALLED)
    again = [line for line in env("--no-probe").splitlines() if "GFLOP/s" in line]
    assert again == lines  # the kept figures, not a new measurement
