"""Where each workload, model implementation and engine lives, imported only when a trial needs it.

Nothing here imports a framework: :func:`installed` asks importlib whether one *could* be imported.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from bakeoff.spec import Execution, Framework, SpecError, Workload

WORKLOADS: dict[str, str] = {
    "text_classifier": "bakeoff.workloads.text_classifier.workload:TextClassifierWorkload",
    "speech_ctc": "bakeoff.workloads.speech_ctc.workload:SpeechCTCWorkload",
    "autoencoder": "bakeoff.workloads.autoencoder.workload:AutoencoderWorkload",
    "mnist": "bakeoff.workloads.mnist.workload:MnistWorkload",
}

# Each workload's model, one module per framework, the same class name in each (as AlgoPerf does).
MODELS: dict[tuple[str, str], str] = {
    ("text_classifier", "torch"): "bakeoff.workloads.text_classifier.torch_model:TextClassifier",
    ("text_classifier", "tensorflow"): "bakeoff.workloads.text_classifier.tf_model:TextClassifier",
    ("speech_ctc", "torch"): "bakeoff.workloads.speech_ctc.torch_model:SpeechCTC",
    ("speech_ctc", "tensorflow"): "bakeoff.workloads.speech_ctc.tf_model:SpeechCTC",
    ("autoencoder", "torch"): "bakeoff.workloads.autoencoder.torch_model:TransformerAutoencoder",
    ("autoencoder", "tensorflow"): "bakeoff.workloads.autoencoder.tf_model:TransformerAutoencoder",
    ("mnist", "torch"): "bakeoff.workloads.mnist.torch_model:MnistCNN",
    ("mnist", "tensorflow"): "bakeoff.workloads.mnist.tf_model:MnistCNN",
}

ENGINES: dict[str, str] = {
    "torch": "bakeoff.engines.torch_engine:TorchEngine",
    "tensorflow": "bakeoff.engines.tf_engine:TensorFlowEngine",
}

# The package each framework is imported as, and how a user installs it.
FRAMEWORK_MODULES = {"torch": "torch", "tensorflow": "tensorflow", "jax": "jax"}
INSTALL_HINTS = {
    "torch": "pip install 'bakeoff[torch]'",
    "tensorflow": "pip install 'bakeoff[tf]'",
    "jax": "pip install jax (no bakeoff engine for JAX yet)",
}

# The distributions whose versions a trial's result depends on (the first one installed names the framework).
FRAMEWORK_DISTS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "tensorflow": ("tensorflow", "tensorflow-cpu", "keras"),
    "jax": ("jax", "jaxlib"),
}

# Execution modes each framework's engine implements.
EXECUTIONS: dict[str, tuple[Execution, ...]] = {
    "torch": (Execution.EAGER, Execution.GRAPH),
    "tensorflow": (Execution.EAGER, Execution.GRAPH, Execution.XLA),
}


# How each framework's users train, by default: the modes a verdict must include to judge a framework fairly.
# Keras' model.fit runs a tf.function unless told otherwise; PyTorch users train eagerly, torch.compile is opt-in.
PRODUCTION_EXECUTIONS: dict[str, tuple[Execution, ...]] = {
    "torch": (Execution.EAGER, Execution.GRAPH),
    "tensorflow": (Execution.GRAPH, Execution.XLA),
}

# Each framework's compiled modes (a verdict without any of them says so).
COMPILED_EXECUTIONS: dict[str, tuple[Execution, ...]] = {
    "torch": (Execution.GRAPH,),
    "tensorflow": (Execution.GRAPH, Execution.XLA),
}


# What betrays a framework loaded into a process: its top-level Python packages, and substrings of the paths of
# its shared libraries. A trial that finds another framework than its own loaded fails (bakeoff.measure.isolation).
LOADED_MARKERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "torch": (("torch",), ("libtorch", "libc10")),
    "tensorflow": (("tensorflow",), ("libtensorflow",)),
    "jax": (("jax", "jaxlib"), ("/jaxlib/",)),
}


def load(target: str) -> Any:
    """Import ``"module:attr"`` and return the attribute."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def installed(framework: str) -> bool:
    """Whether the framework's package is importable, without importing it."""
    return importlib.util.find_spec(FRAMEWORK_MODULES[framework]) is not None


def check_workload(name: str) -> None:
    if name not in WORKLOADS:
        raise SpecError(f"unknown workload {name!r}; accepted: {', '.join(WORKLOADS)}")


def workload(name: str) -> Workload:
    check_workload(name)
    return load(WORKLOADS[name])()


def model_class(workload_name: str, framework: str | Framework) -> Any:
    key = (workload_name, str(framework))
    if key not in MODELS:
        have = sorted(f for w, f in MODELS if w == workload_name)
        raise SpecError(f"no {framework} implementation of {workload_name}; available: {', '.join(have)}")
    return load(MODELS[key])


def engine_class(framework: str | Framework) -> Any:
    name = str(framework)
    if name not in ENGINES:
        raise SpecError(f"no engine for framework {name!r}; available: {', '.join(ENGINES)}")
    return load(ENGINES[name])
