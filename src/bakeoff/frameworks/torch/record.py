"""PyTorch's row: what bakeoff knows about it (:class:`bakeoff.core.frameworks.FrameworkInfo`). Imports only
``bakeoff.core``: read when the framework list is discovered, it imports no framework."""

from __future__ import annotations

from bakeoff.core.formats import FLOAT_TOLERANCE, Format
from bakeoff.core.frameworks import Capacity, FrameworkInfo, LoadMarkers, frozen
from bakeoff.core.spec import Execution, Parallelism, Precision

ORDER = 0
"""Where its rows are listed among the frameworks' (the CLI's order)."""

_LOADS = ("torch",)

FORMATS = (
    # TorchScript's mobile path (the lite interpreter, .ptl) is not what is exported here: server only.
    Format("torchscript", "TorchScript", "torch", "torch", "model.ts", FLOAT_TOLERANCE, ("server",),
           _LOADS, ("torch",), "torch", notes="torch.jit.trace; served by libtorch / torch.jit.load"),
    Format("torch-export", "torch.export", "torch", "torch", "model.pt2", FLOAT_TOLERANCE, ("server",),
           _LOADS, ("torch",), "torch", notes="torch.export.export with Dim axes, saved .pt2 (ExportedProgram)"),
    Format("aoti", "AOTInductor", "torch", "torch", "model.aoti.pt2", FLOAT_TOLERANCE, ("server",),
           _LOADS, ("torch",), "torch", notes="torch._inductor.aoti_compile_and_package: a compiled .so in a "
           "package; needs a C++ compiler"),
    Format("torch-onnx", "ONNX (torch.onnx)", "torch", "onnx", "model.onnx", FLOAT_TOLERANCE,
           ("server", "browser", "mobile"), (), ("torch", "onnx", "onnxscript", "onnxruntime"), "deploy",
           notes="torch.onnx.export(dynamo=True), run by ONNX Runtime"),
    Format("torch-tensorrt", "TensorRT (Torch-TensorRT)", "torch", "torch", "model.trt.ts", FLOAT_TOLERANCE,
           ("server",), _LOADS, ("torch", "torch_tensorrt"), "deploy", needs="cuda"),
)

CAPACITY = Capacity(
    tag="torch",
    strategies=frozen({
        "data": "torch.nn.parallel.DistributedDataParallel",
        "zero1": "torch.distributed.optim.ZeroRedundancyOptimizer",
        "zero2": "FullyShardedDataParallel(sharding_strategy=SHARD_GRAD_OP)",
        "zero3": "torch.distributed.fsdp.fully_shard (FSDP2)",
        "tensor": "torch.distributed.tensor.parallel.parallelize_module",
        "pipeline": "torch.distributed.pipelining (Schedule1F1B)"}),
    missing=frozen({"parameter_server": "PyTorch ships RPC (torch.distributed.rpc), no parameter-server strategy"}),
    recipes=(
        frozen(dict(name="torch-autocast", api="torch.autocast(dtype=torch.bfloat16) over fp32 parameters "
                    "(casts cached for the backward); fp32 gradients and Adam state",
                    weights=4, copy=2, gradients=4, optimizer=8)),
        frozen(dict(name="fsdp-mixed", api="FSDP MixedPrecision / fully_shard(mp_policy=MixedPrecisionPolicy("
                    "param_dtype=torch.bfloat16, reduce_dtype=torch.float32)): fp32 sharded parameters, gradients "
                    "and Adam state, bf16 parameters gathered to compute",
                    weights=4, copy=2, gradients=4, optimizer=8, gathered=True)),
        frozen(dict(name="zero", api="DeepSpeed ZeRO ({'bf16': {'enabled': true}} or fp16, "
                    "zero_optimization.stage 0-3), as the ZeRO paper counts it: 16-bit parameters and gradients, "
                    "fp32 master weights + Adam m, v in the optimizer state (K = 12)",
                    weights=2, copy=0, gradients=2, optimizer=12)),
    ),
    defaults=frozen({"data": "torch-autocast", "zero1": "torch-autocast", "zero2": "fsdp-mixed",
                     "zero3": "fsdp-mixed", "tensor": "torch-autocast", "pipeline": "torch-autocast"}),
)
"""What the capacity plan knows of PyTorch (bakeoff.predict.capacity, bakeoff.predict.recipes)."""

RECORD = FrameworkInfo(
    name="torch", display="PyTorch", colour="#ee4c2c", modules=("torch",), extra="torch", dists=("torch",),
    engine="bakeoff.frameworks.torch.engine:TorchEngine", model_module="torch_model",
    matmul="bakeoff.frameworks.torch.engine:matmul_rates", deploy="bakeoff.frameworks.torch.deploy",
    executions=(Execution.EAGER, Execution.GRAPH),
    execution_notes=frozen({Execution.EAGER: "PyTorch eager", Execution.GRAPH: "torch.compile of the whole step"}),
    # PyTorch users train eagerly; torch.compile is opt-in.
    production=(Execution.EAGER, Execution.GRAPH), compiled=(Execution.GRAPH,),
    precisions=(Precision.FP32, Precision.BF16, Precision.FP16),
    missing_modes=frozen({Execution.XLA: "PyTorch has no XLA mode here (torch_xla targets TPUs)"}),
    # "torchrun": one agent, N processes; "torchrun_nodes": one agent per node (multi-worker).
    launchers=frozen({Parallelism.NONE: "single", Parallelism.DATA_PARALLEL: "torchrun",
                      Parallelism.MULTI_WORKER: "torchrun_nodes"}),
    strategies=frozen({Parallelism.DATA_PARALLEL: "DDP", Parallelism.MULTI_WORKER: "DDP multi-worker"}),
    missing_strategies=frozen({Parallelism.PARAMETER_SERVER: (
        "PyTorch has no built-in parameter-server strategy (torch.distributed.rpc's parameter-server example is a "
        "tutorial, not a maintained strategy); PyTorch trains data-parallel: use data_parallel or multi_worker")}),
    model_words="PyTorch",
    loads=("torch",), markers=LoadMarkers(("torch",), ("libtorch", "libc10")),
    oom_markers=("OutOfMemory",),
    formats=FORMATS, runtimes=frozen({"torch": "bakeoff.frameworks.torch.runtime"}),
    probes="bakeoff.frameworks.torch.probes", launch="bakeoff.frameworks.torch.launch",
    # Compile caches start empty in every trial (bakeoff.run.executors.local): Inductor's and Triton's.
    capacity=CAPACITY,
    cache_env=frozen({"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}),
)

RECORDS = (RECORD,)
"""Its rows: one."""
