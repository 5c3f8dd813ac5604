"""A framework is one record (bakeoff.core.frameworks): every reader takes it from there, and what a record does not
list is refused before any process starts, naming what is accepted."""

from __future__ import annotations

import pytest

from bakeoff.analysis.conditions import FRAMEWORK_NAMES
from bakeoff.core import frameworks, registry
from bakeoff.core.spec import Framework, RunSpec, Status
from bakeoff.report.plots import colour
from bakeoff.run.executors import local
from bakeoff.trial import main as trial


def _spec(framework: str, **kw) -> RunSpec:
    return RunSpec(**{"workload": "mnist", "framework": framework, "max_steps": 1, **kw})


def test_every_framework_name_has_one_record_and_every_record_a_name():
    assert [f.value for f in Framework] == frameworks.names()
    for info in frameworks.FRAMEWORKS.values():
        assert info.executions and info.production and set(info.production) <= set(info.executions)
        assert set(info.compiled) <= set(info.executions)
        assert set(info.loads) <= set(frameworks.markers()), info.name
        assert set(info.execution_notes) == set(info.executions), info.name
        assert FRAMEWORK_NAMES[info.name] == info.display and colour(info.name) == info.colour


def test_the_keras_rows_run_keras_on_their_backend_and_load_only_it():
    for backend in ("jax", "torch", "tensorflow"):
        info = frameworks.get(f"keras-{backend}")
        assert info.env["KERAS_BACKEND"] == backend
        assert info.loads == frameworks.get(backend).loads
        assert info.name in registry.models("mnist") and info.name not in registry.models("speech_ctc")


@pytest.mark.parametrize(("spec", "words"), [
    (_spec("jax", execution="xla"), "jax.jit is XLA compilation: use graph; accepted: graph, eager"),
    (_spec("torch", execution="xla"), "PyTorch has no XLA mode here (torch_xla targets TPUs); accepted: eager, graph"),
    (_spec("jax", precision="fp16"), "JAX has no fp16 precision in bakeoff; accepted: fp32, bf16"),
    (_spec("jax", parallelism="parameter_server", workers=2), "JAX has no parameter-server strategy: it trains SPMD"),
    (_spec("keras-torch", workload="speech_ctc"),
     "Keras 3 on PyTorch has no speech_ctc implementation; speech_ctc is implemented in torch, tensorflow, jax"),
    (_spec("torch", parallelism="parameter_server", workers=2), "PyTorch has no built-in parameter-server strategy"),
])
def test_what_a_record_lacks_is_refused_before_any_process_starts(spec, words, tmp_path):
    assert words in registry.unsupported(spec)
    result = local.run_one(spec, 60, tmp_path)  # no process: the reason comes back at once
    assert result.status is Status.UNSUPPORTED and words in result.reason
    assert not list(tmp_path.iterdir())


def test_a_framework_not_installed_is_unsupported_with_its_install_command(monkeypatch, tmp_path):
    real = registry.importlib.util.find_spec
    monkeypatch.setattr(registry.importlib.util, "find_spec", lambda name: None if name == "optax" else real(name))
    result = local.run_one(_spec("jax"), 60, tmp_path)
    assert result.status is Status.UNSUPPORTED
    assert result.reason == "JAX is not installed (missing optax); install it with: pip install 'bakeoff[jax]'"


def test_a_trial_process_gets_its_records_environment():
    assert local._trial_env(_spec("keras-torch"), "/tmp")["KERAS_BACKEND"] == "torch"
    assert local._trial_env(_spec("tensorflow"), "/tmp")["KERAS_BACKEND"] == "tensorflow"
    assert local._trial_env(_spec("jax"), "/tmp")["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


class XlaRuntimeError(RuntimeError):
    pass


def test_out_of_memory_is_read_with_the_frameworks_own_markers():
    jax_oom = XlaRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB")
    assert trial._classify(jax_oom, "jax") is Status.OUT_OF_MEMORY
    assert trial._classify(jax_oom, "torch") is Status.FAILED  # not a marker of PyTorch's
    assert trial._classify(MemoryError(), "torch") is Status.OUT_OF_MEMORY
    assert trial._classify(type("ResourceExhaustedError", (Exception,), {})("OOM"), "tensorflow") \
        is Status.OUT_OF_MEMORY


def test_the_matmul_ceiling_and_the_deployment_adapter_are_named_in_the_record():
    from bakeoff.core import formats
    from bakeoff.measure.ceiling import family

    for name, info in frameworks.FRAMEWORKS.items():  # a Keras row multiplies with its backend's matmul
        backend = frameworks.get(family(name))
        assert info.matmul == backend.matmul == f"{backend.engine.split(':')[0]}:matmul_rates", name
    assert formats.exporting_frameworks() == ["torch", "tensorflow", "jax", "paddle"]
    assert [formats.adapter_module(n) for n in formats.exporting_frameworks()] == [
        "bakeoff.frameworks.torch.deploy", "bakeoff.frameworks.tensorflow.deploy", "bakeoff.frameworks.jax.deploy",
        "bakeoff.frameworks.paddle.deploy"]
    with pytest.raises(KeyError, match="bakeoff keeps and exports no keras-jax models"):
        formats.adapter_module("keras-jax")
