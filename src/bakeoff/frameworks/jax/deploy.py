"""JAX's adapter: the Flax params pytree in Flax's own serialisation, and JAX's deployment formats.

* ``jax-export`` — ``jax.export.export(jax.jit(serve))`` with symbolic shapes on the dynamic axes, the params
  closed over (constants in the StableHLO module, so the file is self-contained), serialised to ``model.jaxexport``.
  It is lowered for CPU and CUDA both, so a file made on a CPU host also serves on a GPU one.
* ``jax2tf`` — the same function through ``jax2tf.convert`` (native serialisation: the StableHLO module inside an
  ``XlaCallModule`` op), in a ``tf.Module`` whose params are ``tf.Variable``s and whose ``serving_default``
  signature has ``None`` on each dynamic axis, saved with ``tf.saved_model.save``. Only this export step loads
  TensorFlow beside JAX; the SavedModel is served by TensorFlow alone.

The served function is exactly the workload's ``outputs(params, batch)`` in fp32, dropout off, taking the serving
inputs as one dict (their names travel in the exported file). Where the model bounds a dynamic axis — the text
classifier's learned position table has ``seq_len`` rows, the speech model's sinusoid table ``max_positions``
rows after its stride-4 front end — the symbolic size carries that bound as a constraint, so any shorter input
is accepted and a longer one is refused by shape checking at call time.

The model an adapter hands around is a :class:`JaxModel`: the workload's Flax ``ModelImpl`` and its params.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
from flax.traverse_util import flatten_dict
from jax import export as jax_export

from bakeoff.core import registry
from bakeoff.core.workload import Weights
from bakeoff.workloads.common.jax_encoder import canonical_name

log = logging.getLogger(__name__)

NATIVE_FILE = "params.msgpack"  # flax.serialization.to_bytes of the params pytree
PLATFORMS = ("cpu", "cuda")  # what the exported modules are lowered for
Axes = Mapping[str, tuple[str | None, ...]]

# The largest size a dynamic axis may take, from the model's config, where the model fixes one (module docstring).
_BOUNDS: dict[str, dict[str, Callable[[Mapping[str, Any]], int]]] = {
    "text_classifier": {"seq": lambda c: int(c["seq_len"])},
    "speech_ctc": {"frames": lambda c: 4 * int(c["max_positions"])},  # two stride-2 convolutions
}


@dataclasses.dataclass
class JaxModel:
    """A Flax model ready to predict: the workload's JAX ``ModelImpl`` and its params."""

    workload: str
    impl: Any  # bakeoff.workloads.common.jax_encoder.FlaxModel
    params: Any  # its params pytree (fp32)
    outputs: Callable[..., jax.Array] = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.outputs = jax.jit(self.impl.outputs)  # params an argument: one compile per input shape


def _fp32() -> None:
    """fp32 as the JAX engine runs it: matmuls and convolutions at full precision (TF32 is a GPU's default)."""
    jax.config.update("jax_default_matmul_precision", "highest")


def _impl(workload: str, config: Mapping[str, Any]) -> Any:
    return registry.model_class(workload, "jax")(dict(config))


def save_model(workload: str, config: dict, weights: Weights, directory: Path) -> list[str]:
    """Write the params pytree of the model ``weights`` describe (``flax.serialization.to_bytes``, msgpack)."""
    params = _impl(workload, config).init(weights)
    (Path(directory) / NATIVE_FILE).write_bytes(flax.serialization.to_bytes(params))
    return [NATIVE_FILE]


def load_model(workload: str, config: dict, directory: Path) -> JaxModel:
    """The model ``config`` describes with its params read from :data:`NATIVE_FILE`.

    The file is read as a plain tree (``msgpack_restore``) and goes through the canonical mapping, which refuses a
    missing or extra parameter and checks every shape: ``from_bytes`` into the model's tree would silently drop a
    block the config no longer has.
    """
    _fp32()
    impl = _impl(workload, config)
    state = flax.serialization.msgpack_restore((Path(directory) / NATIVE_FILE).read_bytes())
    return JaxModel(workload, impl, impl.init({canonical_name(p): v for p, v in flatten_dict(state).items()}))


def predict(model: JaxModel, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """``outputs(params, inputs)`` jitted (inference mode, fp32), as host numpy."""
    batch = {k: jnp.asarray(v) for k, v in inputs.items()}
    return np.asarray(model.outputs(model.params, batch), np.float32)


def export(model: JaxModel, fmt: str, out: Path, example: dict[str, np.ndarray], axes: Axes) -> dict[str, Any]:
    """Write ``model`` as ``fmt`` to ``out`` (see the module docstring); returns files, dynamic axes and notes."""
    if fmt not in _EXPORTERS:
        raise ValueError(f"JAX exports no format {fmt!r}; accepted: {', '.join(_EXPORTERS)}")
    _fp32()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    bounds = {axis: bound(model.impl.config) for axis, bound in _BOUNDS.get(model.workload, {}).items()}
    info = _EXPORTERS[fmt](model, out, example, axes, bounds)
    named = list(dict.fromkeys(a for names in axes.values() for a in names if a))
    limits = ", ".join(f"{a} ≤ {bounds[a]}" for a in named if a in bounds)
    info["dynamic"] = {a: "yes" for a in named}  # every named axis is a symbolic size in the exported module
    info["notes"] = info["notes"] + (f"; bounded by the model: {limits}" if limits else "")
    info["files"] = [out.name]
    return info


# --- shapes -----------------------------------------------------------------------------------------------------

def _dtype(value: np.ndarray) -> np.dtype:
    """What the exported model declares for an input like ``value``: int32 for integers, float32 otherwise (the
    runtimes cast the data's arrays to it)."""
    return np.dtype(np.int32 if np.issubdtype(np.asarray(value).dtype, np.integer) else np.float32)


def _shape_strings(example: Mapping[str, np.ndarray], axes: Axes) -> dict[str, str]:
    """``{input: "(batch, seq)"}``: each named axis by its name, each fixed one by the example's size."""
    out = {}
    for name, names in axes.items():
        shape = np.shape(example[name])
        if len(shape) != len(names):
            raise ValueError(f"serving input {name!r} has {len(shape)} axes, the workload names {len(names)}")
        out[name] = "(" + ", ".join(a if a else str(n) for a, n in zip(names, shape, strict=True)) + ")"
    return out


def _constraints(axes: Axes, bounds: Mapping[str, int]) -> list[str]:
    named = {a for names in axes.values() for a in names if a}
    return [f"{axis} <= {limit}" for axis, limit in bounds.items() if axis in named]


def _symbolic_inputs(example: Mapping[str, np.ndarray], axes: Axes,
                     bounds: Mapping[str, int]) -> dict[str, jax.ShapeDtypeStruct]:
    """The serving inputs as abstract arrays whose named axes are symbolic sizes of one scope: an axis named in
    two inputs (speech's batch) is one symbol, so the exported module requires them equal."""
    scope = jax_export.SymbolicScope(_constraints(axes, bounds))
    shapes = _shape_strings(example, axes)
    return {name: jax.ShapeDtypeStruct(jax_export.symbolic_shape(shapes[name], scope=scope), _dtype(example[name]))
            for name in axes}


# --- the formats ------------------------------------------------------------------------------------------------

def _jax_export(model: JaxModel, out: Path, example: Mapping[str, np.ndarray], axes: Axes,
                bounds: Mapping[str, int]) -> dict[str, Any]:
    def serve(inputs: dict[str, jax.Array]) -> jax.Array:
        return model.impl.outputs(model.params, inputs)  # params closed over: embedded as constants

    exported = jax_export.export(jax.jit(serve), platforms=PLATFORMS)(_symbolic_inputs(example, axes, bounds))
    out.write_bytes(exported.serialize())
    log.info("jax.export: %s -> %s, %d bytes", exported.in_avals, exported.out_avals, out.stat().st_size)
    return {"converter": f"jax.export (jax {jax.__version__}), StableHLO, calling convention "
                         f"{exported.calling_convention_version}",
            "notes": f"params embedded as constants; lowered for {', '.join(exported.platforms)} "
                     "(run here on this host's platform only)"}


def _jax2tf(model: JaxModel, out: Path, example: Mapping[str, np.ndarray], axes: Axes,
            bounds: Mapping[str, int]) -> dict[str, Any]:
    import tensorflow as tf  # only this export step loads TensorFlow beside JAX
    from jax.experimental import jax2tf

    names = list(axes)
    shapes = _shape_strings(example, axes)
    # Native serialisation is the only mode in jax 0.10 (passing native_serialization is deprecated).
    converted = jax2tf.convert(model.impl.outputs, polymorphic_shapes=[None, shapes],
                               polymorphic_constraints=_constraints(axes, bounds), with_gradient=False,
                               native_serialization_platforms=PLATFORMS)
    specs = [tf.TensorSpec([None if a else n for a, n in zip(axes[k], np.shape(example[k]), strict=True)],
                           tf.as_dtype(_dtype(example[k])), name=k) for k in names]

    class Serving(tf.Module):
        """What the SavedModel keeps: the params as variables, and the serving function."""

        def __init__(self) -> None:
            super().__init__()
            self.params = jax.tree.map(lambda p: tf.Variable(np.asarray(p), trainable=False), model.params)

        @tf.function(input_signature=specs, autograph=False)
        def serve(self, *tensors: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"outputs": converted(self.params, dict(zip(names, tensors, strict=True)))}

    module = Serving()
    tf.saved_model.save(module, str(out), signatures={"serving_default": module.serve.get_concrete_function()})
    return {"converter": f"jax2tf.convert (jax {jax.__version__}, native serialisation) + tf.saved_model.save "
                         f"(TensorFlow {tf.__version__})",
            "notes": f"serving_default signature, None on every dynamic axis; params as tf.Variables; StableHLO "
                     f"lowered for {', '.join(PLATFORMS)} in an XlaCallModule op"}


_EXPORTERS = {"jax-export": _jax_export, "jax2tf": _jax2tf}
