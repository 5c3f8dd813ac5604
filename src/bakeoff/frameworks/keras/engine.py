"""Keras 3 engine: the same Keras model code trained by Keras' own train step on JAX, PyTorch or TensorFlow.

A Keras team trains with ``model.fit``; one bakeoff step is ``Model.train_on_batch`` per micro-batch, the same
``train_step`` and compiled function ``fit`` runs, without ``fit``'s epoch loop and callbacks (the base loop owns
those). What Keras 3.15 compiles, by backend (``trainer.py`` of each, checked on this install):

  ============  =====================================  ======================================================
  execution     compile(...)                           what runs
  ============  =====================================  ======================================================
  eager         ``run_eagerly=True``                   op by op, Python every step (all backends)
  graph         jax: ``jit_compile=True``              ``jax.jit`` of the whole stateless step (XLA)
                torch: ``jit_compile=True``            ``torch.compile`` of the step (Keras' default, "auto",
                                                       is eager on torch: compiling is opt-in, as in PyTorch)
                tensorflow: ``jit_compile=False``      ``tf.function`` of the step
  xla           tensorflow: ``jit_compile=True``       ``tf.function(jit_compile=True)``; jax's graph is XLA
                                                       already, torch has no XLA mode here
  ============  =====================================  ======================================================

torch.compile of Keras' torch step breaks where Keras calls ``loss.backward()`` (Dynamo does not trace it): a
forward-and-loss graph whose backward AOTAutograd compiles, then the optimizer update — the split the native torch
engine has (measured on MNIST: 7 frames compiled, graph breaks 3 in the step, the rest in predict).

Gradient accumulation is Keras' own (``Optimizer(gradient_accumulation_steps=k)``): it averages the k micro-batches'
mean-loss gradients, which is the gradient of the whole batch exactly when the micro-batches are the same size
(checked per step). Adam is :class:`bakeoff.frameworks.tensorflow.optim.Adam`: PyTorch's update, in ``keras.ops``
only (on TensorFlow with embedding gradients densified first: :func:`~bakeoff.frameworks.keras.backends.adam_class`
says why).

``gradients()`` (the parity probe, never on the training clock) cannot go through ``train_on_batch``, which
updates the weights; Keras 3 has no backend-agnostic autodiff, so it is the one place with a branch per
backend: ``jax.value_and_grad`` over ``Model.stateless_call``, ``backward()`` into ``.grad`` on torch, a
``GradientTape`` on TensorFlow — each on the model's own ``summed_loss``, the loss its ``compute_loss`` trains.

Importing Keras 3.15 imports JAX whatever the backend, when JAX is installed: ``keras.callbacks`` imports
``orbax_checkpoint``, which runs ``try: import jax`` at import time (keras-team/keras#21762). :func:`_import_keras`
makes that optional import fail, as it would where JAX is not installed, so a keras-torch or keras-tensorflow
process holds its own backend only (measured, 2 cores: JAX's import adds ~0.8 s and ~120 MB RSS, 292 modules,
21 jaxlib shared libraries). Likewise ``keras.utils.set_random_seed`` imports TensorFlow on any backend (to seed
``tf.data``): it runs with TensorFlow blocked on the jax and torch backends.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bakeoff.core.registry import model_class
from bakeoff.core.spec import Execution, Precision
from bakeoff.core.workload import Batch
from bakeoff.engines.base import Engine, threads_for
from bakeoff.frameworks.keras.backends import (
    GRADIENTS,
    JaxDeviceProbe,
    adam_class,
    backend_environment,
    labels_key,
    pin_device_and_threads,
)
from bakeoff.measure import numerics
from bakeoff.measure.memory import MemoryProbe

BACKENDS = {"keras-jax": "jax", "keras-torch": "torch", "keras-tensorflow": "tensorflow"}

# What each execution mode is on each backend (see the module docstring); why a mode is missing is the record's
# (bakeoff.core.frameworks).
COMPILED_PATH = {
    ("jax", Execution.GRAPH): "jax.jit", ("torch", Execution.GRAPH): "torch.compile",
    ("tensorflow", Execution.GRAPH): "tf.function", ("tensorflow", Execution.XLA): "tf.function(jit_compile=True)",
}


@contextlib.contextmanager
def _blocked(*names: str) -> Iterator[None]:
    """Make ``import NAME`` fail inside the block, as if NAME were not installed (``sys.modules[NAME] = None`` is
    Python's documented way), for optional imports Keras makes whatever the backend (module docstring). The
    sentinels go at the end, so anything that really needs NAME later imports it (and the trial's isolation check
    sees it). A module already imported is left alone."""
    added = [n for n in names if n not in sys.modules]
    for name in added:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in added:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def _foreign(backend: str) -> tuple[str, ...]:
    """The frameworks Keras imports optionally that a process on ``backend`` should not load."""
    return tuple(f for f in ("jax", "tensorflow") if f != backend)


def _import_keras() -> Any:
    """``import keras`` without the JAX import Keras 3.15 makes on every backend (module docstring)."""
    if "keras" in sys.modules:
        return sys.modules["keras"]
    with _blocked(*_foreign(os.environ.get("KERAS_BACKEND", "tensorflow"))):
        import keras
    return keras


keras = _import_keras()


class KerasEngine(Engine):
    framework = "keras"

    def setup(self, weights: Mapping[str, np.ndarray]) -> None:
        spec = self.spec
        self.backend = BACKENDS[spec.framework.value]
        actual = keras.backend.backend()
        if actual != self.backend:
            raise RuntimeError(f"framework {spec.framework.value} runs Keras on {self.backend}, but this process's "
                               f"Keras runs on {actual!r} (KERAS_BACKEND={os.environ.get('KERAS_BACKEND')!r}): "
                               f"set KERAS_BACKEND={self.backend} before keras is imported")
        # What the Keras rows cannot run (parallelism, some XLA, fp16) was refused before this process started.
        self.device = pin_device_and_threads(self.backend, spec.device, threads_for(spec))
        # Dropout masks: each Dropout's SeedGenerator draws its seed from Python's random, seeded here. Keras'
        # set_random_seed also seeds TensorFlow when it can import it: not on the other backends.
        with _blocked(*_foreign(self.backend)):
            keras.utils.set_random_seed(spec.seed)
        # Mixed precision, Keras' own way: a global dtype policy (variables fp32, compute bf16) before the build.
        self.policy = "mixed_bfloat16" if spec.precision is Precision.BF16 else "float32"
        keras.mixed_precision.set_dtype_policy(self.policy)

        self.impl = model_class(spec, spec.framework)(self.config, self.device)
        self.impl.build(dict(weights))
        self.module = self.impl.module
        accum = spec.grad_accum if spec.grad_accum > 1 else None
        adam = adam_class(self.backend)
        self.optimizer = adam(learning_rate=self.config["learning_rate"], beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                              gradient_accumulation_steps=accum)
        self.optimizer.build(self.module.trainable_variables)  # Adam's moments in the memory baseline, as torch's
        eager = spec.execution is Execution.EAGER
        jit = spec.execution is Execution.XLA or (spec.execution is Execution.GRAPH and self.backend != "tensorflow")
        self.module.compile(optimizer=self.optimizer, run_eagerly=eager, jit_compile=jit)
        self._traces = 0
        if self.backend != "torch":  # torch.compile: Dynamo's own counters (a Python counter would be a guard)
            self._count_traces()
        self.compiled = "eager (run_eagerly=True)" if eager else COMPILED_PATH[self.backend, spec.execution]
        if self.backend == "torch" and spec.execution is Execution.GRAPH:
            from bakeoff.frameworks.torch.engine import compile_settings

            self._graph_breaks = compile_settings()
        # Compiled like the step on jax and tensorflow (the probes check what the compiled code computes); eager
        # on torch (Keras compiles torch's step, not a gradient function).
        self._gradient_fn = GRADIENTS[self.backend](self.impl, spec.execution)

    def _count_traces(self) -> None:
        """Count Python calls of the model's compute_loss: once per jax.jit / tf.function trace of the step."""
        compute_loss = self.module.compute_loss

        @functools.wraps(compute_loss)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self._traces += 1
            return compute_loss(*args, **kwargs)

        self.module.compute_loss = counted

    def _xy(self, batch: Batch) -> tuple[Any, Any]:
        """The batch as backend tensors: numpy arrays handed to Keras' torch.compile'd step break its graph
        (Dynamo cannot trace Keras' ``ndarray.dtype`` check, measured), so the host→device copy happens here."""
        return (keras.ops.convert_to_tensor(batch[self.impl.input_key]),
                keras.ops.convert_to_tensor(batch[labels_key(self.impl)]))

    def train_step(self, micro_batches: Sequence[Batch]) -> float:
        if len(micro_batches) != self.spec.grad_accum:
            raise ValueError(f"{len(micro_batches)} micro-batches for an optimizer that accumulates "
                             f"{self.spec.grad_accum} (spec.grad_accum)")
        sizes = [len(b[labels_key(self.impl)]) for b in micro_batches]
        if len(set(sizes)) > 1:  # Keras averages micro-batch means: the batch's mean only for equal sizes
            raise ValueError(f"Keras' gradient accumulation needs micro-batches of one size; got {sizes}")
        losses = [self.module.train_on_batch(*self._xy(b), return_dict=True)["loss"] for b in micro_batches]
        return float(np.mean(losses))  # train_on_batch returns host floats: the device is synchronised

    def gradients(self, micro_batches: Sequence[Batch]) -> list[np.ndarray]:
        totals: list[np.ndarray] | None = None
        count = 0.0
        for batch in micro_batches:  # summed-loss gradients, added up; divided once by the total count
            grads, n = self._gradient_fn(*self._xy(batch))
            totals = grads if totals is None else [t + g for t, g in zip(totals, grads, strict=True)]
            count += n
        return [t / np.float32(count) for t in totals]

    def canonical_gradients(self, micro_batches: Sequence[Batch]) -> dict[str, np.ndarray]:
        """:meth:`gradients` under canonical names: loaded into the variables in place of the weights, read back
        through the model's own weight mapping, and the weights restored."""
        variables = self.module.trainable_variables
        grads, saved = self.gradients(micro_batches), [v.numpy() for v in variables]
        for variable, value in zip(variables, grads, strict=True):
            variable.assign(value)
        out = self.impl.get_weights()
        for variable, value in zip(variables, saved, strict=True):
            variable.assign(value)
        return out

    def predict(self, split: Mapping[str, np.ndarray], batch_size: int) -> np.ndarray:
        """Keras' own predict step (``predict_on_batch``: compiled as the train step is) for the logits, then the
        model's probabilities; eager mode calls the model directly."""
        n = len(next(iter(split.values())))
        parts = []
        for start in range(0, n, batch_size):
            batch = {k: v[start:start + batch_size] for k, v in split.items()}
            if self.spec.execution is Execution.EAGER:
                out = self.impl.outputs(batch)
            else:
                x = keras.ops.convert_to_tensor(batch[self.impl.input_key])  # numpy breaks torch.compile's graph
                out = self.impl.probabilities(self.module.predict_on_batch(x))
            parts.append(np.asarray(keras.ops.convert_to_numpy(out), np.float32))
        return np.concatenate(parts)

    def num_params(self) -> int:
        return self.impl.num_params()

    def environment(self) -> dict[str, Any]:
        return {**backend_environment(self.backend), "keras_version": keras.__version__,
                "keras_backend": keras.backend.backend(), "device": self.device,
                **numerics.tf32(self.backend),
                "mixed_precision": self.policy, "loss_scaling": "off", "compiled": self.compiled,
                "training_api": "keras.Model.train_on_batch",
                "optional_imports_blocked": list(_foreign(self.backend))}

    def memory_probe(self) -> MemoryProbe:
        if self.device.startswith("cpu"):
            return super().memory_probe()
        if self.backend == "torch":
            import torch

            from bakeoff.frameworks.torch.engine import _CudaProbe

            return _CudaProbe(torch.device(self.device))
        if self.backend == "tensorflow":
            from bakeoff.frameworks.tensorflow.engine import _GpuProbe

            return _GpuProbe("GPU:0")
        return JaxDeviceProbe()

    def profiler(self, directory: Path) -> contextlib.AbstractContextManager[Any]:
        """The backend framework's own profiler, as its engine runs it (Keras has none of its own)."""
        if self.backend == "torch":
            from bakeoff.frameworks.torch.engine import trace

            return trace(directory, cuda=self.device.startswith("cuda"))
        if self.backend == "tensorflow":
            from bakeoff.frameworks.tensorflow.engine import trace

            return trace(directory)
        from bakeoff.frameworks.jax.engine import trace

        return trace(directory)

    # --- checkpoints: every model and optimizer variable (weights, Adam moments and step, gradient accumulators,
    # the Dropout layers' SeedGenerator states), by position, as one .npz: exact, and the same on every backend.
    # On torch, an unseeded Dropout draws from torch's global generator (keras.src.backend.torch.random.dropout
    # calls F.dropout), so its state is kept too.

    def _state(self) -> list[Any]:
        return [*self.module.variables, *self.optimizer.variables]

    def save_checkpoint(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        arrays = {f"v{i:05d}": np.asarray(v.numpy()) for i, v in enumerate(self._state())}
        if self.backend == "torch":
            import torch

            arrays["torch_cpu_rng"] = torch.get_rng_state().numpy()
            if torch.cuda.is_available():
                arrays["torch_cuda_rng"] = torch.cuda.get_rng_state().numpy()
        tmp = directory / "state.npz.tmp"
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        tmp.replace(directory / "state.npz")

    def load_checkpoint(self, directory: Path) -> None:
        with np.load(directory / "state.npz") as saved:
            state = self._state()
            held = [name for name in saved.files if name.startswith("v")]
            if len(held) != len(state):
                raise ValueError(f"checkpoint in {directory} holds {len(held)} variables, the model and "
                                 f"optimizer have {len(state)}")
            for i, variable in enumerate(state):
                variable.assign(saved[f"v{i:05d}"])
            if self.backend == "torch":
                import torch

                torch.set_rng_state(torch.from_numpy(saved["torch_cpu_rng"]))
                if "torch_cuda_rng" in saved.files:
                    torch.cuda.set_rng_state(torch.from_numpy(saved["torch_cuda_rng"]))

    def graph_builds(self) -> int:
        if self.spec.execution is Execution.EAGER:
            return 0
        if self.backend == "torch":
            from torch._dynamo.utils import counters

            return int(counters["stats"]["unique_graphs"])
        return self._traces

    def extras(self) -> dict[str, Any]:
        if self.spec.execution is Execution.EAGER:
            return {}
        if self.backend == "torch":
            from torch._dynamo.utils import counters

            return {"dynamo_frames_compiled": int(counters["stats"]["unique_graphs"]),
                    "dynamo_graph_breaks": int(sum(counters["graph_break"].values())),
                    "dynamo_graph_breaks_at": self._graph_breaks.sites()}
        return {"train_step_traces": self._traces}
