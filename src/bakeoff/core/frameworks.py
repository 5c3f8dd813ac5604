"""What bakeoff knows about each framework, one record per framework: everything outside a framework's own engine
and model files reads it from here (a trial's environment, the trial's isolation guard and
out-of-memory classification, the environment fingerprint, versions in trial keys, the decision's names and
production modes, the plots' colours, the CLI's listing and help).

Adding a framework is its record below, its engine (``engines/<name>_engine.py``), its model files
(``workloads/<workload>/<model_module>.py``, the same class names as the others': a workload is implemented in
the frameworks whose file it has), suites and tests. Nothing here
imports a framework.

A *row* is what a user picks with ``--framework``: usually one framework, but a Keras 3 row is the same Keras model
code on one backend (``keras-jax``, ``keras-torch``, ``keras-tensorflow``), so it loads that backend's framework
and is judged against the native rows like any other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

from bakeoff.core.spec import Execution, Parallelism, Precision

__all__ = ["FRAMEWORKS", "FrameworkInfo", "LoadMarkers", "get", "markers", "names"]


@dataclasses.dataclass(frozen=True)
class LoadMarkers:
    """What betrays a framework loaded into a process: its top-level Python packages, and substrings of the paths
    of its shared libraries (:mod:`bakeoff.measure.isolation`)."""

    packages: tuple[str, ...]
    libraries: tuple[str, ...]


def _frozen(mapping: Mapping | None = None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


@dataclasses.dataclass(frozen=True)
class FrameworkInfo:
    """One framework row (module docstring)."""

    name: str  # what --framework takes, and the value of spec.Framework
    display: str  # what a report calls it
    colour: str  # its colour in every plot
    modules: tuple[str, ...]  # importable packages it needs (installed() finds them all without importing)
    extra: str  # bakeoff's pip extra that installs it
    dists: tuple[str, ...]  # distributions whose versions a trial's result depends on (in trial keys)
    engine: str  # "module:Class" of its engine
    model_module: str  # <model_module>.py beside a workload's module holds its model (bakeoff.core.discover)
    executions: tuple[Execution, ...]  # what its engine implements, first the default
    execution_notes: Mapping[Execution, str]  # what each mode is in this framework's own words
    production: tuple[Execution, ...]  # how its users train by default: a verdict must include one of these
    compiled: tuple[Execution, ...]  # its compiled modes (a verdict without any of them says so)
    precisions: tuple[Precision, ...]  # what its engine implements (device limits are the engine's to say)
    launchers: Mapping[Parallelism, str]  # parallelism -> launcher (bakeoff.run.launchers)
    strategies: Mapping[Parallelism, str]  # parallelism -> what its users call the strategy ("DDP")
    missing_modes: Mapping[Execution, str] = dataclasses.field(default_factory=_frozen)  # modes it lacks: why
    missing_strategies: Mapping[Parallelism, str] = dataclasses.field(default_factory=_frozen)  # and why
    missing_executions: Mapping[tuple[Parallelism, Execution], str] = dataclasses.field(default_factory=_frozen)
    loads: tuple[str, ...] = ()  # the frameworks (by marker) its trial process legitimately loads
    markers: LoadMarkers | None = None  # when it is a framework of its own that a process can load
    env: Mapping[str, str] = dataclasses.field(default_factory=_frozen)  # set in its trial processes
    oom_markers: tuple[str, ...] = ()  # substrings of an exception's type name or message meaning out of memory
    matmul: str = ""  # "module:function" timing its matmul (the MFU ceiling, bakeoff.measure.ceiling)
    deploy: str = ""  # the module that keeps and exports its models (bakeoff.deploy); "" when bakeoff does not

    @property
    def install_hint(self) -> str:
        return f"pip install 'bakeoff[{self.extra}]'"


_ONE = {Parallelism.NONE: "single"}

_TORCH = FrameworkInfo(
    name="torch", display="PyTorch", colour="#ee4c2c", modules=("torch",), extra="torch", dists=("torch",),
    engine="bakeoff.frameworks.torch.engine:TorchEngine", model_module="torch_model",
    matmul="bakeoff.frameworks.torch.engine:matmul_rates", deploy="bakeoff.frameworks.torch.deploy",
    executions=(Execution.EAGER, Execution.GRAPH),
    execution_notes=_frozen({Execution.EAGER: "PyTorch eager", Execution.GRAPH: "torch.compile of the whole step"}),
    # PyTorch users train eagerly; torch.compile is opt-in.
    production=(Execution.EAGER, Execution.GRAPH), compiled=(Execution.GRAPH,),
    precisions=(Precision.FP32, Precision.BF16, Precision.FP16),
    missing_modes=_frozen({Execution.XLA: "PyTorch has no XLA mode here (torch_xla targets TPUs)"}),
    # "torchrun": one agent, N processes; "torchrun_nodes": one agent per node (multi-worker).
    launchers=_frozen({**_ONE, Parallelism.DATA_PARALLEL: "torchrun", Parallelism.MULTI_WORKER: "torchrun_nodes"}),
    strategies=_frozen({Parallelism.DATA_PARALLEL: "DDP", Parallelism.MULTI_WORKER: "DDP multi-worker"}),
    missing_strategies=_frozen({Parallelism.PARAMETER_SERVER: (
        "PyTorch has no built-in parameter-server strategy (torch.distributed.rpc's parameter-server example is a "
        "tutorial, not a maintained strategy); PyTorch trains data-parallel: use data_parallel or multi_worker")}),
    loads=("torch",), markers=LoadMarkers(("torch",), ("libtorch", "libc10")),
    oom_markers=("OutOfMemory",),
)

_TENSORFLOW = FrameworkInfo(
    name="tensorflow", display="TensorFlow", colour="#2c7fb8", modules=("tensorflow",), extra="tf",
    dists=("tensorflow", "tensorflow-cpu", "keras"),
    engine="bakeoff.frameworks.tensorflow.engine:TensorFlowEngine", model_module="tf_model",
    matmul="bakeoff.frameworks.tensorflow.engine:matmul_rates", deploy="bakeoff.frameworks.tensorflow.deploy",
    executions=(Execution.EAGER, Execution.GRAPH, Execution.XLA),
    execution_notes=_frozen({Execution.EAGER: "TensorFlow eager", Execution.GRAPH: "tf.function of the whole step",
                             Execution.XLA: "tf.function(jit_compile=True) of the whole step"}),
    # Keras' model.fit runs a tf.function unless told otherwise.
    production=(Execution.GRAPH, Execution.XLA), compiled=(Execution.GRAPH, Execution.XLA),
    precisions=(Precision.FP32, Precision.BF16, Precision.FP16),
    # "single" for data_parallel: MirroredStrategy over the devices one process sees; "tf_config": N processes
    # with TF_CONFIG; "tf_parameter_server": a chief, workers and parameter servers.
    launchers=_frozen({**_ONE, Parallelism.DATA_PARALLEL: "single", Parallelism.MULTI_WORKER: "tf_config",
                       Parallelism.PARAMETER_SERVER: "tf_parameter_server"}),
    strategies=_frozen({Parallelism.DATA_PARALLEL: "MirroredStrategy",
                        Parallelism.MULTI_WORKER: "MultiWorkerMirroredStrategy",
                        Parallelism.PARAMETER_SERVER: "ParameterServerStrategy"}),
    # Measured: TensorFlow 2.21 on CPU.
    missing_executions=_frozen({
        (Parallelism.PARAMETER_SERVER, Execution.EAGER): (
            "ParameterServerStrategy trains through ClusterCoordinator.schedule, which accepts only a tf.function "
            "(eager ops would run on the chief, not on the workers): use execution graph"),
        (Parallelism.PARAMETER_SERVER, Execution.XLA): (
            "XLA cannot compile a parameter-server step: an XLA cluster runs on one device and the variables live on "
            "the parameter server (measured, TF 2.21: the whole step fails with 'KernelAndDeviceOp does not support "
            "EagerFunctionParams', the gradients alone with 'Trying to access resource ... located in device "
            "/job:ps/... from device /job:worker/...'): use execution graph"),
    }),
    loads=("tensorflow",), markers=LoadMarkers(("tensorflow",), ("libtensorflow",)),
    env=_frozen({"TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"}),
    oom_markers=("ResourceExhausted",),
)

_JAX = FrameworkInfo(
    name="jax", display="JAX", colour="#41ab5d", modules=("jax", "flax", "optax"), extra="jax",
    dists=("jax", "jaxlib", "flax", "optax"),
    engine="bakeoff.frameworks.jax.engine:JaxEngine", model_module="jax_model",
    matmul="bakeoff.frameworks.jax.engine:matmul_rates", deploy="bakeoff.frameworks.jax.deploy",
    executions=(Execution.GRAPH, Execution.EAGER),
    execution_notes=_frozen({Execution.GRAPH: "jax.jit of the whole step, compiled by XLA",
                             Execution.EAGER: "op by op without jax.jit, each op an XLA kernel"}),
    # JAX users jit their step: eager JAX is a debugging mode.
    production=(Execution.GRAPH,), compiled=(Execution.GRAPH,),
    precisions=(Precision.FP32, Precision.BF16),
    missing_modes=_frozen({Execution.XLA: "jax.jit is XLA compilation: use graph"}),
    # data_parallel: one process, its devices in a mesh (N CPU devices on a CPU machine); multi_worker: N
    # processes joined by jax.distributed.
    launchers=_frozen({**_ONE, Parallelism.DATA_PARALLEL: "single", Parallelism.MULTI_WORKER: "jax_distributed"}),
    strategies=_frozen({Parallelism.DATA_PARALLEL: "sharded over a device mesh",
                        Parallelism.MULTI_WORKER: "jax.distributed"}),
    missing_strategies=_frozen({Parallelism.PARAMETER_SERVER: (
        "JAX has no parameter-server strategy: it trains SPMD, params replicated or sharded over a device mesh; "
        "use data_parallel or multi_worker")}),
    loads=("jax",), markers=LoadMarkers(("jax", "jaxlib"), ("/jaxlib/",)),
    # Device memory is taken as used, not 75% of it up front, so peak bytes mean what the model needs.
    env=_frozen({"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_CPP_MIN_LOG_LEVEL": "2"}),
    oom_markers=("RESOURCE_EXHAUSTED", "Out of memory"),
)


def _keras(backend: str, display: str, colour: str, backend_info: FrameworkInfo, graph: str,
           production: tuple[Execution, ...], xla: str = "") -> FrameworkInfo:
    """The Keras 3 row on ``backend``: the same model code, Keras' own ``train_on_batch`` on that backend.

    ``graph`` is what Keras compiles the train step with there (``jit_compile=True``; read in Keras 3.15's
    trainers, confirmed by trace and compile counts); ``production`` what Keras' default (``jit_compile="auto"``)
    runs; ``xla`` the reason a backend has no separate XLA mode (none: it has one).
    """
    executions = (Execution.GRAPH, Execution.EAGER) + (() if xla else (Execution.XLA,))
    notes = {Execution.GRAPH: graph, Execution.EAGER: "Keras run_eagerly=True, op by op"}
    if not xla:
        notes[Execution.XLA] = "tf.function(jit_compile=True) of Keras' train step"
    return FrameworkInfo(
        name=f"keras-{backend}", display=f"Keras 3 on {display}", colour=colour,
        modules=("keras", *backend_info.modules), extra=f"keras,{backend_info.extra}",
        dists=("keras", *backend_info.dists),
        engine="bakeoff.frameworks.keras.engine:KerasEngine", model_module="keras_model",
        executions=executions, execution_notes=_frozen(notes),
        production=production, compiled=tuple(e for e in executions if e is not Execution.EAGER),
        precisions=(Precision.FP32, Precision.BF16),
        missing_modes=_frozen({Execution.XLA: xla} if xla else {}),
        launchers=_frozen(_ONE), strategies=_frozen({}),
        loads=backend_info.loads,
        env=_frozen({**backend_info.env, "KERAS_BACKEND": backend}),
        oom_markers=backend_info.oom_markers,
        matmul=backend_info.matmul,  # a Keras row multiplies with its backend
    )


FRAMEWORKS: Mapping[str, FrameworkInfo] = MappingProxyType({
    info.name: info for info in (
        _TORCH, _TENSORFLOW, _JAX,
        # Keras' default: jax.jit on JAX; eager on PyTorch (torch.compile is opt-in, as in PyTorch itself);
        # tf.function on a CPU-only TensorFlow, XLA when a GPU is present.
        _keras("jax", "JAX", "#74c476", _JAX, "jax.jit of Keras' whole stateless train step", (Execution.GRAPH,),
               xla="Keras on JAX compiles with jax.jit, which is XLA: use graph"),
        _keras("torch", "PyTorch", "#fc9272", _TORCH,
               "torch.compile of Keras' train step, broken at loss.backward()",
               (Execution.EAGER, Execution.GRAPH), xla="Keras on PyTorch has no XLA mode"),
        _keras("tensorflow", "TensorFlow", "#9ecae1", _TENSORFLOW, "tf.function of Keras' train step",
               (Execution.GRAPH, Execution.XLA)),
    )})
"""Every framework row, in the order the CLI lists them."""


def get(name: str) -> FrameworkInfo:
    """The record of ``name`` (a ``spec.Framework`` or its value); a ``KeyError`` names the accepted ones."""
    try:
        return FRAMEWORKS[str(name)]
    except KeyError:
        raise KeyError(f"unknown framework {name!r}; accepted: {', '.join(FRAMEWORKS)}") from None


def names() -> list[str]:
    return list(FRAMEWORKS)


def markers() -> dict[str, LoadMarkers]:
    """``{framework: markers}`` for each framework a process can load (the Keras rows load their backend's)."""
    return {name: info.markers for name, info in FRAMEWORKS.items() if info.markers is not None}
