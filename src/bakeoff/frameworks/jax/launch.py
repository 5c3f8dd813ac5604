"""JAX's launcher: N processes joined by ``jax.distributed`` (``jax_distributed``, multi-worker), process 0
serving the coordinator (:mod:`bakeoff.core.launching`). Imports no framework."""

from __future__ import annotations

from bakeoff.core.contract import Placement
from bakeoff.core.launching import Launcher, Member, Plan, Start, local_ranks
from bakeoff.core.launching import trial_command as _trial


def _jax_distributed(s: Start) -> Plan:
    n = s.workers
    # jax.distributed.initialize() reads these: process 0 serves the coordinator on the first host's port.
    coordinator = {"JAX_COORDINATOR_ADDRESS": f"{s.hosts[0]}:{s.ports[0]}", "JAX_NUM_PROCESSES": str(n)}
    members = [Member(f"process {i}", _trial(s.args),
                      {**s.env, **coordinator, "JAX_PROCESS_ID": str(i),
                       **Placement(rank=i, local_rank=local).env()}, True, host)
               for i, (local, host) in enumerate(zip(local_ranks(s.hosts), s.hosts, strict=True))]
    return s.plan("jax_distributed", members, n, n)


LAUNCHERS = (Launcher("jax_distributed", _jax_distributed, ports=lambda n: 1, gpu_per_rank=True),)
"""Its launchers, by the names its record gives them."""
