"""PaddlePaddle's launchers: ``paddle.distributed.launch`` starts its ranks, one launcher for N processes
(``paddle_launch``, data parallel) or one launcher per node (``paddle_launch_nodes``, multi-worker), the nodes meeting
at the first node's launcher, which serves the rendezvous on the chosen port (:mod:`bakeoff.core.launching`).
Imports no framework: the members' commands start it.

What Paddle's launcher does that bakeoff reads:

- Each rank it starts runs ``python -m bakeoff.frameworks.paddle.launched_rank REQUEST``, which says the rank Paddle
  gave it (``PADDLE_TRAINER_ID``) in bakeoff's own terms (:class:`bakeoff.core.contract.Placement`) and runs the
  trial as its child, so ranks write their own result files (``result.rank1.json``) and take the GPU at their
  local rank.
- Its ranks' output goes to ``workerlog.<i>`` files in ``--log_dir``; the launcher copies its first rank's to its own
  output, and when it finds a rank dead (it looks once a second) it stops the others, prints ``Container rank <i>
  ... code <c> log <path>`` for the first dead one in its list, then that rank's last lines, and exits with its code.
  The first in its list is not always the first to fail (rank 1 killed, rank 0 aborts on the lost peer within the
  second): each rank's last line says which rank failed first (:data:`FIRST_FAILURE_SAYS`), and the runner reads
  that (:func:`paddle_root_cause`). Each launcher is given a log folder of its own, named by the first rank it
  starts (``first-rank<r>``), so the launcher's own line gives a global rank too.
- Its ranks run in sessions of their own (``os.setsid``): bakeoff's runner finds them as the launcher's descendants
  and kills their sessions with the group; a rank whose launcher dies dies with it (the trial's tether).
- The first node's launcher serves the rendezvous at the plan's port; on a taken port it does not fail but takes
  whatever listens there for the rendezvous and waits, so a node checks that port free before it starts
  (:func:`served_port`); on one machine the port is the kernel's free choice just before the start.
- ``CUDA_VISIBLE_DEVICES=""`` (a CPU trial) makes the launcher fail before it starts a rank (it counts one device,
  named ''), so the launcher runs without it and each rank hides the GPUs again itself
  (:data:`HIDDEN_DEVICES_ENV`).
"""

from __future__ import annotations

import re
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from bakeoff.core.contract import Placement
from bakeoff.core.launching import Launcher, Member, Plan, Start, local_ranks

HIDDEN_DEVICES_ENV = "CUDA_VISIBLE_DEVICES_OF_PADDLE_RANKS"
"""The trial's ``CUDA_VISIBLE_DEVICES``, carried past Paddle's launcher to its ranks
(:mod:`bakeoff.frameworks.paddle.launched_rank` sets it back)."""

MASTER_PORT_ENV = "MASTER_PORT_OF_PADDLE_LAUNCH"
"""Set for the first node's launcher only: the port its rendezvous (Paddle's HTTP store) serves on, which a node
checks free before it starts the launcher (:func:`served_port`). Paddle's launcher does not fail on a taken port: it
takes whatever listens there for a rendezvous already served, and waits."""

RANK_MODULE = "bakeoff.frameworks.paddle.launched_rank"
"""What each rank runs: the trial, once it has said its rank in bakeoff's terms."""


def log_folder(args: Sequence[str], first_rank: int) -> Path:
    """Where one launcher's ``workerlog.<i>`` files go: beside the trial's request (its first argument), one folder
    per launcher, named by the first rank it starts."""
    request = Path(args[0]).absolute()
    name = request.name.removesuffix(".json").removesuffix(".request")  # the runner's <key>.request.json
    return request.with_name(f"{name}.paddle-launch") / f"first-rank{first_rank}"


def _paddle_launch_command(s: Start, nodes: int, node: int, per_node: int) -> list[str]:
    command = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(per_node),
               "--max_restart", "0", "--log_dir", str(log_folder(s.args, node * per_node)),
               "--log_overwrite", "1"]
    if nodes > 1:  # the first node's launcher serves the rendezvous (an HTTP store) at the chosen port
        command += ["--nnodes", str(nodes), "--rank", str(node), "--master", f"{s.hosts[0]}:{s.ports[0]}"]
    # training_script is an executable, not a .py file: the launcher runs it with the arguments that follow
    return [*command, sys.executable, "-m", RANK_MODULE, *s.args]


def _launcher_env(env: dict[str, str]) -> dict[str, str]:
    """The launcher's environment: the trial's, less ``CUDA_VISIBLE_DEVICES`` (module docstring), which travels to
    the ranks under :data:`HIDDEN_DEVICES_ENV`."""
    out = dict(env)
    if "CUDA_VISIBLE_DEVICES" in out:
        out[HIDDEN_DEVICES_ENV] = out.pop("CUDA_VISIBLE_DEVICES")
    return out


def _paddle_launch(s: Start) -> Plan:
    n = s.workers
    member = Member("paddle.distributed.launch", _paddle_launch_command(s, 1, 0, n), _launcher_env(s.env), True)
    return s.plan("paddle_launch", [member], n, n)


def _paddle_launch_nodes(s: Start) -> Plan:  # one launcher per node: the multi-host path, also on one machine
    n = s.workers
    serves = {MASTER_PORT_ENV: str(s.ports[0])}
    members = [Member(f"node {i}", _paddle_launch_command(s, n, i, 1),
                      _launcher_env({**s.env, **Placement(local_rank=local).env(), **(serves if i == 0 else {})}),
                      True, host)
               for i, (local, host) in enumerate(zip(local_ranks(s.hosts), s.hosts, strict=True))]
    return s.plan("paddle_launch_nodes", members, n, n)


FIRST_FAILURE_SAYS = "bakeoff: the first paddle rank to fail was rank {rank}, with exit code {code}"
"""A failed rank's last line: the rank that failed first of the trial's ranks, by the time each failure was recorded
(:mod:`bakeoff.frameworks.paddle.launched_rank`)."""


def paddle_root_cause(log: str) -> tuple[int, int] | None:
    """(rank, exit code) of the rank that ended a Paddle launcher's group, if its log says: the failed rank's own
    account of the first failure (:data:`FIRST_FAILURE_SAYS`, the last such line), else the launcher's line
    ``Container rank <i> status failed ... code <c> log .../first-rank<r>/workerlog.<i>`` (rank r + i), which names
    the first *in its list* of the ranks dead when it looked (module docstring)."""
    said = re.findall(FIRST_FAILURE_SAYS.format(rank=r"(\d+)", code=r"(-?\d+)"), log)
    if said:
        return int(said[-1][0]), int(said[-1][1])
    launcher = re.search(r"Container rank (\d+) status failed .*? code (-?\d+) log \S*?first-rank(\d+)/", log)
    return (int(launcher.group(3)) + int(launcher.group(1)), int(launcher.group(2))) if launcher else None


def served_port(env: Mapping[str, str]) -> int | None:
    """The port the first node's launcher serves the rendezvous on (:data:`MASTER_PORT_ENV`), when it is taken
    here."""
    if not env.get(MASTER_PORT_ENV):
        return None
    port = int(env[MASTER_PORT_ENV])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return port
    return None


LAUNCHERS = (
    Launcher("paddle_launch", _paddle_launch, "paddle.distributed.launch", gpu_per_rank=True,
             root_cause=paddle_root_cause),
    Launcher("paddle_launch_nodes", _paddle_launch_nodes, "paddle.distributed.launch", ports=lambda n: 1,
             gpu_per_rank=True, root_cause=paddle_root_cause, served_port=served_port),
)
"""Its launchers, by the names its record gives them."""
