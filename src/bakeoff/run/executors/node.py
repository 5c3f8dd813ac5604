"""A node's share of a trial spread over nodes: its K members (ranks, or torchrun agents of one rank each) started
together on that node by one process, ``python -m bakeoff.run.executors.node NODE_FILE``, which an executor starts
there as one unit (one Slurm job step, one Ray task in the node's bundle) holding everything the trial has on the
node.

Why one unit per node and not one per member: a cluster hands out a node's share once (a Slurm step's CPUs, a Ray
bundle's CPUs and GPUs); a second step or task asking for the same share waits for ever (#51).

On its node the unit:

- checks its share of the ranks against the node's visible GPUs (one each,
  :func:`bakeoff.run.launchers.unsupported_here`), before starting anything;
- gives each member an even share of the CPUs it may run on (its affinity: the Slurm step's or Ray worker's
  cpuset), bound with ``sched_setaffinity``, and, when the trial does not say its threads, as many threads as its
  share has cores, counted here rather than on the first node;
- starts every member in a session of its own, tethered to it (:func:`bakeoff.run.process.process_groups`), and
  ends with them: when one fails (a non-zero exit, a signal), the others are killed at once, the failing member's
  last output is written to this unit's output, and the unit exits as that member did (killed by the same signal,
  or with its code), so the trial's group ends too; SIGTERM or SIGINT (a cancelled step or task, the trial's
  deadline) kills them all;
- says whether the kernel's out-of-memory killer killed something in its cgroup meanwhile (read on this node);
- chooses the network its ranks talk over rather than leaving it to each library's guess (gloo resolves the
  machine's own name, which Debian maps to 127.0.1.1, and would hand its peers a loopback address): the interface
  that carries this node's traffic to the trial's other nodes, given to the ranks as ``GLOO_SOCKET_IFNAME`` and
  ``NCCL_SOCKET_IFNAME`` (unless the environment sets either: then both are as given), and recorded in
  ``<folder>/hostI.network.json``, which the trial puts in ``execution.network``; TensorFlow's workers talk
  gRPC at the addresses of their ``TF_CONFIG`` (NCCL's variable covers its GPU collectives);
- checks, on this node, that the port each TensorFlow worker here will serve on is free (chosen on the first
  node): one taken says "address already in use", and the trial starts again on new ports;
- keeps the members' compile caches in the node's own temporary folder, removed when it ends.

Each member writes to its own log under the store's folder (a rank's log is the same file wherever it ran).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bakeoff.core.contract import THREADS_ENV
from bakeoff.core.files import owned_prefix, sweep_orphans, temporary_folder
from bakeoff.run.launchers import Member

log = logging.getLogger("bakeoff.run.executors.node")

NODE_FOLDER = "bakeoff-node-"
"""The prefix of a unit's folder of compile caches in its node's temporary folder (then its process id)."""

MODULE = "bakeoff.run.executors.node"
THREAD_VARIABLES = (THREADS_ENV, "OMP_NUM_THREADS", "MKL_NUM_THREADS")
UNSUPPORTED_EXIT = 3
"""The unit's exit code when its node cannot hold its share (too few GPUs for its ranks): nothing was started."""
OUT_OF_MEMORY_SAYS = "by the kernel's out-of-memory killer"
"""What a unit says of a member killed while its node's OOM-kill counter rose (read there, not on the first node)."""
UNSUPPORTED_SAYS = "bakeoff: this share of the trial's ranks cannot run on "


@dataclasses.dataclass(frozen=True)
class Share:
    """The members a node runs and where they write (one log each, in the same order)."""

    host: str
    members: list[Member]
    logs: list[Path]


def shares(members: Sequence[Member], logs: Sequence[Path]) -> list[Share]:
    """The trial's members by node, nodes in order of their first member (the first node first)."""
    by_host: dict[str, Share] = {}
    for member, path in zip(members, logs, strict=True):
        share = by_host.setdefault(member.host, Share(member.host, [], []))
        share.members.append(member)
        share.logs.append(path)
    return list(by_host.values())


def common_env(members: Sequence[Member]) -> dict[str, str]:
    """The environment every member has alike: what the node's unit starts with (a Slurm step or Ray task passes
    it on), each member's own variables (its rank, TF_CONFIG) being kept in the node's file."""
    first, *rest = members
    return {k: v for k, v in first.env.items() if all(m.env.get(k) == v for m in rest)}


def fold(members: Sequence[Member], logs: Sequence[Path], folder: Path, log_dir: Path, key: str,
         fixed_threads: bool, request_file: Path | None = None) -> tuple[list[Member], list[Path]]:
    """One member per node in place of the node's members: ``python -m bakeoff.run.executors.node FILE``, FILE
    (in ``folder``, which every node sees) naming each member's command, own environment and log. The unit's name
    is ``host I`` (I the node's index: 0 is where the trial's group starts) and its log ``<key>.hostI.log`` in
    ``log_dir``. ``fixed_threads``: the trial says its threads; otherwise each node counts its own cores.
    ``request_file``: the trial's request (:class:`bakeoff.core.contract.TrialRequest`), for each unit to check its
    share against its node's GPUs by its spec."""
    units, unit_logs = [], []
    every = shares(members, logs)
    for index, share in enumerate(every):
        env = common_env(share.members)
        node_file = folder / f"host{index}.json"
        node_file.write_text(json.dumps({
            "fixed_threads": fixed_threads, "request": str(request_file) if request_file else None,
            "host": share.host,
            "peers": [other.host for other in every if other.host != share.host],
            "record": str(folder / f"host{index}.network.json"),
            "members": [{"name": m.name, "command": m.command, "log": str(path),
                         "env": {k: v for k, v in m.env.items() if env.get(k) != v}}
                        for m, path in zip(share.members, share.logs, strict=True)]}))
        units.append(Member(f"host {index}", [sys.executable, "-m", MODULE, str(node_file)], env,
                            any(m.writes_result for m in share.members), share.host))
        unit_logs.append(log_dir / f"{key}.host{index}.log")
    return units, unit_logs


IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
SIOCGIFADDR = 0x8915  # Linux's ioctl: an interface's IPv4 address


def interface_addresses() -> dict[str, str]:
    """Each network interface of this machine with its IPv4 address (interfaces without one left out)."""
    import fcntl
    import struct

    out = {}
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                packed = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
        out[name] = socket.inet_ntoa(packed[20:24])
    return out


def source_address(peer: str) -> str | None:
    """This machine's address that traffic to ``peer`` (a name or an address) leaves from, by the routing table
    (a UDP socket's connect sends nothing); None when ``peer`` does not resolve or is unreachable."""
    try:
        address = socket.getaddrinfo(peer, None, socket.AF_INET)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))
            return sock.getsockname()[0]
    except (OSError, IndexError):
        return None


def choose_network(peers: Sequence[str], environ: dict[str, str]) -> dict:
    """The interface this node's ranks talk to ``peers`` (the trial's other nodes) over, and how it was chosen:
    as the environment sets it, else the one holding the address traffic to the first peer that resolves leaves
    from."""
    given = [environ[name] for name in IFNAME_VARIABLES if environ.get(name)]
    if given:
        return {"interface": given[0], "how": "set in the environment"}
    addresses = interface_addresses()
    for peer in peers:
        source = source_address(peer)
        interface = next((name for name, address in addresses.items() if address == source), None)
        if interface is not None:
            return {"interface": interface, "address": source, "how": f"the route to {peer}"}
    return {"interface": None, "how": f"no interface found towards {', '.join(peers) or 'no other node'}: left to "
                                      "the libraries"}


def taken_port(env: dict[str, str]) -> int | None:
    """The port a member with this environment serves on, when it is taken here: read by its launcher
    (:attr:`bakeoff.core.launching.Launcher.served_port`; a TensorFlow worker's, from its cluster variable)."""
    from bakeoff.run.launchers import LAUNCHERS

    readers = dict.fromkeys(launcher.served_port for launcher in LAUNCHERS.values())
    return next((port for read in readers if (port := read(env)) is not None), None)


def networks(folder: Path) -> list[dict]:
    """What each node's unit chose for its ranks' network (:func:`choose_network`), first node first."""
    out = []
    for path in sorted(folder.glob("host*.network.json"), key=lambda p: int(p.name[4:].partition(".")[0])):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out


def cpu_shares(cpus: Sequence[int], parts: int) -> list[list[int]]:
    """``cpus`` dealt into ``parts`` even, contiguous shares (the first ones a core more when they do not divide);
    fewer cpus than parts: each part one cpu, in turn."""
    cpus = sorted(cpus)
    if len(cpus) < parts:
        return [[cpus[i % len(cpus)]] for i in range(parts)]
    size, extra = divmod(len(cpus), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        out.append(cpus[start:end])
        start = end
    return out


def _tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:].strip()
    except OSError:
        return f"({path} was not written)"


def run_share(raw: dict) -> int:
    """Run the node's members to the end (module docstring); the exit code, negative for a signal."""
    import subprocess

    from bakeoff.run.process import process_groups, read_oom_kills

    entries = raw["members"]
    host = socket.gethostname()
    if raw.get("request"):  # this node's share of the ranks, against this node's GPUs
        from bakeoff.core.contract import TrialRequest
        from bakeoff.run.launchers import unsupported_here

        reason = unsupported_here(TrialRequest.read(Path(raw["request"])).spec, here=len(entries))
        if reason:
            sys.stdout.write(f"{UNSUPPORTED_SAYS}{host}: {reason}\n")
            return UNSUPPORTED_EXIT
    network = {"host": raw.get("host", ""), "hostname": host, **choose_network(raw.get("peers", []), dict(os.environ))}
    if raw.get("record"):
        Path(raw["record"]).write_text(json.dumps(network))
    log.info("%s: the ranks talk over %s (%s)", host, network["interface"], network["how"])
    for entry in entries:  # chosen free on the first node: checked here, where they are bound
        port = taken_port({**os.environ, **entry["env"]})
        if port is not None:
            sys.stdout.write(f"bakeoff: {entry['name']}'s port {port} on {host}: address already in use\n")
            return 1
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    parts = cpu_shares(allowed, len(entries)) if allowed else [[] for _ in entries]
    commands = []
    for entry, cpus in zip(entries, parts, strict=True):
        env = {**os.environ, **entry["env"]}
        if network["interface"]:
            env.update(dict.fromkeys(IFNAME_VARIABLES, network["interface"]))
        if not raw["fixed_threads"] and cpus:
            env.update(dict.fromkeys(THREAD_VARIABLES, str(len(cpus))))
        out = open(entry["log"], "w")  # noqa: SIM115  (closed when the member ends, below)
        popen = {"stdout": out, "stderr": subprocess.STDOUT, "env": env}
        if cpus:
            popen["preexec_fn"] = lambda cpus=cpus: os.sched_setaffinity(0, cpus)
        commands.append((entry["command"], popen))
        log.info("%s: %s on cpus %s", host, entry["name"], ",".join(map(str, cpus)) or "(all)")
    before = read_oom_kills()
    failed: tuple[str, int, str] | None = None
    try:
        with process_groups(commands, f"node {host}") as procs:
            codes: dict[int, int] = {}
            while len(codes) < len(procs) and failed is None:
                time.sleep(0.1)
                procs.discover()
                for i, proc in enumerate(procs):
                    code = proc.poll()
                    if code is not None and i not in codes:
                        codes[i] = code
                        if code != 0:
                            failed = (entries[i]["name"], code, entries[i]["log"])
                            break
    finally:
        for _, popen in commands:
            popen["stdout"].close()
    if failed is None:
        return 0
    name, code, path = failed
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    after = read_oom_kills()
    if before.count is not None and after.count is not None and after.count > before.count:
        how += (f" ({OUT_OF_MEMORY_SAYS}: oom_kill in {after.source} on {host} rose from {before.count} to "
                f"{after.count})")
    sys.stdout.write(f"bakeoff: {name} on {host} {how}; the node's other members were killed. Its last output:\n"
                     f"{_tail(Path(path))}\n")
    sys.stdout.flush()
    return code


def cache_variables() -> tuple[str, ...]:
    """Compile caches, which start empty in every trial (:func:`bakeoff.run.executors.local._trial_env`; each
    framework's record's ``cache_env``): on a node, in its own temporary folder rather than the trial's folder on
    the shared file system (slow, and shared by nodes)."""
    from bakeoff.core import frameworks

    return tuple(dict.fromkeys(name for info in frameworks.FRAMEWORKS.values() for name in info.cache_env))


def main(argv: list[str] | None = None) -> int:
    from bakeoff.core import tether
    from bakeoff.run.process import Interrupted, interruptible

    logging.basicConfig(level=logging.INFO, format="bakeoff node: %(message)s", stream=sys.stdout)
    tether.die_with_parent()  # a Slurm step's or Ray task's process: gone with it
    (node_file,) = argv if argv is not None else sys.argv[1:]
    raw = json.loads(Path(node_file).read_text())
    try:
        # The compile caches on this node, removed however the unit ends (a killed rank, a timeout, Ctrl-C); those of
        # a unit whose janitor a job step's end killed too (scancel) are removed by the next unit on this node.
        sweep_orphans(NODE_FOLDER)
        with interruptible(), temporary_folder(owned_prefix(NODE_FOLDER)) as caches:
            for name in cache_variables():
                os.environ[name] = os.path.join(caches, name.lower())
            code = run_share(raw)
    except Interrupted as exc:
        return exc.exit_code
    if code < 0:  # as the member died, so this unit: its trial's group reads the same signal
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # their handlers cannot be changed
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main())
