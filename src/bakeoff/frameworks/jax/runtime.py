"""The ``jax`` runtime: a serialised ``jax.export`` module (``model.jaxexport``) run by JAX alone — no Flax, no
model code: the file holds the StableHLO program with its params as constants, and its inputs' names and types.

Threads: XLA's CPU runtime sizes its thread pool to the cores the process may use when the backend starts, and
JAX has no setting for a thread count (``XLA_FLAGS`` can only make it single-threaded), so ``threads`` is accepted
for the runtime contract and not applied; pin the process (``taskset``) to measure fewer cores.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from jax import export as jax_export

from bakeoff.core.formats import ran_on

log = logging.getLogger(__name__)

FORMATS = ("jax-export",)
THREADS_APPLIED = False  # read by the inference harness, which records it beside the threads requested


def load_runtime(fmt: str, path: Path, threads: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """The exported function at ``path`` as ``inputs -> outputs`` on host numpy.

    Each input is cast to the dtype the module declares (the data's int64 tokens to int32, ...); the call is
    jitted, so each new input shape compiles once and later calls reuse it. ``threads`` is not applied (module
    docstring).
    """
    if fmt not in FORMATS:
        raise ValueError(f"the jax runtime serves {', '.join(FORMATS)}, not {fmt!r}")
    exported = jax_export.deserialize(bytearray(Path(path).read_bytes()))
    args, kwargs = jax.tree.unflatten(exported.in_tree, exported.in_avals)
    if kwargs or len(args) != 1 or not isinstance(args[0], dict):
        raise ValueError(f"{path} does not take one dict of named inputs (bakeoff's jax-export): {exported.in_tree}")
    declared = args[0]  # {input name: its abstract array (dtype, symbolic shape)}
    log.info("jax runtime: %s on %s (threads=%d requested, not applied)", path, jax.default_backend(), threads)
    call = jax.jit(exported.call)

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        missing = sorted(set(declared) - set(inputs))
        if missing:
            raise KeyError(f"inputs {', '.join(missing)} missing; the model takes {', '.join(declared)}")
        args = {k: jnp.asarray(np.asarray(inputs[k]).astype(aval.dtype, copy=False)) for k, aval in declared.items()}
        return np.asarray(call(args).block_until_ready())

    # jax.jit places the call on the default device; the module carries its matmul precision (jax_deploy's)
    first = jax.devices()[0]
    return ran_on(run, f"{first.platform}:{first.id}")


def runtime_version() -> str:
    return f"jax {jax.__version__} (jaxlib {jaxlib.__version__}, {jax.default_backend()})"
