"""The ``paddle`` runtime: a ``paddle.jit.save`` program (``model.json``, ``model.pdiparams``) run by Paddle
Inference's predictor (``paddle.inference.Config`` / ``create_predictor``) on host numpy — no model code, no
dygraph: the directory holds the static program, its parameters and ``bakeoff.json`` (the inputs' names and
dtypes, the output's name, as :mod:`bakeoff.frameworks.paddle.deploy` writes them).

The predictor runs on the CPU with Paddle Inference's defaults for it (its IR passes, and oneDNN where the build
has it: both recorded). oneDNN is what a Paddle user gets, not always the faster: at batch 1, one thread, on a
loaded 2-core host, 2.6 ms against 5.2 ms without it on speech's tiny model, 10.6 ms against 4.0 ms on the text
classifier's. A GPU predictor (``Config.enable_use_gpu``, the ``paddlepaddle-gpu`` wheel) is not wired: the
``paddle`` extra installs the CPU wheel, and no GPU build has run it here.

``threads`` > 0 sets ``set_cpu_math_library_num_threads``; 0 gives it every core this process may use, as the
other runtimes' 0 does (Paddle's own default is one thread).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import paddle
from paddle import inference

from bakeoff.core.formats import ran_on

log = logging.getLogger(__name__)

FORMATS = ("paddle-inference",)
PROGRAM = "model"  # jit.save's prefix inside a paddle-inference directory: model.json, model.pdiparams
META = "bakeoff.json"  # beside the program: the inputs' names and dtypes, the output's name
THREADS_APPLIED = True

Run = Callable[[dict[str, np.ndarray]], np.ndarray]


def runtime_version() -> str:
    return f"paddle {paddle.__version__} (Paddle Inference, commit {paddle.version.commit[:10]})"


def load_runtime(fmt: str, path: Path, threads: int) -> Run:
    """A predictor on the program in the directory ``path``, as ``inputs -> outputs`` on host numpy.

    Each input is cast to the dtype the program was saved with (int64 tokens to the program's int32, ...); a
    missing input is refused naming the ones the program takes.
    """
    if fmt not in FORMATS:
        raise ValueError(f"the paddle runtime serves {', '.join(FORMATS)}, not {fmt!r}")
    path = Path(path)
    side = path / META
    if not side.is_file():
        raise ValueError(f"no {META} in {path}: the program does not say its inputs' names and dtypes; export it "
                         "again with bakeoff deploy")
    meta = json.loads(side.read_text())
    dtypes = {name: np.dtype(dtype) for name, dtype in meta["inputs"].items()}
    config = inference.Config(str(path / f"{PROGRAM}.json"), str(path / f"{PROGRAM}.pdiparams"))
    config.disable_gpu()
    config.disable_glog_info()
    config.set_cpu_math_library_num_threads(threads if threads > 0 else len(os.sched_getaffinity(0)))
    predictor = inference.create_predictor(config)
    missing = sorted(set(predictor.get_input_names()) - set(dtypes))
    if missing:
        raise ValueError(f"{path}: the program takes {', '.join(missing)}, which {META} does not describe")
    handles = {name: predictor.get_input_handle(name) for name in dtypes}
    output = predictor.get_output_handle(meta["output"])

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        absent = sorted(set(dtypes) - set(inputs))
        if absent:
            raise KeyError(f"inputs {', '.join(absent)} missing; the model takes {', '.join(dtypes)}")
        for name, dtype in dtypes.items():
            value = np.ascontiguousarray(inputs[name], dtype)
            handles[name].reshape(list(value.shape))
            handles[name].copy_from_cpu(value)
        predictor.run()
        return output.copy_to_cpu()  # host numpy: the run has finished

    log.info("paddle runtime: %s (threads=%d, oneDNN %s)", path, config.cpu_math_library_num_threads(),
             config.onednn_enabled())
    return ran_on(run, "cpu", onednn=bool(config.onednn_enabled()), ir_optim=bool(config.ir_optim()),
                  math_threads=int(config.cpu_math_library_num_threads()))
