"""The TensorFlow runtime: a SavedModel's ``serving_default`` signature through ``tf.saved_model.load``.

Serves every format whose runtime is ``tf`` (formats.py): TensorFlow's own SavedModel and TF-TRT, and JAX's
``jax2tf``. All keep the convention of :mod:`bakeoff.deploy`: inputs named as the workload's serving inputs, one
output named ``outputs``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads: its C++ info lines are noise here

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bakeoff.core.formats import ran_on  # noqa: E402
from bakeoff.frameworks.tensorflow import probes  # noqa: E402

log = logging.getLogger(__name__)


def _set_threads(threads: int) -> None:
    """``threads`` for one op, one op at a time (0: TensorFlow's default, every core). TensorFlow fixes these when
    its first op runs; a process that already ran one keeps what it had, with a warning."""
    if threads <= 0:
        return
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError as e:  # "... cannot be modified after initialization"
        log.warning("TensorFlow threads not set to %d: %s", threads, e)


def load_runtime(fmt: str, path: Path, threads: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """A callable running the SavedModel at ``path``: numpy inputs (cast to the signature's dtypes) to the
    ``outputs`` array as numpy. Extra inputs are ignored; a missing one raises ``KeyError`` naming it."""
    _set_threads(threads)
    tf.config.experimental.enable_tensor_float_32_execution(False)  # fp32 means fp32, as in the trials
    loaded = tf.saved_model.load(str(path))
    if "serving_default" not in loaded.signatures:
        raise ValueError(f"{fmt} SavedModel {path} has no serving_default signature; it has "
                         f"{', '.join(loaded.signatures) or 'none'}")
    serve = loaded.signatures["serving_default"]
    specs: dict[str, tf.TensorSpec] = serve.structured_input_signature[1]

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        missing = sorted(set(specs) - set(inputs))
        if missing:
            raise KeyError(f"{fmt} model needs inputs {', '.join(specs)}; missing {', '.join(missing)}")
        feed = {name: tf.constant(np.asarray(inputs[name]).astype(spec.dtype.as_numpy_dtype, copy=False))
                for name, spec in specs.items()}
        _ = loaded  # the signature's variables live as long as the loaded object
        return serve(**feed)["outputs"].numpy()  # .numpy() waits for the result

    # TensorFlow places a signature's ops on its first GPU when it sees one, else on the CPU
    device = "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"
    return ran_on(run, device, **probes.tf32())


def runtime_version() -> str:
    return f"TensorFlow {tf.__version__}"
