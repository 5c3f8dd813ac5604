"""PaddlePaddle's row: what bakeoff knows about it (:class:`bakeoff.core.frameworks.FrameworkInfo`). Imports only
``bakeoff.core``: read when the framework list is discovered, it imports no framework."""

from __future__ import annotations

from bakeoff.core.formats import FLOAT_TOLERANCE, Format
from bakeoff.core.frameworks import Capacity, FrameworkInfo, LoadMarkers, frozen
from bakeoff.core.spec import Execution, Parallelism, Precision

ORDER = 4
"""Where its rows are listed among the frameworks' (the CLI's order): after the Keras 3 rows."""

# No Paddle Lite format: its converter is not installable here and reads the pre-PIR program file (why in full:
# bakeoff.frameworks.paddle.deploy's docstring).
FORMATS = (
    Format("paddle-inference", "Paddle Inference", "paddle", "paddle", "inference", FLOAT_TOLERANCE, ("server",),
           ("paddle",), ("paddle",), "paddle", notes="paddle.jit.save (a static program and its parameters), run "
           "by paddle.inference's predictor"),
    Format("paddle-onnx", "ONNX (paddle2onnx)", "paddle", "onnx", "model.onnx", FLOAT_TOLERANCE,
           ("server", "browser", "mobile"), (), ("paddle", "paddle2onnx", "onnxruntime"), "paddle",
           notes="paddle.jit.save, then paddle2onnx.export; run by ONNX Runtime"),
)

CAPACITY = Capacity(
    tag="paddle",
    strategies=frozen({
        "data": "paddle.DataParallel (paddle.distributed.launch)",
        "zero1": "paddle.distributed.sharding.group_sharded_parallel(level='os')",
        "zero2": "paddle.distributed.sharding.group_sharded_parallel(level='os_g')",
        "zero3": "paddle.distributed.sharding.group_sharded_parallel(level='p_g_os')",
        "tensor": "fleet.meta_parallel ColumnParallelLinear / RowParallelLinear (fleet.init, mp_degree)",
        "pipeline": "fleet.meta_parallel.PipelineLayer (pp_degree, 1F1B)",
        "parameter_server": "fleet parameter-server mode (fleet.init(is_collective=False), a static Program)"}),
    missing=frozen({}),
    recipes=(
        frozen(dict(name="paddle-amp-o1", api="paddle.amp.auto_cast(level='O1', dtype='bfloat16') over fp32 "
                    "parameters: fp32 gradients and Adam state", weights=4, copy=2, gradients=4, optimizer=8)),
        frozen(dict(name="paddle-amp-o2", api="paddle.amp.decorate(level='O2', dtype='bfloat16', "
                    "master_weight=True): bf16 parameters and gradients, fp32 master weights beside Adam's m, v",
                    weights=2, copy=0, gradients=2, optimizer=12)),
    ),
    defaults=frozen(dict.fromkeys(("data", "zero1", "zero2", "zero3", "tensor", "pipeline", "parameter_server"),
                                  "paddle-amp-o1")),
)
"""What the capacity plan knows of PaddlePaddle (bakeoff.predict.capacity, bakeoff.predict.recipes)."""

RECORD = FrameworkInfo(
    name="paddle", display="PaddlePaddle", colour="#2932e1", modules=("paddle",), extra="paddle",
    dists=("paddlepaddle",),
    engine="bakeoff.frameworks.paddle.engine:PaddleEngine", model_module="paddle_model",
    matmul="bakeoff.frameworks.paddle.engine:matmul_rates", deploy="bakeoff.frameworks.paddle.deploy",
    executions=(Execution.EAGER, Execution.GRAPH),
    execution_notes=frozen({Execution.EAGER: "Paddle dygraph, op by op",
                            Execution.GRAPH: "paddle.jit.to_static of the forward and loss (a static program "
                                             "and its gradient program; Adam stays dygraph)"}),
    # Paddle users train in dygraph; to_static is opt-in (and how a model is exported).
    production=(Execution.EAGER, Execution.GRAPH), compiled=(Execution.GRAPH,),
    precisions=(Precision.FP32, Precision.BF16, Precision.FP16),
    missing_modes=frozen({Execution.XLA: "Paddle has no XLA mode (its own compiler, CINN, is to_static's "
                                         "backend on GPUs): use graph"}),
    cpu_missing=frozen({(Execution.EAGER, Precision.BF16): (
        "Paddle's dygraph AMP (paddle.amp.auto_cast) runs on GPU, XPU and custom devices only: on a CPU it warns "
        "and computes in fp32 (paddle/amp/auto_cast.py, 3.3.1), so eager bf16 would be fp32 under its name; use "
        "graph (to_static's AMP pass casts on a CPU too) or a GPU")}),
    # "paddle_launch": one paddle.distributed.launch for N processes; "paddle_launch_nodes": one per node.
    launchers=frozen({Parallelism.NONE: "single", Parallelism.DATA_PARALLEL: "paddle_launch",
                      Parallelism.MULTI_WORKER: "paddle_launch_nodes"}),
    strategies=frozen({Parallelism.DATA_PARALLEL: "paddle.DataParallel",
                       Parallelism.MULTI_WORKER: "paddle.DataParallel multi-worker"}),
    missing_strategies=frozen({Parallelism.PARAMETER_SERVER: (
        "Paddle's parameter servers (fleet with is_collective=False) train a static Program built under "
        "paddle.enable_static and minimised by fleet's distributed optimizer, not a dygraph step: bakeoff's Paddle "
        "step is dygraph (eager, or to_static inside dygraph); use data_parallel or multi_worker")}),
    model_words="PaddlePaddle (paddle.nn, dygraph)",
    loads=("paddle",), markers=LoadMarkers(("paddle",), ("libpaddle.so", "/paddle/libs/")),
    env=frozen({"GLOG_minloglevel": "2", "FLAGS_call_stack_level": "1"}),
    oom_markers=("ResourceExhausted", "Out of memory", "out of memory"),
    formats=FORMATS, runtimes=frozen({"paddle": "bakeoff.frameworks.paddle.runtime"}),
    probes="bakeoff.frameworks.paddle.probes", launch="bakeoff.frameworks.paddle.launch",
    capacity=CAPACITY,
)

RECORDS = (RECORD,)
"""Its rows: one."""
