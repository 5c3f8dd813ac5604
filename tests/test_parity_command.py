"""``bakeoff parity`` through the real CLI: a shipped workload's ports agree (exit 0); a user's own workload with a
port that is wrong in one tensor fails (exit 1) naming that tensor, its differences and the tolerance; bad input
exits 2 naming the value and what is accepted. Each framework's probe runs in its own process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from bakeoff.core import registry
from bakeoff.run import process
from test_own_workload import SRC, bakeoff, write_workload

JAX_MODEL = '''
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from bakeoff.workloads.common.jax_encoder import FlaxModel


class BlobsNet(nn.Module):
    hidden: int
    classes: int
    dtype: object = jnp.float32

    @nn.compact
    def __call__(self, x, deterministic=True):
        x = nn.relu(nn.Dense(self.hidden, dtype=self.dtype, name="hidden")(x.astype(self.dtype)))
        return nn.Dense(self.classes, dtype=self.dtype, name="out")(x)


class BlobsMLP(FlaxModel):
    def net(self, dtype=jnp.float32):
        return BlobsNet(self.config["hidden"], self.config["classes"], dtype)

    def example(self):
        return (jnp.zeros((1, self.config["features"]), jnp.float32),)

    def loss(self, params, batch, training, rng, dtype=jnp.float32):
        logits = self.apply(params, batch["x"], training, rng, dtype).astype(jnp.float32)
        summed = optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]).sum()
        count = jnp.asarray(batch["labels"].shape[0], jnp.float32)
        return summed PENALTY, count

    def outputs(self, params, batch, dtype=jnp.float32):
        return jax.nn.softmax(self.apply(params, batch["x"], False, None, dtype).astype(jnp.float32), -1)
'''

# The port's bug: weight decay coupled into the loss, on the output layer's kernel only (the PyTorch model has
# none). Forward outputs agree; the gradients of hidden.kernel and hidden.bias do too; out.kernel's do not.
WRONG = "+ count * 0.05 * jnp.sum(params['out']['kernel'] ** 2)"

NEEDS = pytest.mark.skipif(not all(registry.installed(f) for f in ("torch", "jax")), reason="needs torch and jax")


def _lines(text: str) -> str:
    return " ".join(text.split())


def not_json(constant: str) -> None:
    """``json.loads``' ``parse_constant``: Python's json reads ``Infinity``, ``-Infinity`` and ``NaN``, which are not
    JSON (strict parsers, ``jq``, JavaScript's JSON.parse refuse them)."""
    raise ValueError(f"{constant} is not JSON")


@NEEDS
def test_a_shipped_workloads_ports_agree(tmp_path):
    r = bakeoff("parity", "--workload", "mnist", "--framework", "torch,jax", "--execution", "eager", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    for check in ("parameters", "outputs", "gradients", "losses", "weights", "accumulation"):
        assert f"│ eager fp32 │ jax       │ {check}" in r.stdout, r.stdout
    assert "DIFFERS" not in r.stdout and "all agree: torch, jax within the stated tolerances" in _lines(r.stdout)


@NEEDS
def test_a_users_port_wrong_in_one_tensor_is_named(tmp_path):
    folder = write_workload(tmp_path / "models").parent
    (folder / "jax_model.py").write_text(JAX_MODEL.replace("PENALTY", WRONG))
    r = bakeoff("parity", "--workload", "models/blobs.py:Blobs", "--framework", "torch,jax", "--format", "json",
                cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads(r.stdout, parse_constant=not_json)
    first = report["first_disagreement"]
    assert (first["framework"], first["mode"], first["check"], first["item"]) == ("jax", "eager fp32", "gradients",
                                                                                  "out.kernel")
    assert first["max_abs"] > 1e-3 and first["error"] > first["tolerance"] == 1e-4
    verdicts = {(c["check"]): c["ok"] for c in report["checks"] if c["framework"] == "jax"}
    assert verdicts == {"parameters": True, "outputs": True, "gradients": False, "losses": False, "weights": False,
                        "accumulation": True}
    [grads] = [c for c in report["checks"] if c["framework"] == "jax" and c["check"] == "gradients"]
    assert [f["item"] for f in grads["findings"] if f["ok"]] == ["hidden.kernel", "hidden.bias", "out.bias"]

    table = bakeoff("parity", "--workload", "models/blobs.py:Blobs", "--framework", "torch,jax", cwd=tmp_path)
    assert table.returncode == 1
    said = _lines(table.stdout)
    assert (f"first disagreement: jax against torch, eager fp32: gradients: out.kernel: max abs diff "
            f"{first['max_abs']:.3g}, max rel diff {first['max_rel']:.3g}; max |Δ| / max(max |ref|, 1e-06) "
            f"{first['error']:.3g} > tolerance 0.0001") in said, said


@pytest.mark.parametrize(("args", "message"), [
    (("--workload", "sentiment"), "unknown workload 'sentiment'; accepted: autoencoder, mnist, speech_ctc"),
    (("--workload", "mnist", "--framework", "torch,mxnet"),
     "unknown framework 'mxnet'; accepted: torch, tensorflow, jax, keras-jax"),
    (("--workload", "mnist", "--framework", "torch,jax", "--execution", "lazy"),
     "unknown execution mode 'lazy'; accepted: eager, graph, xla"),
    (("--workload", "mnist", "--framework", "torch,jax", "--precision", "fp16"),
     "--precision fp16: parity has tolerances for fp32, bf16"),
    (("--workload", "mnist", "--framework", "torch"), "parity compares two or more frameworks, got torch"),
    (("--workload", "mnist", "--framework", "torch,paddle", "--precision", "bf16"),  # its record's cpu_missing
     "parity's probes run on the CPU, where PaddlePaddle cannot run eager bf16: Paddle's dygraph AMP"),
    (("--workload", "models/blobs.py:Blobs", "--framework", "torch,jax"),
     "JAX has no blobs implementation; blobs is implemented in torch"),
    (("--workload", "mnist", "--framework", "torch,jax", "--set", "widht=3"), "unknown config key(s) 'widht'"),
])
def test_bad_input_exits_2_naming_what_is_accepted(tmp_path, args, message):
    write_workload(tmp_path / "models")  # PyTorch only
    r = bakeoff("parity", *args, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("bakeoff parity: error: ") and message in _lines(r.stderr), r.stderr


def test_a_probe_past_its_timeout_is_reported_and_leaves_no_process(monkeypatch):
    """A hung probe (here one that also started a child of its own, as Inductor's compile workers are) is
    recorded as timed out, and neither it nor its child outlives the command."""
    import subprocess
    import sys
    import uuid

    from bakeoff.run import parity_session as parity

    marker = f"bakeoff-hung-probe-{uuid.uuid4().hex}"
    hung = ("import subprocess, sys, time; "
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '{marker}']); time.sleep(60)")
    monkeypatch.setattr(parity, "probe_command", lambda *a, **k: [sys.executable, "-c", hung, marker])
    monkeypatch.setattr(parity, "PROBE_TIMEOUT_S", 2.0)
    report = parity.check_parity("mnist", ["torch", "jax"], ["eager"])
    assert not report.ok and len(report.failed_runs) == 2
    assert all("timed out after 2 s" in why for why in report.failed_runs.values())
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == []


def test_json_writes_null_for_what_has_no_finite_value(monkeypatch, capsys):
    """A port that loses a tensor has an infinite error for it, and one whose outputs are NaN a NaN error: the JSON
    says null for each (bakeoff parity --help says so), and stays JSON."""
    import numpy as np

    from bakeoff.analysis import parity_tolerances as checks
    from bakeoff.cli.main import main
    from bakeoff.run import parity_session as parity

    mode = parity.Mode("eager", "fp32")
    canonical = {"out.kernel": np.ones((3, 2), np.float32), "out.bias": np.zeros(2, np.float32)}
    lost = checks.compare_parameters(8, {"out.kernel": canonical["out.kernel"]}, canonical)  # out.bias missing
    nan = checks.compare_outputs(np.full((4, 2), np.nan, np.float32), np.ones((4, 2), np.float32), "fp32")
    report = parity.ParityReport("blobs", "torch", ("torch", "jax"), (mode,), (
        parity.CheckRow(mode, "jax", "parameters", tuple(lost)), parity.CheckRow(mode, "jax", "outputs", tuple(nan))),
        {})
    monkeypatch.setattr(parity, "check_parity", lambda *args, **kwargs: report)
    assert main(["parity", "--workload", "mnist", "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out, parse_constant=not_json)
    assert (out["first_disagreement"]["item"], out["first_disagreement"]["error"]) == ("out.bias", None)
    assert "missing" in out["first_disagreement"]["note"]
    [outputs] = [c for c in out["checks"] if c["check"] == "outputs"]
    assert [(f["max_abs"], f["error"], f["tolerance"], f["ok"]) for f in outputs["findings"]] == [
        (None, None, 1e-5, False)]


class RacingGate(process._SignalGate):
    """The signal gate of bakeoff.run.process, whose ``held`` counts the blocks holding signals, but its first two
    reads of the count, from two threads, both happen before either thread writes it back: the interleaving that
    a thread switch between the read and the write of ``held += 1`` gives, made certain. Where each change of the
    count is made under a lock, the second thread waits at the lock instead, and the first goes on when its wait
    for the second times out."""

    def __init__(self) -> None:
        self._race: threading.Barrier | None = threading.Barrier(2, timeout=2.0)
        super().__init__()

    @property
    def held(self) -> int:
        value = self._held
        if self._race is not None:
            try:
                self._race.wait()
            except threading.BrokenBarrierError:
                pass  # the other thread did not come: it waits at the lock
            self._race = None
        return value

    @held.setter
    def held(self, value: int) -> None:
        self._held = value


@NEEDS  # check_parity plans for installed frameworks before it starts a probe
def test_probes_from_a_thread_pool_leave_the_signal_gate_balanced(monkeypatch):
    """bakeoff parity starts and ends its probes' process groups from a thread pool, and each start and end moves
    the signal gate's count of holders: a lost update would leave it at 1 or -1, and every later Ctrl-C held for
    good instead of interrupting."""
    from bakeoff.run import parity_session as parity

    gate = RacingGate()
    monkeypatch.setattr(process, "_GATE", gate)
    monkeypatch.setattr(parity, "usable_cores", lambda: 4)  # a pool of threads however few cores run the test
    monkeypatch.setattr(parity, "probe_command", lambda *a, **k: [sys.executable, "-c", "raise SystemExit(3)"])
    report = parity.check_parity("mnist", ["torch", "jax"], ["eager", "graph"])
    assert sorted(report.failed_runs.values()) == ["exit status 3"] * 4  # every probe ran, and failed as told
    assert gate.held == 0
    with pytest.raises(process.Interrupted):
        gate.handler(signal.SIGINT, None)  # not held: it interrupts


@NEEDS  # check_parity plans for installed frameworks before it starts a probe
def test_a_probe_its_engine_refuses_is_reported_by_its_reason_alone(monkeypatch):
    # A probe whose engine raises Unsupported exits UNSUPPORTED_EXIT, its reason the last line of its standard error
    # (the lines before it: a framework's import-time noise); any other failure keeps the end of its output.
    from bakeoff.run import parity_session as parity
    from bakeoff.trial.parity_probe import UNSUPPORTED_EXIT

    script = ("import sys; print('some import-time warning', file=sys.stderr); "
              "print('unsupported: no such mode on a CPU', file=sys.stderr); "
              f"sys.exit({UNSUPPORTED_EXIT} if 'jax' in sys.argv else 1)")
    monkeypatch.setattr(parity, "probe_command", lambda workload, framework, *a, **k: [sys.executable, "-c", script,
                                                                                      framework])
    report = parity.check_parity("mnist", ["torch", "jax"])
    assert report.failed_runs == {"jax eager fp32": "unsupported: no such mode on a CPU",
                                  "torch eager fp32": "some import-time warning\nunsupported: no such mode on a CPU"}


@pytest.mark.skipif(not registry.installed("torch"), reason="needs torch")
def test_parity_proves_the_model_the_users_data_builds(tmp_path):
    # `bakeoff parity` took no --data: it proved the shipped data's 2-class head while the run trained 5 classes.
    rows = ["body,stars"] + [f"word{i % 7} snack {i} taste{i % 5},{i % 5 + 1}" for i in range(300)]
    (tmp_path / "five.csv").write_text("\n".join(rows) + "\n")
    data = ("--data", "train=five.csv", "--data", "text_column=body", "--data", "label_column=stars")
    from bakeoff.run.parity_session import Mode, probe_command

    command = probe_command("text_classifier", "torch", Mode("eager", "fp32"), tmp_path / "p.npz",
                            data=(("train", "five.csv"), ("text_column", "body"), ("label_column", "stars")))
    assert command[command.index("--data"):] == list(data)
    probe = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PYTHONPATH": str(SRC)})
    assert probe.returncode == 0, probe.stderr[-2000:]
    arrays = np.load(tmp_path / "p.npz")
    assert arrays["init/head.bias"].shape == (5,) and arrays["grad/head.kernel"].shape[-1] == 5  # five classes
    shapes = bakeoff("list", "--presets", "--workload", "text_classifier", *data, cwd=tmp_path)  # the shape printer
    assert shapes.returncode == 0 and "num_classes=5" in shapes.stdout, shapes.stdout + shapes.stderr
    bad = bakeoff("parity", "--workload", "text_classifier", "--framework", "torch,jax", "--data", "train=none.csv",
                  cwd=tmp_path)
    assert bad.returncode == 2 and "none.csv" in bad.stderr, bad.stderr  # refused before any probe starts
