"""JAX engine: ``jax.jit`` of the whole training step (graph) or the same step op by op (eager), on CPU or one
GPU, with Flax Linen models (:mod:`bakeoff.workloads.common.jax_encoder`) and optax's Adam.

The step is one pure function, ``(state, micro_batches) -> (state, loss)``: each micro-batch's forward pass and
summed-loss gradient, their sum, one division by the total count, and Adam's update. Graph mode jits all of it —
the scope ``tf.function`` compiles, and what ``torch.compile`` compiles in two graphs — into one XLA program; the
micro-batches are a tuple, so the accumulation loop is unrolled for the trial's fixed ``grad_accum``, and a new
combination of micro-batch shapes (variable-length speech) traces and compiles the step again, counted as a graph
build, as ``tf.function`` retraces. Eager mode calls the same function without ``jax.jit``: every primitive is
dispatched on its own (each one a small XLA computation, cached after its first use, as PyTorch eager calls one
kernel per op), with Python between them — slow, and honestly so: that is JAX without its compiler. JAX has no
separate XLA mode: ``jax.jit`` *is* XLA compilation.

Mixed precision is Flax's: the models compute in bf16 (``dtype``) while params, gradients, Adam's moments and the
loss stay fp32, as under ``torch.autocast`` and Keras' ``mixed_bfloat16``. On CPU it buys no arithmetic: XLA
compiles a bf16 matmul to an fp32 dot between converts (measured, jaxlib 0.10.2 on an AVX512-BF16 EPYC: 17
converts around an f32 dot, 1.2× the fp32 matmul's time), and bf16 steps take longer to compile.

Distribution is a strategy object composed into the engine (only one device so far). In JAX a data-parallel
strategy changes where arrays live — params replicated, batches sharded over a mesh — and ``jax.jit`` compiles
the same step into an SPMD program whose sums over the batch are global: the step code does not change, only the
strategy's ``place_*`` hooks do.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax

from bakeoff.core.registry import model_class
from bakeoff.core.spec import Device, Execution, Precision, RunSpec
from bakeoff.core.workload import Batch, Weights
from bakeoff.engines.base import Engine, Unsupported, threads_for
from bakeoff.frameworks.jax import distributed as jax_distributed
from bakeoff.frameworks.jax import probes
from bakeoff.measure.environment import usable_cores
from bakeoff.measure.memory import MemoryProbe

State = dict[str, Any]  # {"params", "opt_state", "rng"}: everything the step reads and replaces


class _CompileLog:
    """Tallies JAX's own compilation events (``jax.monitoring``) for the whole process: tracing to a jaxpr,
    lowering to StableHLO, XLA's backend compile. Registered once per process, at the first engine's setup."""

    EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
              "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
              "/jax/core/compile/backend_compile_duration": "xla_compile"}
    counts: dict[str, int] = {}
    seconds: dict[str, float] = {}
    _registered = False

    @classmethod
    def start(cls) -> None:
        if not cls._registered:
            jax.monitoring.register_event_duration_secs_listener(cls._listen)
            cls._registered = True

    @classmethod
    def _listen(cls, event: str, duration: float, **_: Any) -> None:
        name = cls.EVENTS.get(event)
        if name is not None:
            cls.counts[name] = cls.counts.get(name, 0) + 1
            cls.seconds[name] = cls.seconds.get(name, 0.0) + duration


class _BoundModel:
    """The engine's current params seen as the stateful ModelImpl that framework-free code expects (the parity
    probe's ``set_weights`` / ``get_weights``, the loop's replica weights). JAX models are pure functions of a
    params pytree (:class:`bakeoff.workloads.common.jax_encoder.FlaxModel`); this view reads and replaces the
    engine's params, nothing else."""

    def __init__(self, engine: JaxEngine) -> None:
        self._engine = engine

    def get_weights(self) -> Weights:
        return self._engine.model.get_weights(self._engine.strategy.host(self._engine.state["params"]))

    def set_weights(self, weights: Weights) -> None:
        engine = self._engine
        params = engine.strategy.place_state({"params": engine.model.init(weights)})["params"]
        engine.state = {**engine.state, "params": params}

    def num_params(self) -> int:
        return self._engine.model.num_params(self._engine.strategy.host(self._engine.state["params"]))


def _pick_device(spec: RunSpec) -> jax.Device:
    """The device the spec allows: CPU, or this process's first GPU when asked for (``cuda``) or seen (``auto``) —
    its own under ``jax.distributed`` (``jax.local_devices``; ``jax.devices`` lists every process's, and the first
    of those is process 0's), where its memory is probed.

    For ``cpu`` the platform is pinned before JAX starts its backends, so a GPU on the machine is not initialised
    (JAX would otherwise reserve most of its memory).
    """
    if spec.device is Device.CPU:
        jax.config.update("jax_platforms", "cpu")
        return jax.devices("cpu")[0]
    try:
        gpus = jax.local_devices(backend="gpu")
    except RuntimeError:
        gpus = []
    if spec.device is Device.CUDA and not gpus:
        raise Unsupported("device cuda requested but JAX sees no GPU (install jax[cuda12])")
    return gpus[0] if gpus else jax.devices("cpu")[0]


def matmul_rates(precision: str, n: int, repeats: int, threads: int) -> list[float]:
    """FLOP/s of ``repeats`` dense ``(n, n) @ (n, n)`` products (2·n³ FLOPs each) in ``precision`` on this
    process's device, after warm-up (:mod:`bakeoff.measure.ceiling`). ``threads`` is not applied: XLA's CPU
    runtime has no thread-count setting, as in every JAX trial."""
    import time

    dtype = {"fp32": jnp.float32, "bf16": jnp.bfloat16}[precision]
    rng = np.random.default_rng(0)
    a, b = (jnp.asarray(rng.standard_normal((n, n)), dtype) for _ in range(2))
    matmul = jax.jit(lambda x, y: jnp.dot(x, y, precision=jax.lax.Precision.HIGHEST))
    rates = []
    for i in range(repeats + 3):  # 3 untimed: the compile, allocation
        t0 = time.perf_counter()
        matmul(a, b).block_until_ready()
        if i >= 3:
            rates.append(2 * n**3 / (time.perf_counter() - t0))
    return rates


def gemm_rates(precision: str, shapes: list[tuple[int, int, int, int]], repeats: list[int],
               threads: int) -> list[list[float]]:
    """FLOP/s of ``repeats[i]`` products of shape ``i`` ``(batch, m, n, k)`` (``batch`` independent ``(m, k) @ (k, n)``,
    2·batch·m·n·k FLOPs) in ``precision`` on this process's device, each after one untimed product (the compile):
    the rates of a plan's own GEMMs (:mod:`bakeoff.measure.gemm_rates`). ``threads`` is not applied, as in
    :func:`matmul_rates`."""
    from bakeoff.measure.gemm_rates import sample

    dtype = {"fp32": jnp.float32, "bf16": jnp.bfloat16}[precision]
    rng = np.random.default_rng(0)
    matmul = jax.jit(lambda x, y: jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST))
    out = []
    for (batch, m, n, k), times in zip(shapes, repeats, strict=True):
        lead = (batch,) if batch > 1 else ()
        a = jnp.asarray(rng.standard_normal((*lead, m, k)), dtype)
        b = jnp.asarray(rng.standard_normal((*lead, k, n)), dtype)
        out.append(sample(lambda a=a, b=b: matmul(a, b).block_until_ready(), 2 * batch * m * n * k, times))
    return out


class JaxEngine(Engine):
    framework = "jax"

    def setup(self, weights: Mapping[str, np.ndarray]) -> None:
        spec = self.spec  # what JAX cannot run (xla, fp16) was refused before this process started (its record)
        rendezvous_s = jax_distributed.configure(spec)  # before JAX starts its backends
        self.device = _pick_device(spec)
        # fp32 means fp32, as in the other engines: JAX's default on a GPU runs fp32 matmuls and convolutions in
        # TF32 (bf16 passes on newer chips); "highest" keeps them fp32 (no effect on CPU).
        jax.config.update("jax_default_matmul_precision", "highest")
        self.strategy = jax_distributed.strategy_for(spec, self.device, rendezvous_s)
        _CompileLog.start()
        self.compute_dtype = jnp.bfloat16 if spec.precision is Precision.BF16 else jnp.float32
        self.model = model_class(spec, "jax")(self.config)
        self.impl = _BoundModel(self)
        # torch.optim.Adam's update: optax divides the bias-corrected first moment by √(bias-corrected second
        # moment) + ε, PyTorch by √v / √(1 − β₂ᵗ) + ε — the same expression (tests/test_jax_engine.py checks it).
        self.optimizer = optax.adam(self.config["learning_rate"], b1=0.9, b2=0.999, eps=1e-8)
        params = self.model.init(dict(weights))
        # Adam's moments exist from the start (zeros), as in the other engines: the memory baseline holds them.
        self.state: State = self.strategy.place_state({"params": params, "opt_state": self.optimizer.init(params),
                                                       "rng": jax.random.PRNGKey(spec.seed)})  # dropout masks
        self.steps_done = 0
        self._traces = 0

        graph = spec.execution is Execution.GRAPH
        compile_: Callable = jax.jit if graph else (lambda f, **_: f)
        # The state is donated: XLA updates params and Adam's moments in place instead of holding two copies.
        self._step = compile_(self._train_step, donate_argnums=0)
        self._gradients = compile_(self._mean_gradients)  # parity checks what the compiled step computes
        self._outputs = compile_(lambda params, batch: self.model.outputs(params, batch, self.compute_dtype))

    # --- the step: pure functions of the state ---------------------------------------------------------------

    def _accumulate(self, params: Any, micro_batches: tuple[dict[str, jax.Array], ...], rng: jax.Array,
                    ) -> tuple[Any, jax.Array, jax.Array]:
        """Summed-loss gradients over the micro-batches, added, with the summed loss and the count: nothing is
        divided yet, so dividing once by the total count makes k micro-batches of b exactly one batch of k·b."""
        grad = jax.value_and_grad(self.model.loss, has_aux=True)
        total = count = jnp.zeros((), jnp.float32)
        grads = None
        for i, batch in enumerate(micro_batches):  # unrolled under jit: k is fixed per trial
            (summed, n), g = grad(params, batch, True, jax.random.fold_in(rng, i), self.compute_dtype)
            grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
            total, count = total + summed, count + n
        return grads, total, count

    def _mean_gradients(self, params: Any, micro_batches: tuple[dict[str, jax.Array], ...], rng: jax.Array,
                        ) -> tuple[Any, jax.Array]:
        grads, total, count = self._accumulate(params, micro_batches, rng)
        return jax.tree.map(lambda g: g / count, grads), total / count

    def _train_step(self, state: State, micro_batches: tuple[dict[str, jax.Array], ...]) -> tuple[State, jax.Array]:
        self._traces += 1  # Python side effect: once per trace under jit (a new shape), every step in eager
        rng, step_rng = jax.random.split(state["rng"])
        grads, loss = self._mean_gradients(state["params"], micro_batches, step_rng)
        updates, opt_state = self.optimizer.update(grads, state["opt_state"], state["params"])
        return {"params": optax.apply_updates(state["params"], updates), "opt_state": opt_state, "rng": rng}, loss

    # --- the Engine interface ---------------------------------------------------------------------------------

    def _place(self, micro_batches: Sequence[Batch]) -> tuple[dict[str, jax.Array], ...]:
        return tuple(self.strategy.place_batch(b) for b in micro_batches)

    def train_step(self, micro_batches: Sequence[Batch]) -> float:
        placed = self._place(micro_batches)
        self.state, loss = self._step(self.state, placed)
        self.steps_done += 1
        self._last_placed = placed
        return float(self.strategy.host(loss))  # host copy: waits for the device

    def gradients(self, micro_batches: Sequence[Batch]) -> list[np.ndarray]:
        grads, _ = self._gradients(self.state["params"], self._place(micro_batches), self.state["rng"])
        return [np.asarray(g) for g in jax.tree.leaves(self.strategy.host(grads))]

    def canonical_gradients(self, micro_batches: Sequence[Batch]) -> dict[str, np.ndarray]:
        """:meth:`gradients` under canonical names: a gradient pytree has the params' structure, so the model's own
        mapping reads it as it reads params."""
        grads, _ = self._gradients(self.state["params"], self._place(micro_batches), self.state["rng"])
        return self.model.get_weights(self.strategy.host(grads))

    def predict(self, split: Mapping[str, np.ndarray], batch_size: int) -> np.ndarray:
        n = len(next(iter(split.values())))
        parts = []
        for start in range(0, n, batch_size):
            batch = self.strategy.place_eval({k: v[start:start + batch_size] for k, v in split.items()})
            parts.append(np.asarray(self.strategy.host(self._outputs(self.state["params"], batch)), np.float32))
        return np.concatenate(parts)

    def num_params(self) -> int:
        return self.impl.num_params()

    def memory_probe(self) -> MemoryProbe:
        return _DeviceProbe(self.device) if self.device.platform != "cpu" else super().memory_probe()

    def environment(self) -> dict[str, Any]:
        env: dict[str, Any] = {
            "framework_version": jax.__version__,
            "jaxlib_version": metadata.version("jaxlib"),
            "flax_version": metadata.version("flax"),
            "optax_version": metadata.version("optax"),
            "device": f"{self.device.platform}:{self.device.id}",
            "device_kind": self.device.device_kind,
            "jax_device_count": jax.device_count(),
            # XLA's CPU runtime sizes its thread pool to the cores this process may run on when the backend
            # starts; there is no setting for a count (XLA_FLAGS can only make it single-threaded), so
            # spec.threads is recorded, not applied.
            "intra_op_threads": usable_cores(),
            "threads_requested": threads_for(self.spec),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            **probes.tf32(),  # as read, after setup turned it off
            "matmul_precision": jax.config.jax_default_matmul_precision,
            "mixed_precision": ("flax dtype=bfloat16 (params, gradients, Adam state and loss fp32)"
                                if self.compute_dtype == jnp.bfloat16 else "off"),
            "loss_scaling": "off",
            "execution": "jax.jit (whole step)" if self.spec.execution is Execution.GRAPH else "op by op (no jit)",
        }
        if self.device.platform != "cpu":  # JAX reserves most of a GPU's memory up front unless told otherwise
            env["xla_python_client_preallocate"] = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
            env["xla_python_client_mem_fraction"] = os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75")
        env.update(self.strategy.environment())
        return env

    def data_shard(self) -> tuple[int, int]:
        return self.strategy.rank, self.strategy.world

    def is_chief(self) -> bool:
        return self.strategy.rank == 0

    def replica_weights(self) -> list[Weights]:
        return jax_distributed.replica_weights(self.model, self.strategy, self.state["params"])

    def distributed_figures(self) -> dict[str, Any]:
        """The strategy's figures, with the collectives XLA compiled the training step to (read from the
        optimised HLO of the step as last called: one more compile, off the training clock)."""
        if isinstance(self.strategy, jax_distributed.Sharded):
            if self.spec.execution is Execution.GRAPH and getattr(self, "_last_placed", None) is not None:
                traces = self._traces  # this trace is not a graph build of training
                text = jax.jit(self._train_step).lower(self.state, self._last_placed).compile().as_text()
                self._traces = traces
                self.strategy.compiled_collectives(text)
            return self.strategy.figures(self.state["params"])
        return {}

    # Checkpoints: Flax's own serialisation (msgpack of the state pytree), one file written atomically. Orbax is
    # JAX's checkpoint library for sharded, asynchronous, multi-host saves; one process's state needs none of it,
    # and a single file makes the checkpoint as atomic as the loop's own state file.

    def _saved(self) -> dict[str, Any]:
        return {**self.state, "step": self.steps_done}

    def save_checkpoint(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / "state.msgpack.tmp"
        tmp.write_bytes(flax.serialization.to_bytes({**self.strategy.host(self.state), "step": self.steps_done}))
        tmp.replace(directory / "state.msgpack")

    def load_checkpoint(self, directory: Path) -> None:
        restored = flax.serialization.from_bytes(self._saved(), (directory / "state.msgpack").read_bytes())
        self.steps_done = int(restored.pop("step"))
        self.state = self.strategy.place_state(restored)

    def profiler(self, directory: Path) -> contextlib.AbstractContextManager[_StepTrace]:
        return trace(directory)

    def graph_builds(self) -> int:
        return self._traces if self.spec.execution is Execution.GRAPH else 0

    def extras(self) -> dict[str, Any]:
        """Compile counters: the step's traces (graph mode), and JAX's compilation events in this process —
        in eager mode these are the single primitives' small XLA computations, compiled on first use."""
        out: dict[str, Any] = {f"jax_{k}_count": v for k, v in _CompileLog.counts.items()}
        out.update({f"jax_{k}_s": round(v, 4) for k, v in _CompileLog.seconds.items()})
        if self.spec.execution is Execution.GRAPH:
            out["train_step_traces"] = self._traces
        return out


class _StepTrace:
    tool = "jax.profiler"

    def step(self, number: int) -> contextlib.AbstractContextManager:
        # the step marker XProf's step-time views read (TensorFlow's Trace(step_num=...) in JAX)
        return jax.profiler.StepTraceAnnotation("train", step_num=number)


@contextlib.contextmanager
def trace(directory: Path) -> Iterator[_StepTrace]:
    """JAX's profiler over the block, written when it ends into ``directory/plugins/profile/<time>/``:
    ``<host>.xplane.pb`` for TensorBoard's profile plugin, and ``<host>.trace.json.gz`` and
    ``perfetto_trace.json.gz`` for Perfetto (:mod:`bakeoff.trial.profile`)."""
    jax.profiler.start_trace(str(directory), create_perfetto_trace=True)
    try:
        yield _StepTrace()
    finally:
        jax.profiler.stop_trace()


class _DeviceProbe:
    """XLA's device allocator: bytes in use now and at peak (``Device.memory_stats``). It cannot reset its peak,
    so the loop reports the whole trial's peak and leaves training's own increment missing, with the reason."""

    kind = "jax memory_stats peak_bytes_in_use"

    def __init__(self, device: jax.Device) -> None:
        self.device = device

    def current(self) -> int:
        return int((self.device.memory_stats() or {}).get("bytes_in_use", 0))

    def peak(self) -> int | None:
        stats = self.device.memory_stats()
        return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None

    def reset_peak(self) -> bool:
        return False
