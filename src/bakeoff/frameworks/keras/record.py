"""The Keras 3 rows, one per backend (``keras-jax``, ``keras-torch``, ``keras-tensorflow``): the same Keras model
code and Keras' own ``train_on_batch`` on that backend, judged against the native rows like any other
(:class:`bakeoff.core.frameworks.FrameworkInfo`). A row loads its backend's framework, so it takes that backend's
record's modules, markers, environment and matmul from the backend's folder. Imports only ``bakeoff.core`` and the
backends' records: read when the framework list is discovered, it imports no framework."""

from __future__ import annotations

from bakeoff.core.frameworks import FrameworkInfo, frozen
from bakeoff.core.spec import Execution, Parallelism, Precision
from bakeoff.frameworks.jax.record import RECORD as JAX
from bakeoff.frameworks.tensorflow.record import RECORD as TENSORFLOW
from bakeoff.frameworks.torch.record import RECORD as TORCH

ORDER = 3
"""Where its rows are listed among the frameworks' (the CLI's order): after the native ones."""


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
        # a workload's keras_function
        function_model="bakeoff.workloads.common.keras_function_model:KerasFunctionModel",
        executions=executions, execution_notes=frozen(notes),
        production=production, compiled=tuple(e for e in executions if e is not Execution.EAGER),
        precisions=(Precision.FP32, Precision.BF16),
        missing_modes=frozen({Execution.XLA: xla} if xla else {}),
        launchers=frozen({Parallelism.NONE: "single"}), strategies=frozen({}),
        model_words="Keras 3, any backend (keras-jax, keras-torch, keras-tensorflow)",  # one file for every row
        loads=backend_info.loads,
        env=frozen({**backend_info.env, "KERAS_BACKEND": backend}),
        oom_markers=backend_info.oom_markers,
        matmul=backend_info.matmul,  # a Keras row multiplies with its backend
    )


RECORDS = (
    # Keras' default: jax.jit on JAX; eager on PyTorch (torch.compile is opt-in, as in PyTorch itself);
    # tf.function on a CPU-only TensorFlow, XLA when a GPU is present.
    _keras("jax", "JAX", "#74c476", JAX, "jax.jit of Keras' whole stateless train step", (Execution.GRAPH,),
           xla="Keras on JAX compiles with jax.jit, which is XLA: use graph"),
    _keras("torch", "PyTorch", "#fc9272", TORCH,
           "torch.compile of Keras' train step, broken at loss.backward()",
           (Execution.EAGER, Execution.GRAPH), xla="Keras on PyTorch has no XLA mode"),
    _keras("tensorflow", "TensorFlow", "#9ecae1", TENSORFLOW, "tf.function of Keras' train step",
           (Execution.GRAPH, Execution.XLA)),
)
"""Its rows: one per backend."""
