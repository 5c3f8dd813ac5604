"""Where each workload, model implementation and engine lives, imported only when a trial needs it, and what a
spec's framework can run (from its record, :mod:`bakeoff.core.frameworks`).

Nothing here imports a framework: :func:`installed` asks importlib whether one *could* be imported.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from bakeoff.core import frameworks
from bakeoff.core.spec import Framework, Parallelism, RunSpec, SpecError
from bakeoff.core.workload import Workload

WORKLOADS: dict[str, str] = {
    "text_classifier": "bakeoff.workloads.text_classifier.workload:TextClassifierWorkload",
    "speech_ctc": "bakeoff.workloads.speech_ctc.workload:SpeechCTCWorkload",
    "autoencoder": "bakeoff.workloads.autoencoder.workload:AutoencoderWorkload",
    "mnist": "bakeoff.workloads.mnist.workload:MnistWorkload",
}

# Each workload's model class, the same name in every framework's module (as AlgoPerf does); where the module is
# is the framework's record (bakeoff.core.frameworks).
MODEL_CLASSES: dict[str, str] = {
    "text_classifier": "TextClassifier",
    "speech_ctc": "SpeechCTC",
    "autoencoder": "TransformerAutoencoder",
    "mnist": "MnistCNN",
}

MODELS: dict[tuple[str, str], str] = {
    (w, fw): info.model(w, cls) for fw, info in frameworks.FRAMEWORKS.items()
    for w, cls in MODEL_CLASSES.items() if info.implements(w)}
"""``(workload, framework) -> "module:Class"``."""


def unsupported(spec: RunSpec) -> str:
    """Why ``spec`` cannot run here, decided before any process starts ('' when it can): a workload, mode,
    precision or strategy its framework's record does not list, with the accepted ones named."""
    info = spec.info
    name = info.display
    if not info.implements(spec.workload):
        return f"{name} has no {spec.workload} implementation; it implements {', '.join(info.workloads or ())}"
    if spec.execution not in info.executions:
        why = info.missing_modes.get(spec.execution, f"{name} has no {spec.execution.value} execution mode")
        return (f"{why}; accepted: "
                f"{', '.join(e.value for e in info.executions)}")
    if spec.precision not in info.precisions:
        return (f"{name} has no {spec.precision.value} precision in bakeoff; accepted: "
                f"{', '.join(p.value for p in info.precisions)}")
    if spec.parallelism is Parallelism.HOROVOD:
        if importlib.util.find_spec("horovod") is None:
            return ("Horovod is not installed; its last release (0.28.1) does not build against TensorFlow 2.21 or "
                    "PyTorch 2.13 here")
        return "Horovod is installed, but bakeoff has no horovodrun launcher yet"
    if spec.parallelism in info.missing_strategies:
        return info.missing_strategies[spec.parallelism]
    if spec.parallelism not in info.launchers:
        accepted = ", ".join(p.value for p in info.launchers)
        return f"{name} has no {spec.parallelism.value} mode in bakeoff; accepted: {accepted}"
    if (spec.parallelism, spec.execution) in info.missing_executions:
        return info.missing_executions[spec.parallelism, spec.execution]
    if spec.parallelism is not Parallelism.NONE and spec.checkpoint_every:
        return "checkpoints are not kept under distributed training yet: drop checkpoint_every"
    return ""


def launcher(spec: RunSpec) -> str:
    """The launcher that starts ``spec``'s processes (:mod:`bakeoff.run.launchers`)."""
    return spec.info.launchers[spec.parallelism]


def not_installed(framework: str) -> str:
    """Why ``framework``'s trials cannot run in this environment ('' when they can), with the install command."""
    info = frameworks.get(framework)
    missing = [m for m in info.modules if importlib.util.find_spec(m) is None]
    if not missing:
        return ""
    return f"{info.display} is not installed (missing {', '.join(missing)}); install it with: {info.install_hint}"


def load(target: str) -> Any:
    """Import ``"module:attr"`` and return the attribute."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def installed(framework: str) -> bool:
    """Whether the framework's packages are importable, without importing them."""
    return not not_installed(framework)


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
    if name not in frameworks.FRAMEWORKS:
        raise SpecError(f"no engine for framework {name!r}; available: {', '.join(frameworks.FRAMEWORKS)}")
    return load(frameworks.get(name).engine)
