"""TensorFlow's launchers: N worker processes told their cluster in ``TF_CONFIG`` (``tf_config``,
MultiWorkerMirroredStrategy), or a chief (the trial), workers and parameter servers (``tf_parameter_server``,
ParameterServerStrategy; the servers are :mod:`bakeoff.frameworks.tensorflow.server` processes)
(:mod:`bakeoff.core.launching`). Imports no framework."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Mapping

from bakeoff.core.contract import Placement
from bakeoff.core.launching import HOST, PARAMETER_SERVERS, Launcher, Member, Plan, Start, local_ranks
from bakeoff.core.launching import trial_command as _trial

SERVER_MODULE = "bakeoff.frameworks.tensorflow.server"
"""Run as ``python -m`` by each worker and parameter server of a TensorFlow parameter-server cluster."""


def _tf_config(cluster: dict[str, list[str]], kind: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})


def _tf_workers(s: Start) -> Plan:
    n = s.workers
    cluster = {"worker": [f"{h}:{p}" for h, p in zip(s.hosts, s.ports[:n], strict=True)]}
    members = [Member(f"worker {i}", _trial(s.args),
                      {**s.env, "TF_CONFIG": _tf_config(cluster, "worker", i),
                       **Placement(rank=i, local_rank=local).env()}, True, host)
               for i, (local, host) in enumerate(zip(local_ranks(s.hosts), s.hosts, strict=True))]
    return s.plan("tf_config", members, n, n)


def _tf_parameter_server(s: Start) -> Plan:
    # The chief runs the trial (its ClusterCoordinator schedules steps on the workers).
    n, ports = s.workers, s.ports
    cluster = {"chief": [f"{HOST}:{ports[0]}"], "worker": [f"{HOST}:{p}" for p in ports[1:1 + n]],
               "ps": [f"{HOST}:{p}" for p in ports[1 + n:]]}
    members = [Member("chief", _trial(s.args), {**s.env, "TF_CONFIG": _tf_config(cluster, "chief", 0)}, True)]
    for kind in ("worker", "ps"):
        for i in range(len(cluster[kind])):
            members.append(Member(f"{kind} {i}", [sys.executable, "-m", SERVER_MODULE],
                                  {**s.env, "TF_CONFIG": _tf_config(cluster, kind, i)}, False))
    return s.plan("tf_parameter_server", members, 1, len(members))


def served_port(env: Mapping[str, str]) -> int | None:
    """The port a TensorFlow worker with this environment serves on (its ``TF_CONFIG``), when it is taken here."""
    try:
        config = json.loads(env["TF_CONFIG"])
        task = config["task"]
        port = int(config["cluster"][task["type"]][task["index"]].rpartition(":")[2])
    except (KeyError, ValueError, IndexError, TypeError):
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return port
    return None


LAUNCHERS = (
    # TensorFlow's workers share GPUs round-robin when there are fewer than workers (its engine's choice).
    Launcher("tf_config", _tf_workers, ports=lambda n: n, served_port=served_port),
    Launcher("tf_parameter_server", _tf_parameter_server, ports=lambda n: 1 + n + PARAMETER_SERVERS,
             served_port=served_port),
)
"""Its launchers, by the names its record gives them."""
