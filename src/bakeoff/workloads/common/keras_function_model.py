"""Bakeoff's model for every workload whose Keras rows are one Keras 3 function (:mod:`bakeoff.core.keras_function`):
the user's ``keras.Model``, wrapped so that :class:`bakeoff.frameworks.keras.engine.KerasEngine` trains it as it
trains a hand-written ``keras_model.py``, on any backend (``keras.layers``, ``keras.ops``; the backend is
``KERAS_BACKEND``'s).

Canonical names are the Keras variables' own paths (``model.trainable_variables[i].path``), so get/set weights
move arrays unchanged and name them the same on every backend. A path holds a layer's name, and Keras numbers
unnamed layers by a per-process counter (``dense``, ``dense_1``, ...): a second model built in the same process
(the parity probe's accumulating engine) would be ``dense_2``. So the counter is reset before each build, as
``keras.backend.clear_session()`` resets it, without what else that clears (the dtype policy the engine has just
set, Dynamo's caches). The initial weights are the workload's (:func:`bakeoff.core.keras_function.initial_weights`
draws them from its table of paths and shapes); a table that does not fit the model is refused with the one that
does, which ``python -m bakeoff.workloads.common.keras_function_model WORKLOAD [--preset P] [--set KEY=VALUE]`` also
prints.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import keras
import numpy as np
from keras import ops
from keras.src.utils import naming

from bakeoff.core import registry
from bakeoff.core.keras_function import KerasFunction
from bakeoff.core.spec import RunSpec
from bakeoff.core.workload import Weights


class KerasFunctionNet(keras.Model):
    """The user's model, plus the loss the engine trains: ``summed_loss`` for bakeoff's probes, ``compute_loss``
    for Keras' train step."""

    def __init__(self, inner: keras.Model, loss: str) -> None:
        super().__init__()
        self.inner = inner
        self.loss_name = loss  # not ``loss``: Model.compile sets that

    def call(self, x: Any, training: bool = False) -> Any:
        return self.inner(x, training=training)

    def summed_loss(self, labels: Any, logits: Any) -> tuple[Any, Any]:
        """(summed per-example loss, their count), in fp32 whatever the compute dtype; ``summed / count`` is Keras'
        own loss of that name (its ``sum_over_batch_size`` reduction)."""
        logits = ops.cast(logits, "float32")
        if self.loss_name == "sparse_categorical_crossentropy":  # labels (B, ...), logits (B, ..., classes)
            per = ops.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        else:
            labels = ops.cast(labels, "float32")
            if len(labels.shape) == len(logits.shape) - 1:  # labels (B,) against logits (B, 1)
                labels = ops.expand_dims(labels, -1)
            if self.loss_name == "binary_crossentropy":
                per = ops.binary_crossentropy(labels, logits, from_logits=True)
            else:
                per = ops.square(logits - labels)
            if len(per.shape) > 1:  # as Keras' losses: the mean over the last axis is one example's loss
                per = ops.mean(per, axis=-1)
        return ops.sum(per), ops.sum(ops.ones_like(per))

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None, sample_weight: Any = None,
                     training: bool = True) -> Any:
        """What Keras' train step minimises: the mean of :meth:`summed_loss`."""
        summed, count = self.summed_loss(y, y_pred)
        return summed / count


def build_function_model(declared: KerasFunction, config: Mapping[str, Any]) -> keras.Model:
    """The user's model, built by ``declared.build`` from ``config`` with Keras' layer names counted afresh (module
    docstring); raises TypeError naming the function when it returns anything but a built ``keras.Model``."""
    function = registry.load(declared.build)
    naming.reset_uids()
    model = function(dict(config))
    if not isinstance(model, keras.Model):
        raise TypeError(f"keras_function {declared.build} returned {type(model).__name__}, not a keras.Model")
    if not model.built or not model.inputs:
        raise TypeError(f"keras_function {declared.build} returned an unbuilt model: start it with keras.Input(shape)"
                        " (functional, or the first entry of a Sequential) so its variables exist")
    return model


def shape_table(model: keras.Model) -> dict[str, tuple[int, ...]]:
    """``{path: shape}`` of the model's trainable variables, what the workload's ``init_weights`` states."""
    return {v.path: tuple(int(n) for n in v.shape) for v in model.trainable_variables}


class KerasFunctionModel:
    """ModelImpl for Keras 3 on any backend, of the workload whose ``keras_function`` it is :meth:`bound` to."""

    declared: ClassVar[KerasFunction]
    input_key: ClassVar[str]  # the batch entry the engine passes Keras as x
    labels_key: ClassVar[str]  # ... and as y

    @classmethod
    def bound(cls, declared: KerasFunction) -> type[KerasFunctionModel]:
        """This class for one workload's declaration (:func:`bakeoff.core.registry.model_class` binds it)."""
        return type(cls.__name__, (cls,), {"declared": declared, "input_key": declared.input,
                                           "labels_key": declared.labels})

    def __init__(self, config: Mapping[str, Any], device: str = "cpu") -> None:
        self.config = dict(config)
        self.device = device
        self.module: KerasFunctionNet | None = None

    def build(self, weights: Weights) -> None:
        inner = build_function_model(self.declared, self.config)
        self.module = KerasFunctionNet(inner, self.declared.loss)
        spec = inner.inputs[0]
        self.module(keras.KerasTensor((1, *spec.shape[1:]), spec.dtype))  # build the wrapper, symbolically
        paths = [v.path for v in self.module.trainable_variables]
        twice = sorted({p for p in paths if paths.count(p) > 1})
        if twice:
            raise ValueError(f"keras_function {self.declared.build}: variables share the path(s) {', '.join(twice)}; "
                             "give the layers holding them distinct names (name=...)")
        self.set_weights(weights)

    def loss(self, batch: Mapping[str, Any], training: bool = True) -> tuple[Any, Any]:
        return self.module.summed_loss(batch[self.labels_key], self.module(batch[self.input_key], training=training))

    def outputs(self, batch: Mapping[str, Any]) -> Any:
        return self.probabilities(self.module(batch[self.input_key], training=False))

    def probabilities(self, logits: Any) -> Any:
        """The model's outputs -> what the workload's metric reads (``declared.output``), in fp32."""
        logits = ops.cast(logits, "float32")
        return {"softmax": lambda: ops.softmax(logits, -1), "sigmoid": lambda: ops.sigmoid(logits),
                "identity": lambda: logits}[self.declared.output]()

    def trainable(self) -> list[keras.Variable]:
        return list(self.module.trainable_variables)

    def num_params(self) -> int:
        return int(sum(np.prod(v.shape) for v in self.module.trainable_variables))

    def get_weights(self) -> Weights:
        return {v.path: np.array(v.numpy(), np.float32) for v in self.module.trainable_variables}

    def set_weights(self, weights: Weights) -> None:
        variables = {v.path: v for v in self.module.trainable_variables}
        missing, extra = sorted(variables.keys() - weights.keys()), sorted(weights.keys() - variables.keys())
        wrong = sorted(p for p in variables.keys() & weights.keys()
                       if tuple(np.shape(weights[p])) != tuple(variables[p].shape))
        said = "; ".join(f"{what} {', '.join(paths)}" for what, paths in
                         (("missing", missing), ("not in the model", extra), ("other shapes for", wrong)) if paths)
        if said:
            raise ValueError(f"the weights given do not fit the model keras_function {self.declared.build} makes "
                             f"({said}). Its trainable variables, the table for the workload's init_weights: "
                             f"{shape_table(self.module)}")
        for path, variable in variables.items():
            variable.assign(np.asarray(weights[path], np.float32))


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table of paths and shapes a workload's Keras function makes, for its ``init_weights``."""
    parser = argparse.ArgumentParser(prog="python -m bakeoff.workloads.common.keras_function_model",
                                     description=main.__doc__)
    parser.add_argument("workload", help="workload name, MODULE:CLASS or FILE.py:CLASS")
    parser.add_argument("--preset", default="tiny", help="size preset [tiny]")
    parser.add_argument("--set", dest="config", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field of the preset, repeatable")
    args = parser.parse_args(argv)
    fields = registry.workload_fields(args.workload)
    spec = RunSpec(**fields, framework=f"keras-{keras.backend.backend()}", preset=args.preset, max_steps=1,
                   config=tuple(tuple(item.split("=", 1)) for item in args.config))
    workload = registry.workload(spec)
    if workload.keras_function is None:
        parser.error(f"workload {args.workload} declares no keras_function")
    config = workload.config(args.preset, spec, workload.load_data(spec))
    table = shape_table(build_function_model(workload.keras_function, config))
    print("{" + ",\n ".join(f"{path!r}: {shape}" for path, shape in table.items()) + "}")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
