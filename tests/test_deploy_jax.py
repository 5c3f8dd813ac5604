"""JAX's deployment adapter and runtime, in this process: the native params file's round trip, and each JAX format
(jax.export, jax2tf's SavedModel) exported from every workload's tiny model, run by its runtime and compared with
the Flax model within the format's tolerance — on test examples, at batch 1 (the harness's latency calls), and on
the harness's probe batch (another batch size, half the sequence length), which is what the ``dynamic: yes``
claims rest on. Weights are perturbed from the initial ones (non-zero biases, non-unit LayerNorm), so every
mapping matters.

Measured (jaxlib 0.10.2, tensorflow-cpu 2.21, 2-core CPU): jax.export reproduces the jitted Flax model bit for bit
(difference 0.0 on every workload and shape); jax2tf's SavedModel differs by at most 1.9e-6 (speech and the
autoencoder: TensorFlow's XLA compiles the same StableHLO with its own settings), against a tolerance of 1e-4.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bakeoff.core import formats, registry
from bakeoff.deploy import Unsupported
from bakeoff.deploy.exporting import probe_batch
from deploy_setups import EXAMPLES, WORKLOADS, Runner, runner, setups_fixture, worst

pytestmark = pytest.mark.skipif(not registry.installed("jax"), reason="needs jax installed (pip install jax)")

FORMATS = [f.name for f in formats.for_framework("jax")]


setups = setups_fixture("jax")


def _runner(fmt: str, path: Path) -> Runner:
    """At the runtime's default threads (0), so this process's TensorFlow settings stay as other tests find them."""
    return runner(fmt, path, 0)


def _needs(fmt: str) -> None:
    if fmt == "jax2tf" and not registry.installed("tensorflow"):
        pytest.skip("jax2tf needs tensorflow installed")


_worst = worst


# --- the native file ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("workload", WORKLOADS)
def test_native_params_round_trip_exactly(setups, workload):
    from bakeoff.frameworks.jax import deploy as jax_deploy

    s = setups(workload)
    assert s.saved == [jax_deploy.NATIVE_FILE] and (s.directory / jax_deploy.NATIVE_FILE).is_file()
    loaded = s.model.impl.get_weights(s.model.params)
    assert sorted(loaded) == sorted(s.weights)
    for name, value in s.weights.items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)
    direct = jax_deploy.JaxModel(workload, s.model.impl, s.model.impl.init(s.weights))
    np.testing.assert_array_equal(jax_deploy.predict(s.model, s.inputs), jax_deploy.predict(direct, s.inputs))


def test_load_model_refuses_a_config_the_file_does_not_fit(setups):
    from bakeoff.frameworks.jax import deploy as jax_deploy

    s = setups("text_classifier")
    with pytest.raises(ValueError, match="blocks.1.attn.q.kernel"):  # a block the config drops: not ignored
        jax_deploy.load_model(s.workload, {**s.config, "num_layers": 1}, s.directory)
    with pytest.raises(ValueError, match="expected shape"):
        jax_deploy.load_model(s.workload, {**s.config, "d_ff": 64}, s.directory)


def test_predict_is_the_workload_outputs(setups):
    """Probabilities (B,) of the positive class for the binary text classifier, each row of MNIST's summing to 1."""
    from bakeoff.frameworks.jax import deploy as jax_deploy

    text = jax_deploy.predict(setups("text_classifier").model, setups("text_classifier").inputs)
    assert text.shape == (EXAMPLES,) and text.dtype == np.float32 and np.all((text > 0) & (text < 1))
    digits = jax_deploy.predict(setups("mnist").model, setups("mnist").inputs)
    np.testing.assert_allclose(digits.sum(-1), 1.0, rtol=1e-6)


# --- the formats ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_export_matches_the_flax_model_at_every_shape(setups, workload, fmt):
    from bakeoff.frameworks.jax import deploy as jax_deploy

    _needs(fmt)
    s = setups(workload)
    path, info = s.export(fmt)
    assert path.exists() and info["files"] == [path.name]
    named = list(dict.fromkeys(a for names in s.axes.values() for a in names if a))
    assert info["dynamic"] == {a: "yes" for a in named}  # the claims the probe below tests
    run = _runner(fmt, path)
    tolerance = formats.FORMATS[fmt].tolerance
    probe = probe_batch(s.test, s.axes)  # the harness's own: 3 examples, seq / frames cut to half
    for inputs in (s.inputs, {k: v[:1] for k, v in s.inputs.items()}, probe):
        got = run(inputs)
        assert got.dtype == np.float32
        assert _worst(got, jax_deploy.predict(s.model, inputs)) <= tolerance, {k: v.shape for k, v in inputs.items()}
    if workload == "speech_ctc":  # T' = ceil(ceil(frames / 2) / 2): the symbolic output length follows the input
        frames = probe["features"].shape[1]
        for _ in range(2):
            frames = (frames + 1) // 2
        assert run(probe).shape == (3, frames, s.config["vocab_size"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_runtimes_cast_the_data_dtypes(setups, fmt):
    """int64 tokens (as a tokenizer may give them) are cast to the int32 the model declares."""
    _needs(fmt)
    s = setups("text_classifier")
    run = _runner(fmt, s.export(fmt)[0])
    tokens = s.inputs["tokens"]
    np.testing.assert_array_equal(run({"tokens": tokens.astype(np.int64)}), run({"tokens": tokens.astype(np.int32)}))


def test_jax_export_refuses_a_sequence_past_the_position_table(setups):
    """The dynamic seq axis is bounded by the learned position table (seq_len rows): shorter runs (tested above),
    longer is refused by the module's shape check rather than computed with missing positions."""
    s = setups("text_classifier")
    run = _runner("jax-export", s.export("jax-export")[0])
    too_long = np.ones((1, s.config["seq_len"] + 1), np.int32)
    with pytest.raises(Exception, match="refining shapes"):  # jax.export's words, not naming the bound
        run({"tokens": too_long})


def test_speech_inputs_share_one_batch_symbol(setups):
    """features and feature_lengths have one batch axis: the exported module refuses them of different sizes."""
    s = setups("speech_ctc")
    run = _runner("jax-export", s.export("jax-export")[0])
    with pytest.raises(Exception, match="batch"):
        run({"features": s.inputs["features"][:2], "feature_lengths": s.inputs["feature_lengths"][:3]})


def test_jax_export_file_runs_without_flax_or_model_code(setups, tmp_path):
    """A fresh process with the jax runtime only: the file holds the whole program and its params."""
    s = setups("mnist")
    path = s.export("jax-export")[0]
    np.save(tmp_path / "images.npy", s.inputs["images"])
    script = (
        "import json, sys, numpy as np\n"
        "from bakeoff.frameworks.jax import runtime as jax_runtime\n"
        f"run = jax_runtime.load_runtime('jax-export', {str(path)!r}, 1)\n"
        f"np.save({str(tmp_path / 'out.npy')!r}, run({{'images': np.load({str(tmp_path / 'images.npy')!r})}}))\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in "
        "('flax', 'optax', 'tensorflow', 'torch')} | {m for m in sys.modules if m.startswith('bakeoff.workloads')})))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
    from bakeoff.frameworks.jax import deploy as jax_deploy

    assert _worst(np.load(tmp_path / "out.npy"), jax_deploy.predict(s.model, s.inputs)) <= formats.FLOAT_TOLERANCE


def test_a_converter_failure_raises_its_own_error(setups, tmp_path):
    """Claiming MNIST's image height and width dynamic: the flatten into the dense layer cannot be symbolic, and
    jax.export says so (a failure, recorded with its message), not Unsupported."""
    from bakeoff.frameworks.jax import deploy as jax_deploy

    s = setups("mnist")
    with pytest.raises(Exception) as caught:
        jax_deploy.export(s.model, "jax-export", tmp_path / "model.jaxexport", s.inputs,
                          {"images": ("batch", "height", "width")})
    assert not isinstance(caught.value, Unsupported) and "height" in str(caught.value)
    with pytest.raises(ValueError, match="accepted: jax-export, jax2tf"):
        jax_deploy.export(s.model, "torchscript", tmp_path / "model.ts", s.inputs, s.axes)


def test_runtime_refuses_other_formats(setups):
    from bakeoff.frameworks.jax import runtime as jax_runtime

    with pytest.raises(ValueError, match="jax-export"):
        jax_runtime.load_runtime("jax2tf", setups("mnist").export("jax-export")[0], 1)
    assert jax_runtime.runtime_version().startswith("jax ")
