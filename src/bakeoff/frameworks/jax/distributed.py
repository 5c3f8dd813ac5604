"""How the JAX engine distributes a trial: one device, or data parallel over a mesh of devices — the devices of
one process (``data_parallel``: N GPUs, or N CPU devices made with ``jax_num_cpu_devices``) or of N processes
joined by ``jax.distributed`` (``multi_worker``, started by bakeoff's ``jax_distributed`` launcher, one process
per worker, gloo collectives on CPU).

JAX distributes by *where arrays live*, not by wrapping the model: params and Adam's state are replicated over a
one-axis mesh (``NamedSharding(mesh, P())``), each global batch is split on its leading axis
(``NamedSharding(mesh, P("data"))``), and ``jax.jit`` compiles the engine's unchanged step into one SPMD program.
Its sums over the batch — the summed loss, the count and the summed-loss gradients — are global, so XLA inserts
the all-reduces, and dividing once by the global count gives exactly the single-device mean gradient. Gradient
accumulation sums the micro-batches' gradients on each device and all-reduces them once per step when XLA
schedules the reduction after the sum (it may, since the sum is linear); the compiled program decides, not
bakeoff, and the figures say which collectives the step compiled to.

Devices: on GPUs each ``jax.distributed`` process takes one GPU, the one at its local rank on its machine
(:func:`local_device_ids`, passed to ``jax.distributed.initialize``), so two processes on one machine never share
one; one process of ``data_parallel`` takes the first N of the GPUs it sees (:func:`mesh_devices`).

Under ``multi_worker`` each process feeds its shard of each global batch
(``jax.make_array_from_process_local_data``), and reads replicated values from its own device
(``addressable_data(0)``): no value leaves the device it lives on except through the compiled collectives.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bakeoff.core.spec import Device, Parallelism, RunSpec
from bakeoff.core.workload import Weights
from bakeoff.engines.base import Unsupported
from bakeoff.measure import sync
from bakeoff.measure.environment import cuda_build, cuda_devices, local_rank

State = dict[str, Any]

def configure(spec: RunSpec) -> float:
    """What must happen before JAX starts its backends: join the ``jax.distributed`` cluster (multi_worker; the
    launcher's ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``), or make N CPU devices in
    this process (data_parallel on CPU). Returns the seconds it took (the rendezvous)."""
    start = time.perf_counter()
    if spec.parallelism is Parallelism.MULTI_WORKER:
        missing = [k for k in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID") if k not in os.environ]
        if missing:
            raise Unsupported(f"multi_worker JAX needs the jax_distributed launcher's environment ({', '.join(missing)}"
                              " not set): start the trial through bakeoff's runner")
        if spec.device is Device.CPU:
            jax.config.update("jax_platforms", "cpu")
        gpus = usable_gpus(spec)  # read before JAX starts its backends
        jax.distributed.initialize(coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
                                   num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
                                   process_id=int(os.environ["JAX_PROCESS_ID"]),
                                   local_device_ids=local_device_ids(local_rank(), gpus), initialization_timeout=120)
    elif spec.parallelism is Parallelism.DATA_PARALLEL and spec.device.value != "cuda":
        # On a CPU machine: N logical CPU devices in this process (on GPU machines, the GPUs are the devices).
        # Taken only when no GPU is used: the option does not touch GPU backends.
        jax.config.update("jax_num_cpu_devices", spec.workers)
    return time.perf_counter() - start


def usable_gpus(spec: RunSpec) -> int:
    """The NVIDIA GPUs this process's JAX can use (read without starting JAX): none with ``--device cpu`` or, with
    ``--device auto``, when the installed JAX has no CUDA plugin (it trains on the CPU whatever the machine has)."""
    if spec.device is Device.CPU or (spec.device is Device.AUTO and not cuda_build("jax")):
        return 0
    return cuda_devices()[0]


def local_device_ids(rank_here: int, gpus: int) -> list[int] | None:
    """The GPUs a ``jax.distributed`` process takes (its ``local_device_ids``): the one at its local rank
    ``rank_here`` among the ``gpus`` its machine shows a trial; None without a GPU (the process's CPU device).
    :class:`Unsupported` when the machine has fewer GPUs than the trial's processes on it (the runner refuses
    such a trial before it starts: :func:`bakeoff.run.launchers.unsupported_here`)."""
    if gpus == 0:
        return None
    if rank_here >= gpus:
        raise Unsupported(f"process at local rank {rank_here} needs a GPU of its own, and this machine shows "
                          f"{gpus}: at most {gpus} processes here")
    return [rank_here]


def mesh_devices(devices: Sequence[Any], workers: int, processes: int = 1) -> list[Any]:
    """The devices of a mesh of ``workers`` replicas, from ``devices`` (``jax.devices()``, every process's):
    over ``processes`` > 1 processes, the first device of each process (one replica per process); in one process,
    its first ``workers`` devices (data parallel × 2 on an 8-GPU machine uses 2). :class:`Unsupported` when there
    are too few."""
    if processes > 1:
        firsts = {}
        for device in devices:
            firsts.setdefault(device.process_index, device)
        chosen = [firsts[p] for p in sorted(firsts)]
        if len(chosen) != workers:
            raise Unsupported(f"data parallel over {workers} processes found devices in {len(chosen)}")
        return chosen
    if len(devices) < workers:
        platform = devices[0].platform if devices else "such"
        raise Unsupported(f"data parallel over {workers} replicas needs {workers} {platform} devices, one each; "
                          f"JAX sees {len(devices)}")
    return list(devices[:workers])


class SingleDevice:
    """``parallelism = "none"``: the whole global batch on one device."""

    rank, world = 0, 1

    def __init__(self, device: jax.Device) -> None:
        self.device = device

    def place_state(self, state: State) -> State:
        return jax.device_put(state, self.device)

    def place_batch(self, batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        return jax.device_put(dict(batch), self.device)

    place_eval = place_batch

    def host(self, tree: Any) -> Any:
        return jax.device_get(tree)

    def replicas(self, tree: Any) -> list[Any]:
        return [jax.device_get(tree)]

    def figures(self, step: Any = None) -> dict[str, Any]:
        return {}

    def environment(self) -> dict[str, Any]:
        return {"distribution": f"one device ({self.device.platform})"}


class Sharded:
    """Data parallel over a mesh of every device of the trial (module docstring)."""

    def __init__(self, spec: RunSpec, platform: str, rendezvous_s: float) -> None:
        start = time.perf_counter()
        self.spec = spec
        self.multi_process = spec.parallelism is Parallelism.MULTI_WORKER
        self.rank, self.world = (jax.process_index(), jax.process_count()) if self.multi_process else (0, 1)
        devices = mesh_devices(jax.devices(platform), spec.workers, self.world)
        self.mesh = Mesh(np.array(devices), ("data",))
        self.replicated = NamedSharding(self.mesh, P())
        self.split = NamedSharding(self.mesh, P("data"))
        self.device = next(d for d in devices if d.process_index == jax.process_index())  # this process's own
        self.setup_parts = {"rendezvous_s": rendezvous_s, "mesh_s": time.perf_counter() - start}
        self._hlo_collectives: dict[str, int] | None = None

    @property
    def backend(self) -> str:
        """What carries the collectives: gloo between CPU processes, XLA's own within a process or on GPUs."""
        if self.device.platform == "cpu":
            return "gloo" if self.multi_process else "XLA CPU (one process)"
        return "NCCL" if self.multi_process else f"XLA {self.device.platform}"

    def _global(self, sharding: NamedSharding, value: Any) -> jax.Array:
        return jax.make_array_from_process_local_data(sharding, np.asarray(value))

    def place_state(self, state: State) -> State:
        return jax.tree.map(lambda x: self._global(self.replicated, x), jax.device_get(state))

    def place_batch(self, batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        """This process's shard of a global batch (all of it in one process) -> the global batch, split over the
        mesh."""
        return {k: self._global(self.split, v) for k, v in batch.items()}

    def place_eval(self, batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        """An evaluation batch, whole on every device (its size need not divide by the replicas)."""
        return {k: self._global(self.replicated, v) for k, v in batch.items()}

    def host(self, tree: Any) -> Any:
        """A replicated pytree read from this process's first device."""
        return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), tree)

    def replicas(self, tree: Any) -> list[Any]:
        """Every replica this process holds (one per local device), to check they are bit for bit the same."""
        n = len(jax.tree.leaves(tree)[0].addressable_shards)
        return [jax.tree.map(lambda x, i=i: np.asarray(x.addressable_shards[i].data), tree) for i in range(n)]

    def compiled_collectives(self, compiled_text: str) -> None:
        """Record which collectives the compiled step holds (read from its optimised HLO)."""
        ops = re.findall(r"\b(all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all)(?:-start)?\(",
                         compiled_text)
        self._hlo_collectives = {op: ops.count(op) for op in sorted(set(ops))}

    def _sync_samples(self, params: Any) -> tuple[list[float], int]:
        """Seconds one step's all-reduce takes (:mod:`bakeoff.measure.sync`): each device holds its own copy of the
        gradients' shapes and of the loss totals, summed over the mesh by one compiled program; and the gradients'
        bytes. Each call starts from a barrier of every process (under ``jax.distributed``)."""
        n = self.spec.workers
        tree = {"gradients": params, "loss_totals": np.zeros(2, np.float32)}
        stacked = jax.tree.map(lambda x: self._global(self.split, np.zeros((self._local_rows(n), *np.shape(x)),
                                                                             np.float32)), tree)
        summed = jax.jit(lambda t: jax.tree.map(lambda x: jnp.sum(x, axis=0), t), out_shardings=self.replicated)
        samples = sync.time_reductions(lambda: jax.block_until_ready(summed(stacked)), self._barrier)
        return samples, sum(int(np.prod(x.shape)) * 4 for x in jax.tree.leaves(params))

    def _barrier(self) -> None:
        if self.multi_process:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("bakeoff sync figure")

    def _local_rows(self, n: int) -> int:
        return n // self.world

    def figures(self, params: Any = None) -> dict[str, Any]:
        samples, nbytes = self._sync_samples(params) if params is not None else ([], 0)
        kind = "jax.distributed" if self.multi_process else "one process"
        figures: dict[str, Any] = {
            "strategy": f"SPMD data parallel over a {self.spec.workers}-device mesh ({kind}, {self.backend})",
            "backend": self.backend,
            "setup_s": sum(self.setup_parts.values()),
            "setup_parts_s": self.setup_parts,
        }
        if samples:
            figures["sync"] = sync.figures(
                samples, nbytes,
                "one jax.jit program summing over the mesh a pytree shaped as the gradients and the loss totals "
                "(XLA's all-reduce), blocked on; in training XLA schedules the step's all-reduces inside the "
                "compiled step, where they may overlap other work")
            if self._hlo_collectives is not None:
                figures["sync"]["compiled_collectives_per_step"] = self._hlo_collectives
        return figures

    def environment(self) -> dict[str, Any]:
        where = f"process {self.rank} of {self.world}" if self.multi_process else "one process"
        return {"distribution": f"data parallel over {self.spec.workers} {self.device.platform} devices ({where})"}


def strategy_for(spec: RunSpec, device: jax.Device, rendezvous_s: float) -> SingleDevice | Sharded:
    if spec.parallelism is Parallelism.NONE:
        return SingleDevice(device)
    if spec.parallelism in (Parallelism.DATA_PARALLEL, Parallelism.MULTI_WORKER):
        return Sharded(spec, device.platform, rendezvous_s)
    raise Unsupported(f"the JAX engine has no {spec.parallelism.value} strategy; accepted: none, data_parallel, "
                      "multi_worker")


def replica_weights(model: Any, strategy: SingleDevice | Sharded, params: Any) -> list[Weights]:
    return [model.get_weights(p) for p in strategy.replicas(params)]
