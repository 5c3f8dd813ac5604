"""Keras 3 on each backend (keras-jax, keras-torch, keras-tensorflow): the same Keras model code computes what the
native PyTorch and TensorFlow models compute, and trains alike, with the tolerances of tests/parity_checks.py.

Each probe is one framework in one process with its ``KERAS_BACKEND`` set explicitly: the native ones are
``python -m bakeoff.trial.parity_probe``; a Keras one is this file run as a script (``python
tests/test_keras_backends.py WORKLOAD FRAMEWORK EXECUTION OUT.npz``), which runs the same
``bakeoff.trial.parity_probe.probe`` and adds an exact-resume check and the frameworks its process loaded.

Modes probed, to keep the file near 2 minutes on 2 cores: each backend in Keras' compiled mode where it is cheap
(jax.jit; tf.function) and eagerly on torch (Keras' torch default; torch.compile of Keras' step costs minutes on 2
cores, and eager JAX compiles each op once, ~250 XLA compiles, ~45 s) — those two are measured in the report.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # parity_checks, when this file runs as a probe script

import parity_checks  # noqa: E402
from parity_checks import (  # noqa: E402
    Mode,
    Probes,
    check_accumulation,
    check_gradients,
    check_losses,
    check_outputs,
    check_weights,
)

STEPS = parity_checks.STEPS  # training steps per probe, the native probes' (test_parity.py's, shared)
BACKENDS = {"keras-jax": "jax", "keras-torch": "torch", "keras-tensorflow": "tensorflow"}
EXECUTION = {"keras-jax": "graph", "keras-torch": "eager", "keras-tensorflow": "graph"}
# tiny preset, the native models' exact counts (tests/test_parity.py spells them out)
PARAMS = {"text_classifier": 331_201, "mnist": 5_258}
NATIVE = (Mode("torch"), Mode("tensorflow"))
CASES = [(w, fw) for w in PARAMS for fw in BACKENDS]


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _command(workload: str, mode: Mode, out: Path) -> list[str]:
    env = ["env", f"KERAS_BACKEND={BACKENDS[mode.framework]}", "TF_CPP_MIN_LOG_LEVEL=2"]
    return [*env, sys.executable, __file__, workload, mode.framework, mode.execution, str(out)]


class KerasProbes:
    """The Keras probes (this file as a script), and the native eager ones from the session's parity probes
    (``python -m bakeoff.trial.parity_probe``, the same STEPS: run once for this file and tests/test_parity.py)."""

    def __init__(self, keras: Probes, native: Probes) -> None:
        self.keras, self.native = keras, native

    def get(self, workload: str, mode: Mode) -> dict[str, np.ndarray]:
        return (self.keras if mode.framework in BACKENDS else self.native).get(workload, mode)


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory, parity_probes: Probes) -> KerasProbes:
    return KerasProbes(Probes(tmp_path_factory.mktemp("keras"), _command), parity_probes)


def _keras(probes: KerasProbes, workload: str, framework: str) -> dict[str, np.ndarray]:
    for module in ("keras", BACKENDS[framework]):
        if not _installed(module):
            pytest.skip(f"{framework} needs {module}: pip install 'bakeoff[keras]' and the backend")
    return probes.get(workload, Mode(framework, EXECUTION[framework]))


def _native(probes: KerasProbes, workload: str, framework: str) -> dict[str, np.ndarray]:
    if not _installed(framework):
        pytest.skip(f"the native {framework} model needs {framework} installed")
    return probes.get(workload, Mode(framework))


@pytest.mark.parametrize(("workload", "framework"), CASES)
def test_parameter_counts_equal_the_native_ones(probes: KerasProbes, workload: str, framework: str) -> None:
    assert int(_keras(probes, workload, framework)["num_params"]) == PARAMS[workload]
    assert int(_native(probes, workload, "torch")["num_params"]) == PARAMS[workload]


@pytest.mark.parametrize(("workload", "framework"), CASES)
def test_outputs_match_the_native_models_with_copied_weights(probes: KerasProbes, workload: str,
                                                             framework: str) -> None:
    k = _keras(probes, workload, framework)
    assert bool(k["roundtrip_same_keys"]) and float(k["roundtrip_max_err"]) == 0.0
    for native in ("torch", "tensorflow"):
        n = _native(probes, workload, native)
        check_outputs(k, n, "fp32", "outputs")
        check_outputs(k, n, "fp32", "outputs_perturbed")  # every canonical-name mapping exercised


@pytest.mark.parametrize(("workload", "framework"), CASES)
def test_training_matches_native_torch(probes: KerasProbes, workload: str, framework: str) -> None:
    """Losses per step, gradients per tensor, weights after training: Keras' own train step against PyTorch."""
    k, torch = _keras(probes, workload, framework), _native(probes, workload, "torch")
    check_losses(k["losses"], torch["losses"], "fp32")
    check_gradients(k, torch, "grad")
    check_gradients(k, torch, "grad_accum")
    check_weights(k, torch)


@pytest.mark.parametrize(("workload", "framework"), CASES)
def test_gradient_accumulation_is_exact(probes: KerasProbes, workload: str, framework: str) -> None:
    """4 micro-batches give the batch's gradient (the probe), and Keras' gradient_accumulation_steps trains as
    the plain run on the same examples does."""
    check_accumulation(_keras(probes, workload, framework))


@pytest.mark.parametrize("framework", list(BACKENDS))
def test_checkpoint_resumes_exactly_with_dropout(probes: KerasProbes, framework: str) -> None:
    k = _keras(probes, "mnist", framework)
    straight, resumed = k["resume_straight"], k["resume_resumed"]
    assert len(straight) == 4 and len(resumed) == 2
    np.testing.assert_allclose(resumed, straight[2:], rtol=1e-6)
    assert abs(straight[0] - float(k["losses"][0])) > 1e-3  # dropout on, against off: it really draws masks


@pytest.mark.parametrize("framework", list(BACKENDS))
def test_a_keras_process_loads_its_backend_only(probes: KerasProbes, framework: str) -> None:
    """Keras 3.15 imports JAX (keras.callbacks.orbax_checkpoint) and set_random_seed imports TensorFlow on every
    backend, when installed; the engine blocks both optional imports on the other backends."""
    loaded = set(_keras(probes, "mnist", framework)["frameworks_loaded"].tolist())
    assert loaded == {BACKENDS[framework]}, loaded


def test_a_keras_jax_trial_runs_end_to_end(tmp_path: Path) -> None:
    """``python -m bakeoff.trial`` on keras-jax: status ok, a trained model, Keras' compiled step counted once."""
    if not (_installed("keras") and _installed("jax")):
        pytest.skip("keras-jax needs keras and jax installed")
    from bakeoff.core.spec import RunSpec

    spec = RunSpec(workload="mnist", framework="keras-jax", execution="graph", batch_size=32, max_steps=40,
                   eval_every=20, warmup_steps=1, seed=0, device="cpu")
    (tmp_path / "spec.json").write_text(json.dumps(spec.to_dict()))
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2"}
    run = subprocess.run([sys.executable, "-m", "bakeoff.trial", str(tmp_path / "spec.json"),
                          str(tmp_path / "result.json")], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "ok", result["reason"]
    assert result["num_params"] == PARAMS["mnist"] and len(result["losses"]) == 40
    assert result["final_metric"] > 0.5  # 40 steps of batch 32: well above chance (0.10)
    assert result["environment"]["compiled"] == "jax.jit" and result["training"]["graph_builds"] == 1
    assert set(result["environment"]["frameworks_loaded"]) == {"jax"}


# --- the probe: this file run as a script, in a process of its own ---------------------------------------------


def _loaded_frameworks() -> list[str]:
    tops = {name.partition(".")[0] for name in sys.modules}
    with open("/proc/self/maps") as f:
        maps = f.read()
    libraries = {"jax": "/jaxlib/", "torch": "libtorch", "tensorflow": "libtensorflow"}
    return sorted(fw for fw, lib in libraries.items() if fw in tops or lib in maps)


def _resume_losses(workload_name: str, framework: str, execution: str, tmp: Path) -> dict[str, np.ndarray]:
    """Four steps straight, against two steps, a checkpoint, a fresh engine that loads it and two more steps —
    dropout on, so the Dropout layers' seed states must come back too."""
    from bakeoff.core.spec import RunSpec
    from bakeoff.trial.build import build_trial

    def engine():  # noqa: ANN202
        spec = RunSpec(workload=workload_name, framework=framework, execution=execution, batch_size=16,
                       max_steps=4, seed=0, device="cpu")
        parts = build_trial(spec)
        return parts.build_engine(), list(islice(parts.workload.batches(parts.data.train, 16, 0, 0), 4))

    a, batches = engine()
    straight = [a.train_step([b]) for b in batches]
    b, _ = engine()
    for batch in batches[:2]:
        b.train_step([batch])
    b.save_checkpoint(tmp)
    c, _ = engine()
    c.load_checkpoint(tmp)
    resumed = [c.train_step([batch]) for batch in batches[2:]]
    return {"resume_straight": np.array(straight), "resume_resumed": np.array(resumed)}


def _probe(workload: str, framework: str, execution: str, out: Path) -> None:
    import tempfile

    from bakeoff.trial import parity_probe as parity

    arrays = parity.probe(workload, framework, steps=STEPS, execution=execution, accum_steps=STEPS)
    if workload == "mnist":
        with tempfile.TemporaryDirectory() as tmp:
            arrays.update(_resume_losses(workload, framework, execution, Path(tmp)))
    arrays["frameworks_loaded"] = np.array(_loaded_frameworks())
    np.savez(out, **arrays)


if __name__ == "__main__":
    _probe(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4]))
