"""TensorFlow's row: what bakeoff knows about it (:class:`bakeoff.core.frameworks.FrameworkInfo`). Imports only
``bakeoff.core``: read when the framework list is discovered, it imports no framework."""

from __future__ import annotations

from bakeoff.core.formats import FLOAT_TOLERANCE, Format
from bakeoff.core.frameworks import Capacity, FrameworkInfo, LoadMarkers, frozen
from bakeoff.core.spec import Execution, Parallelism, Precision

ORDER = 1
"""Where its rows are listed among the frameworks' (the CLI's order)."""

_LOADS = ("tensorflow",)

FORMATS = (
    Format("savedmodel", "SavedModel", "tensorflow", "tf", "savedmodel", FLOAT_TOLERANCE, ("server",),
           _LOADS, ("tensorflow",), "tf", notes="tf.saved_model.save with a serving_default signature; "
           "served by TF Serving / tf.saved_model.load"),
    Format("litert", "LiteRT (float)", "tensorflow", "litert", "model.tflite", FLOAT_TOLERANCE,
           ("mobile", "edge"), (), ("tensorflow", "ai_edge_litert"), "deploy",
           notes="tf.lite.TFLiteConverter from the SavedModel (builtin ops only), run by the LiteRT interpreter "
           "(ai-edge-litert) without TensorFlow"),
    Format("litert-int8", "LiteRT (int8 dynamic range)", "tensorflow", "litert", "model.int8.tflite", None,
           ("mobile", "edge"), (), ("tensorflow", "ai_edge_litert"), "deploy",
           quantised="int8 weights, dynamic range (activations quantised on the fly)",
           notes="TFLiteConverter with Optimize.DEFAULT, no calibration set"),
    Format("tf-onnx", "ONNX (tf2onnx)", "tensorflow", "onnx", "model.onnx", FLOAT_TOLERANCE,
           ("server", "browser", "mobile"), (), ("tensorflow", "tf2onnx", "onnxruntime"), "deploy",
           notes="tf2onnx.convert.from_function, run by ONNX Runtime"),
    Format("tf-tensorrt", "TensorRT (TF-TRT)", "tensorflow", "tf", "savedmodel.trt", FLOAT_TOLERANCE, ("server",),
           _LOADS, ("tensorflow",), "tf", needs="cuda"),
)

_NO_SHARDING = ("tf.distribute's strategies replicate the model (Mirrored, MultiWorkerMirrored) or place variables "
                "on parameter servers; none shards states or layers for Keras training")
CAPACITY = Capacity(
    tag="tf",
    strategies=frozen({"data": "tf.distribute.MirroredStrategy / MultiWorkerMirroredStrategy",
                       "parameter_server": "tf.distribute.ParameterServerStrategy"}),
    missing=frozen(dict.fromkeys(("zero1", "zero2", "zero3", "tensor", "pipeline"), _NO_SHARDING)),
    recipes=(
        frozen(dict(name="keras-mixed", api="keras.mixed_precision.set_global_policy('mixed_bfloat16') (or "
                    "'mixed_float16'): fp32 variables cast to the compute dtype by each layer; fp32 gradients and "
                    "Adam state", weights=4, copy=2, gradients=4, optimizer=8)),
    ),
    defaults=frozen({"data": "keras-mixed", "parameter_server": "keras-mixed"}),
)
"""What the capacity plan knows of TensorFlow (bakeoff.predict.capacity, bakeoff.predict.recipes)."""

RECORD = FrameworkInfo(
    name="tensorflow", display="TensorFlow", colour="#2c7fb8", modules=("tensorflow",), extra="tf",
    dists=("tensorflow", "tensorflow-cpu", "keras"),
    engine="bakeoff.frameworks.tensorflow.engine:TensorFlowEngine", model_module="tf_model",
    matmul="bakeoff.frameworks.tensorflow.engine:matmul_rates", deploy="bakeoff.frameworks.tensorflow.deploy",
    executions=(Execution.EAGER, Execution.GRAPH, Execution.XLA),
    execution_notes=frozen({Execution.EAGER: "TensorFlow eager", Execution.GRAPH: "tf.function of the whole step",
                            Execution.XLA: "tf.function(jit_compile=True) of the whole step"}),
    # Keras' model.fit runs a tf.function unless told otherwise.
    production=(Execution.GRAPH, Execution.XLA), compiled=(Execution.GRAPH, Execution.XLA),
    precisions=(Precision.FP32, Precision.BF16, Precision.FP16),
    # "single" for data_parallel: MirroredStrategy over the devices one process sees; "tf_config": N processes
    # with TF_CONFIG; "tf_parameter_server": a chief, workers and parameter servers.
    launchers=frozen({Parallelism.NONE: "single", Parallelism.DATA_PARALLEL: "single",
                      Parallelism.MULTI_WORKER: "tf_config", Parallelism.PARAMETER_SERVER: "tf_parameter_server"}),
    strategies=frozen({Parallelism.DATA_PARALLEL: "MirroredStrategy",
                       Parallelism.MULTI_WORKER: "MultiWorkerMirroredStrategy",
                       Parallelism.PARAMETER_SERVER: "ParameterServerStrategy"}),
    # Measured: TensorFlow 2.21 on CPU.
    missing_executions=frozen({
        (Parallelism.PARAMETER_SERVER, Execution.EAGER): (
            "ParameterServerStrategy trains through ClusterCoordinator.schedule, which accepts only a tf.function "
            "(eager ops would run on the chief, not on the workers): use execution graph"),
        (Parallelism.PARAMETER_SERVER, Execution.XLA): (
            "XLA cannot compile a parameter-server step: an XLA cluster runs on one device and the variables live on "
            "the parameter server (measured, TF 2.21: the whole step fails with 'KernelAndDeviceOp does not support "
            "EagerFunctionParams', the gradients alone with 'Trying to access resource ... located in device "
            "/job:ps/... from device /job:worker/...'): use execution graph"),
    }),
    model_words="TensorFlow (Keras 3 layers)",
    loads=("tensorflow",), markers=LoadMarkers(("tensorflow",), ("libtensorflow",)),
    env=frozen({"TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"}),
    oom_markers=("ResourceExhausted",),
    formats=FORMATS, runtimes=frozen({"tf": "bakeoff.frameworks.tensorflow.runtime"}),
    probes="bakeoff.frameworks.tensorflow.probes", launch="bakeoff.frameworks.tensorflow.launch",
    capacity=CAPACITY,
)

RECORDS = (RECORD,)
"""Its rows: one."""
