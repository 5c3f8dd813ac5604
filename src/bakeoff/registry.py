"""Where each workload, model implementation and engine lives, imported only when a trial needs it.

Nothing here imports a framework: :func:`installed` asks importlib whether one *could* be imported.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from bakeoff.spec import Execution, Framework, Parallelism, RunSpec, SpecError, Workload

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
    ("text_classifier", "jax"): "bakeoff.workloads.text_classifier.jax_model:TextClassifier",
    ("speech_ctc", "jax"): "bakeoff.workloads.speech_ctc.jax_model:SpeechCTC",
    ("autoencoder", "jax"): "bakeoff.workloads.autoencoder.jax_model:TransformerAutoencoder",
    ("mnist", "jax"): "bakeoff.workloads.mnist.jax_model:MnistCNN",
    **{(w, f"keras-{b}"): f"bakeoff.workloads.{w}.keras_model:{c}"
       for w, c in (("text_classifier", "TextClassifier"), ("mnist", "MnistCNN"))
       for b in ("jax", "torch", "tensorflow")},
}

ENGINES: dict[str, str] = {
    "torch": "bakeoff.engines.torch_engine:TorchEngine",
    "tensorflow": "bakeoff.engines.tf_engine:TensorFlowEngine",
    "jax": "bakeoff.engines.jax_engine:JaxEngine",
    **{f"keras-{b}": "bakeoff.engines.keras_engine:KerasEngine" for b in ("jax", "torch", "tensorflow")},
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


# Parallelism each framework's engine implements, and the launcher that starts its processes
# (bakeoff.launch.launchers): "single" (one process: also MirroredStrategy over the devices it sees), "torchrun"
# (one torchrun agent, N processes), "torchrun_nodes" (one agent per node: multi-worker), "tf_config" (N
# processes with TF_CONFIG), "tf_parameter_server" (a chief, workers and parameter servers).
LAUNCHERS: dict[tuple[str, Parallelism], str] = {
    ("torch", Parallelism.NONE): "single",
    ("torch", Parallelism.DATA_PARALLEL): "torchrun",
    ("torch", Parallelism.MULTI_WORKER): "torchrun_nodes",
    ("tensorflow", Parallelism.NONE): "single",
    ("tensorflow", Parallelism.DATA_PARALLEL): "single",
    ("tensorflow", Parallelism.MULTI_WORKER): "tf_config",
    ("tensorflow", Parallelism.PARAMETER_SERVER): "tf_parameter_server",
}

# Why a framework lacks a strategy, where it does (recorded as the trial's reason, status unsupported).
MISSING_STRATEGIES: dict[tuple[str, Parallelism], str] = {
    ("torch", Parallelism.PARAMETER_SERVER): (
        "PyTorch has no built-in parameter-server strategy (torch.distributed.rpc's parameter-server example is a "
        "tutorial, not a maintained strategy); PyTorch trains data-parallel: use data_parallel or multi_worker"),
}


# Execution modes a framework's strategy cannot run, and why (measured: TensorFlow 2.21 on CPU).
MISSING_EXECUTIONS: dict[tuple[str, Parallelism, Execution], str] = {
    ("tensorflow", Parallelism.PARAMETER_SERVER, Execution.EAGER): (
        "ParameterServerStrategy trains through ClusterCoordinator.schedule, which accepts only a tf.function "
        "(eager ops would run on the chief, not on the workers): use execution graph"),
    ("tensorflow", Parallelism.PARAMETER_SERVER, Execution.XLA): (
        "XLA cannot compile a parameter-server step: an XLA cluster runs on one device and the variables live on "
        "the parameter server (measured, TF 2.21: the whole step fails with 'KernelAndDeviceOp does not support "
        "EagerFunctionParams', the gradients alone with 'Trying to access resource ... located in device "
        "/job:ps/... from device /job:worker/...'): use execution graph"),
}


def unsupported(spec: RunSpec) -> str:
    """Why ``spec`` cannot run here, decided before any process starts ('' when it can)."""
    framework = spec.framework.value
    if framework not in ENGINES:
        return f"bakeoff has no {framework} engine yet"
    if spec.parallelism is Parallelism.HOROVOD:
        if importlib.util.find_spec("horovod") is None:
            return ("Horovod is not installed; its last release (0.28.1) does not build against TensorFlow 2.21 or "
                    "PyTorch 2.13 here")
        return "Horovod is installed, but bakeoff has no horovodrun launcher yet"
    if (framework, spec.parallelism) in MISSING_STRATEGIES:
        return MISSING_STRATEGIES[framework, spec.parallelism]
    if (framework, spec.parallelism) not in LAUNCHERS:
        accepted = ", ".join(p.value for f, p in LAUNCHERS if f == framework)
        return f"{framework} has no {spec.parallelism.value} mode in bakeoff; accepted: {accepted}"
    if (framework, spec.parallelism, spec.execution) in MISSING_EXECUTIONS:
        return MISSING_EXECUTIONS[framework, spec.parallelism, spec.execution]
    if spec.parallelism is not Parallelism.NONE and spec.checkpoint_every:
        return "checkpoints are not kept under distributed training yet: drop checkpoint_every"
    return ""


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
