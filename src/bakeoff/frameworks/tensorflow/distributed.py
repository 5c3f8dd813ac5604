"""TensorFlow distribution strategies for the TF engine: where replicas live, how a step is fed, run, reduced, timed.

The engine composes its step builder with one :class:`Distribution`, chosen from the spec by :func:`distribution`:

* :class:`OneDevice` (parallelism none): no strategy; the step runs as written.
* :class:`Mirrored` (data_parallel): ``MirroredStrategy`` over N devices of this one process — N logical CPU
  devices on a CPU host, the first N GPUs on a GPU host. The process takes whole global batches; each replica
  gets its :func:`~bakeoff.core.workload.shard_batch` slice through ``experimental_distribute_values_from_function``.
* :class:`MultiWorker` (multi_worker): ``MultiWorkerMirroredStrategy`` from ``TF_CONFIG``, one replica per worker
  process; the loop hands each worker its shard (``data_shard() = (task index, workers)``).
* :class:`ParameterServer` (parameter_server): ``ParameterServerStrategy`` and a ``ClusterCoordinator`` in the
  chief; variables live on the parameter server, each step is one global batch scheduled on whichever worker is
  free (asynchronous; :meth:`ParameterServer.execute` says how it is timed). The workers and the parameter
  server are ``python -m bakeoff.frameworks.tensorflow.server`` processes.

Exact gradient accumulation under the synchronous strategies (``replica_step`` in the engine). Replica r of R holds
its shards s_r1 … s_rk of the step's k global micro-batches. It computes, without any communication,
    G_r = Σ_j ∇ L(s_rj),   L_r = Σ_j L(s_rj),   n_r = Σ_j n(s_rj)
(L: the *summed* loss, n: its count — examples, or valid frames in speech, which differ from shard to shard).
One scalar all-reduce gives the step's global count N = Σ_r n_r and summed loss Σ_r L_r. Each replica hands the
optimizer G_r / N; Keras' optimizer, in replica context, all-reduces (sums) the gradients it is given before the
update (``TFOptimizer._all_reduce_sum_gradients``), so every replica applies
    Σ_r G_r / N = ∇(Σ over all k·R shards of L) / N,
the mean-loss gradient of single-device training on the same k global batches. Gradients are reduced once per
optimizer step however large k is; the count needs its own (scalar) reduction because the division must use the
global count. Were the optimizer's reduction lost, replicas would diverge (``replicas_identical`` would say so).
"""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bakeoff.core.spec import Parallelism, RunSpec
from bakeoff.core.workload import Batch, Weights, shard_batch  # noqa: E402
from bakeoff.engines.base import Unsupported  # noqa: E402
from bakeoff.measure import sync  # noqa: E402
from bakeoff.measure.environment import local_rank  # noqa: E402

SERVER_WAIT_S = 120.0  # how long the chief waits for the cluster's servers to listen
_COLLECTIVE_OPS = ("CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3", "NcclAllReduce")
SUM = tf.distribute.ReduceOp.SUM


def _count(n: int, thing: str) -> str:
    """``2 worker processes``, ``1 logical CPU device``."""
    plural = thing + ("es" if thing.endswith("s") else "s")
    return f"{n} {thing if n == 1 else plural}"


class Distribution:
    """One device: no strategy. The base of the strategies, whose methods the engine calls in this order:
    :meth:`scope` around building the model and optimizer, :meth:`place` then :meth:`execute` every step (the
    compiled step calls :meth:`run` and :meth:`sum_over_replicas` inside), :meth:`finish` before evaluation,
    :meth:`replica_weights` and :meth:`figures` after training."""

    words = "one device, no strategy"
    replicas = 1  # in the whole trial
    local_replicas = 1  # in this process
    whole_step_xla = True  # whether XLA may compile the whole step (else only each replica's gradients)
    setup_s = 0.0

    def scope(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def data_shard(self) -> tuple[int, int]:
        return 0, 1

    def is_chief(self) -> bool:
        return True

    def place(self, micro_batches: Sequence[Batch]) -> Any:
        """This process's micro-batches as the compiled step's argument."""
        return [{k: tf.convert_to_tensor(v) for k, v in b.items()} for b in micro_batches]

    def run(self, replica_step: Callable[[Any], tf.Tensor], args: Any) -> tf.Tensor:
        """Inside the step: run ``replica_step`` on every local replica, return the (global) mean loss."""
        return replica_step(args)

    def sum_over_replicas(self, values: list[tf.Tensor]) -> list[tf.Tensor]:
        """Inside a replica: the sum of ``values`` over all replicas of the trial."""
        return values

    def execute(self, step: Callable[[Any], tf.Tensor], args: Any) -> float:
        """Run one optimizer step; the loss on the host (so the step has finished)."""
        return float(step(args).numpy())

    def finish(self) -> None:
        """Wait for every step in flight (before evaluation)."""

    def replica_weights(self, impl: Any) -> list[Weights]:
        return [impl.get_weights()]

    def figures(self, variables: Sequence[Any], step: Callable | None, args: Any, eager: bool) -> dict[str, Any]:
        return {}


class OneDevice(Distribution):
    """Parallelism none: exactly the single-device step."""


class _Synchronous(Distribution):
    """What MirroredStrategy and MultiWorkerMirroredStrategy share: every replica takes its shard of each global
    batch, replicas sum their counts and gradients (module docstring) and apply the same update."""

    whole_step_xla = False
    strategy: tf.distribute.Strategy

    def scope(self) -> contextlib.AbstractContextManager:
        return self.strategy.scope()

    _count: Callable[[], tf.Tensor] | None = None

    def _barrier(self) -> None:
        """One scalar all-reduce across every replica: the cluster is connected and complete before training
        (part of ``setup_s``, not of the first step), and every process is there before each timed reduction."""
        if self._count is None:
            @tf.function  # a tf.function, as the steps will be (eagerly, TensorFlow warns of strategy overhead)
            def count() -> tf.Tensor:
                return self.strategy.reduce(SUM, self.strategy.run(lambda: tf.constant(1.0)), axis=None)

            self._count = count  # traced once, called again before each timed reduction
        total = float(self._count().numpy())
        if total != self.replicas:
            raise RuntimeError(f"{self.words}: {total:g} replicas answered, expected {self.replicas}")

    def place(self, micro_batches: Sequence[Batch]) -> Any:
        local, devices = self.local_replicas, self.strategy.extended.worker_devices

        def value(ctx: tf.distribute.experimental.ValueContext) -> list[dict[str, tf.Tensor]]:
            # Replicas are numbered worker by worker, so this process's replica i of its `local` replicas takes
            # shard i of the process's share: shard (worker·local + i) of the global batch.
            i = ctx.replica_id_in_sync_group % local
            with tf.device(devices[i]):
                return [{k: tf.convert_to_tensor(v) for k, v in shard_batch(b, i, local).items()}
                        for b in micro_batches]

        return self.strategy.experimental_distribute_values_from_function(value)

    def run(self, replica_step: Callable[[Any], tf.Tensor], args: Any) -> tf.Tensor:
        losses = self.strategy.run(replica_step, args=(args,))
        return self.strategy.experimental_local_results(losses)[0]  # every replica holds the same global mean

    def sum_over_replicas(self, values: list[tf.Tensor]) -> list[tf.Tensor]:
        return tf.distribute.get_replica_context().all_reduce(SUM, values)

    def replica_weights(self, impl: Any) -> list[Weights]:
        """Every local replica's copy, under canonical names: each copy in turn is loaded into the primary
        component (which ``impl.get_weights`` reads) and read back; the primary is restored after."""
        mirrored = [v.value for v in impl.trainable()]
        copies = [[c.numpy() for c in m.values] for m in mirrored]  # per variable, per local replica
        out = []
        for i in range(self.local_replicas):
            for m, values in zip(mirrored, copies, strict=True):
                m.values[0].assign(values[i])
            out.append(impl.get_weights())
        for m, values in zip(mirrored, copies, strict=True):
            m.values[0].assign(values[0])
        return out

    def figures(self, variables: Sequence[Any], step: Callable | None, args: Any, eager: bool) -> dict[str, Any]:
        """The step's own reductions, timed apart (:mod:`bakeoff.measure.sync`): the scalar all-reduce of (summed
        loss, count) and the all-reduce of per-replica tensors shaped like the gradients, run by every replica of
        every process together, the way the step runs them (eagerly, or in a ``tf.function``), each call from
        :meth:`_barrier`."""
        shapes = [tuple(v.shape) for v in variables]
        local, devices = self.local_replicas, self.strategy.extended.worker_devices

        def value(ctx: tf.distribute.experimental.ValueContext) -> list[tf.Tensor]:
            with tf.device(devices[ctx.replica_id_in_sync_group % local]):
                return [tf.fill(s, float(ctx.replica_id_in_sync_group + 1)) for s in [(), (), *shapes]]

        tensors = self.strategy.experimental_distribute_values_from_function(value)

        def reduce(xs: list[tf.Tensor]) -> tf.Tensor:
            xs = [tf.identity(x) for x in xs]  # made on the replica's device, as gradients are
            scalars = self.sum_over_replicas(xs[:2])
            grads = self.sum_over_replicas(xs[2:])
            return tf.stack([*scalars, *(tf.reshape(g, [-1])[0] for g in grads)])  # depends on every reduction

        def nothing(xs: list[tf.Tensor]) -> tf.Tensor:
            xs = [tf.identity(x) for x in xs]
            return tf.stack([*xs[:2], *(tf.reshape(g, [-1])[0] for g in xs[2:])])

        def caller(replica_fn: Callable) -> Callable[[], np.ndarray]:
            def call(xs: Any) -> Any:
                return self.strategy.run(replica_fn, args=(xs,))

            run = call if eager else tf.function(call)
            return lambda: self.strategy.experimental_local_results(run(tensors))[0].numpy()

        reduced = caller(reduce)
        samples = sync.time_reductions(reduced, self._barrier)
        out, expected = reduced(), self.replicas * (self.replicas + 1) / 2  # replica r sent r + 1 everywhere
        if not np.all(out == expected):
            raise RuntimeError(f"{self.words}: the timed all-reduce summed to {out[:3]}, expected {expected:g}")
        dispatch = sync.time_reductions(caller(nothing), self._barrier)
        collectives = _collectives_per_step(step, args, self.local_replicas) if not eager else None
        grad_bytes = sum(4 * int(np.prod(s)) for s in shapes)
        how = "eagerly" if eager else "in a tf.function"
        return {
            "strategy": self.words,
            "setup_s": self.setup_s,
            "sync": sync.figures(
                samples, grad_bytes,
                f"the step's two cross-replica reductions (ReplicaContext.all_reduce SUM of the summed "
                f"loss and count, then of per-replica fp32 tensors shaped like the {len(shapes)} gradients, as "
                f"Keras' optimizer reduces them), run {how} through strategy.run, until the host copy; dispatch_s "
                "is the same call without the reductions",
                dispatch_s=statistics.median(dispatch),
                allreduces_per_step=collectives if collectives is not None else float(len(shapes) + 2),
                allreduces_counted=("collective ops in the traced training step, per replica" if collectives is not
                                    None else "eager: TensorFlow all-reduces each tensor apart (no packing), so 2 "
                                    "scalars + one per gradient"),
            ),
        }


def _collectives_per_step(step: Callable | None, args: Any, local_replicas: int) -> float | None:
    """Collective all-reduce ops in the traced training step (its graph and the functions it calls), per local
    replica: what one optimizer step launches."""
    if step is None or not hasattr(step, "get_concrete_function"):
        return None
    graph_def = step.get_concrete_function(args).graph.as_graph_def()
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    return sum(1 for n in nodes if n.op in _COLLECTIVE_OPS) / local_replicas


class Mirrored(_Synchronous):
    """``MirroredStrategy`` over ``spec.workers`` devices of this process."""

    def __init__(self, spec: RunSpec, gpus: Sequence[Any]) -> None:
        n = spec.workers
        start = time.perf_counter()
        if gpus:
            if len(gpus) < n:
                raise Unsupported(f"data_parallel over {n} replicas on GPU needs {n} GPUs; TensorFlow sees "
                                  f"{len(gpus)} (replicas sharing a GPU would measure contention, not scaling)")
            devices = [f"/gpu:{i}" for i in range(n)]
            kind = "GPU"
        else:
            # N logical CPU devices sharing the process's thread pools: set before the runtime initialises.
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
            devices = [d.name for d in tf.config.list_logical_devices("CPU")][:n]
            kind = "logical CPU device"
        self.strategy = tf.distribute.MirroredStrategy(devices)
        self.replicas = self.local_replicas = self.strategy.num_replicas_in_sync
        ops = type(getattr(self.strategy.extended, "_cross_device_ops", None)).__name__
        self.words = f"MirroredStrategy over {_count(n, kind)} ({ops})"
        self._barrier()
        self.setup_s = time.perf_counter() - start


class MultiWorker(_Synchronous):
    """``MultiWorkerMirroredStrategy`` from ``TF_CONFIG``: one replica per worker process."""

    def __init__(self, spec: RunSpec, gpus: Sequence[Any]) -> None:
        start = time.perf_counter()
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        self.rank, self.world = int(resolver.task_id), len(resolver.cluster_spec().as_dict().get("worker", []))
        if self.world != spec.workers:
            raise RuntimeError(f"TF_CONFIG names {self.world} workers, the spec {spec.workers}")
        if gpus:  # one GPU per worker on its machine (shared round-robin when there are fewer GPUs than workers)
            gpu = gpus[local_rank() % len(gpus)]
            tf.config.set_visible_devices([gpu], "GPU")
            if len(gpus) < self.world:
                tf.config.experimental.set_memory_growth(gpu, True)
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.AUTO)
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(resolver, communication_options=options)
        self.replicas = self.strategy.num_replicas_in_sync
        self.local_replicas = len(self.strategy.extended.worker_devices)
        kind = "GPU" if gpus else "CPU"
        self.words = (f"MultiWorkerMirroredStrategy over {_count(self.world, 'worker process')} "
                      f"({self.local_replicas} {kind} replica each, collective all-reduce over gRPC)")
        self._barrier()
        self.setup_s = time.perf_counter() - start

    def data_shard(self) -> tuple[int, int]:
        return self.rank, self.world

    def is_chief(self) -> bool:
        return self.rank == 0


def _wait_for_servers(addresses: Sequence[str], deadline_s: float) -> None:
    """Until every server of the cluster accepts a connection: the launcher starts them with the chief, and
    connecting before they listen would fail."""
    deadline = time.monotonic() + deadline_s
    for address in addresses:
        host, port = address.rsplit(":", 1)
        while True:
            try:
                with socket.create_connection((host, int(port)), timeout=1.0):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"server {address} of the cluster did not listen within "
                                       f"{deadline_s:.0f} s") from None
                time.sleep(0.1)


class ParameterServer(Distribution):
    """The chief of a parameter-server cluster: variables on the parameter server, steps scheduled on workers.

    Timing (asynchronous training): up to ``workers`` steps are in flight. :meth:`execute` schedules the step it
    is given and returns once the oldest step in flight has completed, when ``workers`` are in flight (the first
    call waits for its own step: the function is traced and sent to the workers then). So a steady step time is
    the time per *completed* step, and the examples counted are examples trained. Every ``eval_every`` steps and
    at ``max_steps`` all steps in flight are waited for, on the training clock; evaluation waits for any left
    (the end of a ``max_seconds`` or ``max_epochs`` budget), off it.

    Losses: each call returns the mean loss of the steps that completed during it (the last completed one when
    none did: the calls while the pipeline fills), so the per-step losses lag the steps by up to ``workers - 1``
    and each was computed from the variables its worker read when its step started (stale by the updates of the
    steps in flight meanwhile): not comparable step by step with synchronous training.
    ``figures()["asynchronous"]["step_losses"]`` keeps each scheduled step's own loss, in scheduling order.
    """

    whole_step_xla = False

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        start = time.perf_counter()
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        cluster = resolver.cluster_spec().as_dict()
        self.workers, self.servers = len(cluster.get("worker", [])), len(cluster.get("ps", []))
        _wait_for_servers([*cluster.get("worker", []), *cluster.get("ps", [])], SERVER_WAIT_S)
        self.servers_wait_s = time.perf_counter() - start
        self.strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        self.setup_s = time.perf_counter() - start
        self.words = (f"ParameterServerStrategy: chief with ClusterCoordinator, "
                      f"{_count(self.workers, 'worker process')}, {_count(self.servers, 'parameter server')} "
                      "(asynchronous)")
        self._in_flight: collections.deque = collections.deque()
        self._scheduled = 0
        self._steady_s, self._steady_completed = 0.0, 0  # time in steady calls, steps completed in them
        self.step_losses: list[float] = []

    def scope(self) -> contextlib.AbstractContextManager:
        return self.strategy.scope()

    def run(self, replica_step: Callable[[Any], tf.Tensor], args: Any) -> tf.Tensor:
        return self.strategy.run(replica_step, args=(args,))  # one replica: the worker the step is scheduled on

    def execute(self, step: Callable[[Any], tf.Tensor], args: Any) -> float:
        start = time.perf_counter()
        self._in_flight.append(self.coordinator.schedule(step, args=(args,)))
        self._scheduled += 1
        spec = self.spec
        drain = self._scheduled % spec.eval_every == 0 or self._scheduled == spec.max_steps
        completed = []
        while self._in_flight and (drain or len(self._in_flight) >= self.workers or not self.step_losses):
            completed.append(float(self._in_flight.popleft().fetch()))
            self.step_losses.append(completed[-1])
        if self._scheduled > 1 + spec.warmup_steps:  # the steady calls, as the loop counts them
            self._steady_s += time.perf_counter() - start
            self._steady_completed += len(completed)
        return float(np.mean(completed)) if completed else self.step_losses[-1]

    def finish(self) -> None:
        while self._in_flight:
            self.step_losses.append(float(self._in_flight.popleft().fetch()))

    def figures(self, variables: Sequence[Any], step: Callable | None, args: Any, eager: bool) -> dict[str, Any]:
        """What synchronisation means here: each step, its worker pulls every variable from the parameter server
        and pushes every gradient to it (the Adam update then runs on the parameter server, colocated with its
        variable). Timed after training: a function scheduled on a worker that pulls each trainable variable and
        pushes a tensor of its size back (summed there, so the transfer must happen)."""
        self.finish()
        worker_variables = [v.value if hasattr(v, "value") else v for v in variables]

        @tf.function
        def pull_push() -> tf.Tensor:
            sums = []
            for v in worker_variables:
                pulled = tf.identity(v.read_value()) * 1.0  # parameter server → worker
                with tf.device(v.device):
                    sums.append(tf.reduce_sum(pulled))  # worker → parameter server
            return tf.add_n(sums)

        @tf.function
        def nothing() -> tf.Tensor:
            return tf.constant(0.0)

        def timed(fn: Callable) -> list[float]:  # sync's loop; no barrier: the coordinator drives every worker
            return sync.time_reductions(lambda: self.coordinator.schedule(fn).fetch(), lambda: None)

        samples, dispatch = timed(pull_push), timed(nothing)
        grad_bytes = sum(4 * int(np.prod(v.shape)) for v in variables)
        return {
            "strategy": self.words,
            "setup_s": self.setup_s,
            "servers_wait_s": self.servers_wait_s,
            "sync": {
                "method": (f"no all-reduce: each step its worker pulls the {len(variables)} trainable variables "
                           "from the parameter server and pushes as many gradients to it. Timed after training: a "
                           "tf.function scheduled on a worker through the ClusterCoordinator that pulls every "
                           "variable and pushes a tensor of its size back, from schedule to fetch; median of "
                           f"{sync.REPEATS} after {sync.WARMUP} untimed; dispatch_s is an empty function's round "
                           "trip"),
                "per_step_s": statistics.median(samples),
                "samples_s": samples,
                "dispatch_s": statistics.median(dispatch),
                "allreduces_per_step": 0.0,
                "transfers_per_step": 2 * len(variables),
                "bytes_per_step": 2 * grad_bytes,
            },
            "asynchronous": {
                "in_flight": self.workers,
                "timing": "steady step time is the time per completed step, up to `workers` steps in flight",
                # Completions of independent workers bunch up, so a call's time varies widely (one returns at once
                # after another waited): the mean over steady calls is the time per completed step, exactly.
                "steady_mean_step_s": self._steady_s / self._steady_completed if self._steady_completed else None,
                "losses": ("result.losses[i] is the mean loss of the steps that completed during call i (lagging "
                           "by up to workers - 1 steps, each computed from variables as its worker read them): not "
                           "comparable step by step with single-device losses"),
                "step_losses": self.step_losses,
            },
        }


def distribution(spec: RunSpec, gpus: Sequence[Any]) -> Distribution:
    """The distribution ``spec.parallelism`` asks for; create it before anything else initialises the runtime."""
    makers: Mapping[Parallelism, Callable[[], Distribution]] = {
        Parallelism.NONE: OneDevice,
        Parallelism.DATA_PARALLEL: lambda: Mirrored(spec, gpus),
        Parallelism.MULTI_WORKER: lambda: MultiWorker(spec, gpus),
        Parallelism.PARAMETER_SERVER: lambda: ParameterServer(spec),
    }
    if spec.parallelism not in makers:
        raise Unsupported(f"parallelism {spec.parallelism} has no TensorFlow strategy in bakeoff; accepted: "
                          f"{', '.join(p.value for p in makers)}")
    return makers[spec.parallelism]()

