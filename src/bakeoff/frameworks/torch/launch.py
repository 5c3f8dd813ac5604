"""PyTorch's launchers: torchrun (``torch.distributed.run``) starts its ranks, one agent for N processes
(``torchrun``, data parallel) or one agent per node (``torchrun_nodes``, multi-worker), at a static rendezvous on
the first host (:mod:`bakeoff.core.launching`). Imports no framework: the members' commands start it."""

from __future__ import annotations

import re
import sys

from bakeoff.core.contract import Placement
from bakeoff.core.launching import Launcher, Member, Plan, Start, local_ranks


def _torchrun_command(s: Start, nodes: int, node: int, per_node: int) -> list[str]:
    # Static rendezvous at the first host: its agent serves the store on the port (a port taken meanwhile
    # fails with EADDRINUSE, and the group is started again on another).
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--node-rank", str(node),
            "--nproc-per-node", str(per_node), "--master-addr", s.hosts[0], "--master-port", str(s.ports[0]),
            "--max-restarts", "0", "--monitor-interval", "0.5", "-m", "bakeoff.trial", *s.args]


def _torchrun(s: Start) -> Plan:
    n = s.workers
    return s.plan("torchrun", [Member("torchrun", _torchrun_command(s, 1, 0, n), s.env, True)], n, n)


def _torchrun_nodes(s: Start) -> Plan:  # one agent per node: the multi-host path, also on one machine
    n = s.workers
    members = [Member(f"node {i}", _torchrun_command(s, n, i, 1), {**s.env, **Placement(local_rank=local).env()},
                      True, host)
               for i, (local, host) in enumerate(zip(local_ranks(s.hosts), s.hosts, strict=True))]
    return s.plan("torchrun_nodes", members, n, n)


def torchrun_root_cause(log: str) -> tuple[int, int] | None:
    """(rank, exit code) of the failure torchrun reports as the root cause of ending its group, if it says."""
    match = re.search(r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", log,
                      re.DOTALL)
    return (int(match.group(1)), int(match.group(2))) if match else None


LAUNCHERS = (
    Launcher("torchrun", _torchrun, "torchrun", ports=lambda n: 1, gpu_per_rank=True,
             root_cause=torchrun_root_cause),
    Launcher("torchrun_nodes", _torchrun_nodes, "torchrun", ports=lambda n: 1, gpu_per_rank=True,
             root_cause=torchrun_root_cause),
)
"""Its launchers, by the names its record gives them."""
