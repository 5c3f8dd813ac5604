"""A node's share of a trial spread over nodes (:mod:`bakeoff.run.executors.node`): its members folded into one
unit per node, and that unit run for real here with small stand-in members (no framework): an even CPU share and
thread count each, a failing member ending the others and the unit as it ended."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from bakeoff.core.contract import TrialRequest
from bakeoff.core.spec import RunSpec
from bakeoff.run import launchers
from bakeoff.run.executors import node


def test_cpus_are_dealt_in_even_contiguous_shares_the_first_a_core_more():
    assert node.cpu_shares([0, 1, 2, 3, 4, 5, 6, 7], 3) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert node.cpu_shares([4, 5, 6, 7], 2) == [[4, 5], [6, 7]]
    assert node.cpu_shares([3], 2) == [[3], [3]]  # fewer cores than members: they share them


def test_each_node_is_one_unit_holding_its_members_own_variables_apart_from_the_common_ones(tmp_path):
    spec = RunSpec(workload="mnist", framework="tensorflow", parallelism="multi_worker", workers=4, max_steps=2)
    plan = launchers.plan(spec, ["a"], {"A": "1"}, ports=[1, 2, 3, 4], cores=2, hosts=["h1", "h1", "h2", "h2"])
    logs = [tmp_path / f"r{i}.log" for i in range(4)]
    units, unit_logs = node.fold(plan.members, logs, tmp_path, tmp_path / "logs", "key", fixed_threads=False)
    assert [(u.name, u.host) for u in units] == [("host 0", "h1"), ("host 1", "h2")]
    assert unit_logs == [tmp_path / "logs" / "key.host0.log", tmp_path / "logs" / "key.host1.log"]
    assert units[1].env["A"] == "1" and "TF_CONFIG" not in units[1].env  # each worker's own, in the node's file
    members = json.loads(Path(units[1].command[-1]).read_text())["members"]
    assert [m["name"] for m in members] == ["worker 2", "worker 3"] and [m["log"] for m in members] == [
        str(logs[2]), str(logs[3])]
    assert [json.loads(m["env"]["TF_CONFIG"])["task"]["index"] for m in members] == [2, 3]
    assert [m["env"]["BAKEOFF_LOCAL_RANK"] for m in members] == ["0", "1"]


def _unit(tmp_path: Path, *scripts: str) -> Path:
    members = [{"name": f"worker {i}", "command": [sys.executable, "-c", script], "log": str(tmp_path / f"{i}.log"),
                "env": {"RANK_HERE": str(i)}} for i, script in enumerate(scripts)]
    path = tmp_path / "host1.json"
    path.write_text(json.dumps({"fixed_threads": False, "members": members}))
    return path


SAYS = ("import os; print(os.environ['RANK_HERE'], os.environ['BAKEOFF_THREADS'], os.environ['OMP_NUM_THREADS'], "
        "sorted(os.sched_getaffinity(0)))")


def test_each_member_runs_on_its_own_share_of_the_cores_with_as_many_threads(tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    done = subprocess.run([sys.executable, "-m", node.MODULE, str(_unit(tmp_path, SAYS, SAYS))], timeout=60,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    shares = node.cpu_shares(cores, 2)
    for i in range(2):
        assert (tmp_path / f"{i}.log").read_text().split(maxsplit=3) == [str(i), str(len(shares[i])),
                                                                         str(len(shares[i])), f"{shares[i]}\n"]


def test_a_failing_member_ends_the_others_and_the_unit_with_its_code_and_last_output(tmp_path):
    sleeper = "import os, time; open(os.environ['PIDS'] + '/sleeper', 'w').write(str(os.getpid())); time.sleep(60)"
    failing = "import sys, time; time.sleep(1); print('rank lost its peer'); sys.exit(3)"
    env = {**os.environ, "PIDS": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", node.MODULE, str(_unit(tmp_path, sleeper, failing))], timeout=60,
                          capture_output=True, text=True, env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "worker 1 on" in done.stdout and "exited with code 3" in done.stdout
    assert "rank lost its peer" in done.stdout  # the failing member's output, where the trial reads its reason
    sleeper_pid = int((tmp_path / "sleeper").read_text())
    assert not Path(f"/proc/{sleeper_pid}").exists() or "Z" in Path(f"/proc/{sleeper_pid}/stat").read_text().split()[2]


def test_a_member_killed_by_a_signal_takes_its_unit_with_the_same_signal(tmp_path):
    killed = "import os, signal, time; time.sleep(0.5); os.kill(os.getpid(), signal.SIGKILL)"
    done = subprocess.run([sys.executable, "-m", node.MODULE, str(_unit(tmp_path, "import time; time.sleep(60)",
                                                                          killed))],
                          timeout=60, capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr
    assert "worker 1 on" in done.stdout and "was killed by SIGKILL" in done.stdout


def test_a_node_whose_gpus_are_too_few_for_its_share_refuses_it_before_starting_anything(tmp_path, monkeypatch,
                                                                                        capsys):
    from bakeoff.run import launchers as launching

    monkeypatch.setattr(launching, "cuda_build", lambda framework: True)  # the CUDA builds the README names
    monkeypatch.setattr(launching, "cuda_devices", lambda: (1, ""))  # this node: one GPU
    spec = RunSpec(workload="mnist", framework="jax", parallelism="multi_worker", workers=4, max_steps=2)
    TrialRequest(spec, tmp_path / "result.json").write(tmp_path / "request.json")
    never = [sys.executable, "-c", f"open({str(tmp_path / 'started')!r}, 'w')"]
    raw = {"fixed_threads": False, "request": str(tmp_path / "request.json"),
           "members": [{"name": f"process {i}", "command": never, "log": str(tmp_path / f"{i}.log"), "env": {}}
                       for i in (2, 3)]}
    assert node.run_share(raw) == node.UNSUPPORTED_EXIT
    said = capsys.readouterr().out
    assert said.startswith(node.UNSUPPORTED_SAYS) and "puts 2 ranks on this machine" in said
    assert "it has 1 visible GPU: use at most workers-per-node=1" in said
    assert not (tmp_path / "started").exists()


def test_the_ranks_network_is_chosen_by_the_route_to_the_other_nodes_unless_the_environment_sets_it():
    # Linux routes 127.0.0.0/8 over the loopback interface, lo, from 127.0.0.1
    towards = node.choose_network(["127.0.0.2"], {})
    assert (towards["interface"], towards["address"], towards["how"]) == ("lo", "127.0.0.1", "the route to 127.0.0.2")
    assert node.choose_network(["127.0.0.2"], {"NCCL_SOCKET_IFNAME": "ib0"}) == {
        "interface": "ib0", "how": "set in the environment"}
    assert node.choose_network(["no-such-node.invalid"], {})["interface"] is None


def test_a_unit_gives_its_ranks_the_interface_it_chose_and_records_it(tmp_path):
    says = "import os; print(os.environ['GLOO_SOCKET_IFNAME'], os.environ['NCCL_SOCKET_IFNAME'])"
    path = _unit(tmp_path, says)
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({**raw, "host": "n2", "peers": ["127.0.0.2"], "record": str(tmp_path / "n.json")}))
    env = {k: v for k, v in os.environ.items() if k not in node.IFNAME_VARIABLES}
    done = subprocess.run([sys.executable, "-m", node.MODULE, str(path)], timeout=60, capture_output=True, text=True,
                          env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "0.log").read_text() == "lo lo\n"
    assert json.loads((tmp_path / "n.json").read_text())["interface"] == "lo"
    assert node.networks(tmp_path) == []  # only host<I>.network.json files are the trial's records


def test_a_tensorflow_workers_port_taken_on_its_node_says_address_in_use_before_anything_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = {"cluster": {"worker": ["n1:1", f"n2:{port}"]}, "task": {"type": "worker", "index": 1}}
        raw = {"fixed_threads": False, "members": [
            {"name": "worker 1", "command": [sys.executable, "-c", f"open({str(tmp_path / 'ran')!r}, 'w')"],
             "log": str(tmp_path / "1.log"), "env": {"TF_CONFIG": json.dumps(config)}}]}
        path = tmp_path / "host1.json"
        path.write_text(json.dumps(raw))
        done = subprocess.run([sys.executable, "-m", node.MODULE, str(path)], timeout=60, capture_output=True,
                              text=True)
    assert done.returncode == 1
    assert f"worker 1's port {port} on" in done.stdout and "address already in use" in done.stdout
    assert not (tmp_path / "ran").exists()


def test_compile_caches_are_on_the_nodes_own_temporary_folder_not_the_shared_one(tmp_path):
    says = "import os; print(os.environ['TORCHINDUCTOR_CACHE_DIR']); print(os.environ['TRITON_CACHE_DIR'])"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TMPDIR": str(tmp_path / "node")}
    (tmp_path / "node").mkdir()
    done = subprocess.run([sys.executable, "-m", node.MODULE, str(_unit(tmp_path, says))], timeout=60,
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    inductor, triton = (Path(line) for line in (tmp_path / "0.log").read_text().splitlines())
    assert inductor.parent == triton.parent and inductor.parent.parent == tmp_path / "node"  # the node's TMPDIR
    assert not inductor.parent.exists()  # removed with the unit
