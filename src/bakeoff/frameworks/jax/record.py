"""JAX's row: what bakeoff knows about it (:class:`bakeoff.core.frameworks.FrameworkInfo`). Imports only
``bakeoff.core``: read when the framework list is discovered, it imports no framework."""

from __future__ import annotations

from bakeoff.core.formats import FLOAT_TOLERANCE, Format
from bakeoff.core.frameworks import Capacity, FrameworkInfo, LoadMarkers, frozen
from bakeoff.core.spec import Execution, Parallelism, Precision

ORDER = 2
"""Where its rows are listed among the frameworks' (the CLI's order)."""

FORMATS = (
    Format("jax-export", "jax.export (StableHLO)", "jax", "jax", "model.jaxexport", FLOAT_TOLERANCE, ("server",),
           ("jax",), ("jax",), "jax", notes="jax.export.export with symbolic shapes, serialised; run by "
           "jax.export.deserialize"),
    # Served by TensorFlow's runtime (bakeoff.frameworks.tensorflow.runtime), which its process loads.
    Format("jax2tf", "SavedModel (jax2tf)", "jax", "tf", "savedmodel", FLOAT_TOLERANCE, ("server",),
           ("tensorflow",), ("jax", "tensorflow"), "deploy", notes="jax2tf.convert(native_serialization) into a "
           "SavedModel, served by tf.saved_model.load"),
)

CAPACITY = Capacity(
    tag="jax",
    strategies=frozen({
        "data": "jax.jit, batch sharded, weights replicated (NamedSharding)",
        "zero1": "jax.jit, optimizer state sharded over the data axis (NamedSharding)",
        "zero2": "jax.jit, gradients and optimizer state sharded over the data axis",
        "zero3": "jax.jit, weights and states sharded over the data axis (FSDP by NamedSharding)",
        "tensor": "jax.jit, layers sharded over a model axis (NamedSharding)"}),
    missing=frozen({"pipeline": "JAX ships no pipeline schedule (one is written by hand over shard_map)",
                    "parameter_server": "JAX has no parameter servers"}),
    recipes=(
        frozen(dict(name="flax-mixed", api="Flax modules with param_dtype=jnp.float32, dtype=jnp.bfloat16: "
                    "fp32 parameters cast to bf16 to compute; fp32 gradients and Optax Adam state",
                    weights=4, copy=2, gradients=4, optimizer=8)),
        frozen(dict(name="flax-bf16", api="Flax modules with param_dtype=jnp.bfloat16: bf16 parameters and "
                    "gradients, an fp32 master copy beside Optax's fp32 m and v",
                    weights=2, copy=0, gradients=2, optimizer=12)),
    ),
    defaults=frozen(dict.fromkeys(("data", "zero1", "zero2", "zero3", "tensor"), "flax-mixed")),
)
"""What the capacity plan knows of JAX (bakeoff.predict.capacity, bakeoff.predict.recipes)."""

RECORD = FrameworkInfo(
    name="jax", display="JAX", colour="#41ab5d", modules=("jax", "flax", "optax"), extra="jax",
    dists=("jax", "jaxlib", "flax", "optax"),
    engine="bakeoff.frameworks.jax.engine:JaxEngine", model_module="jax_model",
    matmul="bakeoff.frameworks.jax.engine:matmul_rates", deploy="bakeoff.frameworks.jax.deploy",
    executions=(Execution.GRAPH, Execution.EAGER),
    execution_notes=frozen({Execution.GRAPH: "jax.jit of the whole step, compiled by XLA",
                            Execution.EAGER: "op by op without jax.jit, each op an XLA kernel"}),
    # JAX users jit their step: eager JAX is a debugging mode.
    production=(Execution.GRAPH,), compiled=(Execution.GRAPH,),
    precisions=(Precision.FP32, Precision.BF16),
    missing_modes=frozen({Execution.XLA: "jax.jit is XLA compilation: use graph"}),
    # data_parallel: one process, its devices in a mesh (N CPU devices on a CPU machine); multi_worker: N
    # processes joined by jax.distributed.
    launchers=frozen({Parallelism.NONE: "single", Parallelism.DATA_PARALLEL: "single",
                      Parallelism.MULTI_WORKER: "jax_distributed"}),
    strategies=frozen({Parallelism.DATA_PARALLEL: "sharded over a device mesh",
                       Parallelism.MULTI_WORKER: "jax.distributed"}),
    missing_strategies=frozen({Parallelism.PARAMETER_SERVER: (
        "JAX has no parameter-server strategy: it trains SPMD, params replicated or sharded over a device mesh; "
        "use data_parallel or multi_worker")}),
    model_words="JAX (Flax Linen)",
    loads=("jax",), markers=LoadMarkers(("jax", "jaxlib"), ("/jaxlib/",)),
    # Device memory is taken as used, not 75% of it up front, so peak bytes mean what the model needs.
    env=frozen({"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_CPP_MIN_LOG_LEVEL": "2"}),
    oom_markers=("RESOURCE_EXHAUSTED", "Out of memory"),
    formats=FORMATS, runtimes=frozen({"jax": "bakeoff.frameworks.jax.runtime"}),
    probes="bakeoff.frameworks.jax.probes", launch="bakeoff.frameworks.jax.launch",
    capacity=CAPACITY,
)

RECORDS = (RECORD,)
"""Its rows: one."""
