"""Nodes created with the cluster wait for the run's go file (launch.gated, warm_start.node):
the wait really holds a real shell and a real warm-start node, and the compose file carries it."""
import ipaddress
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.docker.compose_file import (CONTROL_IN_NODE, GO_FILE, READY_IN_NODE, STANDBY_CPU_SHARES, ComposePlan,
                                             go_file_of, node_service)
from chaosbench.cluster.launch import GO_GATE, gated, prepared, unprepared, warm_start_argv

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = ["python", "-m", "torch.distributed.run", "--nnodes=1"]


def test_warm_node_waits_itself_and_other_commands_behind_the_shell_gate():
    warm = warm_start_argv("python", TORCHRUN, ["-m", "trainer.train"])
    assert gated(warm, "/c/go")[:7] == ["python", "-m", "trainer.warm_start", "node", "--go", "/c/go", "--"]
    assert gated(warm, "/c/go", "/r/n0")[4:9] == ["--go", "/c/go", "--ready", "/r/n0", "--"]
    user = prepared(["py", "job.py"])
    assert gated(user, "/c/go") == [*GO_GATE, "/c/go", *user]
    assert gated(user, "/c/go", "/r/n0") == [*GO_GATE, "/c/go", *user]   # a user's command never says ready
    assert unprepared(gated(user, "/c/go")) == ["py", "job.py"]
    assert unprepared([a.replace("$", "$$") for a in gated(user, "/c/go")]) == ["py", "job.py"]   # as compose writes it


def _plan(control, ready=None):
    return ComposePlan(project="cbx", image="img", subnet=ipaddress.ip_network("10.9.9.0/24"), owner="o",
                       events_host_dir="/ev", control_host_dir=control, ready_host_dir=ready)


@pytest.mark.parametrize("warm", [True, False])
def test_only_a_warm_node_gets_the_ready_mount_and_is_awaited(tmp_path, warm):
    spec = ClusterSpec(run_id="r", run_dir=tmp_path, warm_start=warm)
    plan = _plan("/runs/r/control", "/runs/r/control-ready")
    svc = node_service(plan, spec, "node-1")
    assert (f"/runs/r/control-ready:{READY_IN_NODE}" in svc["volumes"]) == warm
    assert ("--ready" in svc["command"]) == warm and (f"{READY_IN_NODE}/node-1" in svc["command"]) == warm
    assert plan.ready_files == ({"node-1": "/runs/r/control-ready/node-1"} if warm else {})


@pytest.mark.parametrize("warm", [True, False])
def test_compose_node_mounts_the_control_dir_and_is_gated(tmp_path, warm):
    spec = ClusterSpec(run_id="r", run_dir=tmp_path, warm_start=warm)
    svc = node_service(_plan("/runs/r/control"), spec, "node-0")
    assert f"/runs/r/control:{CONTROL_IN_NODE}:ro" in svc["volumes"]
    go = f"{CONTROL_IN_NODE}/{GO_FILE}"
    assert ("--go" in svc["command"]) == warm and go in svc["command"]
    plain = node_service(_plan(None), spec, "node-0")   # no control dir: training starts with the container
    assert go not in plain["command"] and not any(CONTROL_IN_NODE in v for v in plain["volumes"])


@pytest.mark.parametrize("warm", [True, False])
def test_a_standby_waits_for_its_own_go_file_not_the_runs(tmp_path, warm):
    """A standby (Cluster.add_standby) boots with the run already going: the run's go file must not
    start it, only its own, written by release_standby."""
    spec = ClusterSpec(run_id="r", run_dir=tmp_path, warm_start=warm)
    plan = _plan("/runs/r/control")
    plan.standby.add("node-3")
    held, other = node_service(plan, spec, "node-3")["command"], node_service(plan, spec, "node-0")["command"]
    own, run_go = f"{CONTROL_IN_NODE}/{go_file_of('node-3', True)}", f"{CONTROL_IN_NODE}/{GO_FILE}"
    assert own in held and run_go not in held
    assert run_go in other and own not in other
    assert node_service(plan, spec, "node-3")["cpu_shares"] == STANDBY_CPU_SHARES   # boots from idle CPU
    assert "cpu_shares" not in node_service(plan, spec, "node-0")


def test_shell_gate_holds_the_command_until_the_go_file(tmp_path):
    go, out = tmp_path / "go", tmp_path / "out"
    p = subprocess.Popen([*GO_GATE, str(go), "sh", "-c", f'echo "$$" > {out}'])
    time.sleep(0.5)
    assert p.poll() is None and not out.exists()
    go.write_text("go")
    assert p.wait(timeout=10) == 0
    assert int(out.read_text()) == p.pid   # exec'd: the command is the node's process, not a child of it


@pytest.mark.integration
def test_warm_node_runs_torchrun_in_process_after_go(tmp_path):
    """The agent imports torch while it waits, then runs torchrun in its own process: the worker's parent
    is still `warm_start node` (an exec would have turned it into `python -m torch.distributed.run`).
    Its server is a fork of it, not a fresh `warm_start serve` interpreter (torch imported once)."""
    go, out, ready = tmp_path / "go", tmp_path / "parent", tmp_path / "ready"
    worker = ["sh", "-c", f'tr "\\0" " " < /proc/$PPID/cmdline > {out}']
    argv = [sys.executable, "-m", "trainer.warm_start", "node", "--preload", "json", "--go", str(go),
            "--ready", str(ready), "--",
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", "--no-python",
            *worker]
    p = subprocess.Popen(argv, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    servers, deadline = "", time.monotonic() + 120
    while not servers and time.monotonic() < deadline:   # the server is forked once torch is imported
        time.sleep(0.2)
        servers = subprocess.run(["pgrep", "-P", str(p.pid), "-a"], capture_output=True, text=True).stdout.strip()
    assert servers and "serve" not in servers, servers
    assert p.poll() is None and not out.exists()   # imported, forked, and still waiting for go
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:   # the in-process server says so too
        time.sleep(0.05)
    assert ready.exists() and p.poll() is None
    go.write_text("go")
    log, _ = p.communicate(timeout=180)
    assert p.returncode == 0, log
    parent = out.read_text()
    assert "-m trainer.warm_start node" in parent and "--go" in parent


def _docker_cluster(tmp_path, ready_files, statuses):
    from chaosbench.cluster.docker.backend import DockerCluster
    c = object.__new__(DockerCluster)
    c.plan = _plan("/c", str(tmp_path))
    c.plan.ready_files = {n: str(tmp_path / n) for n in ready_files}
    c.node_status = lambda n: statuses.get(n, "running")
    return c


def test_the_go_waits_for_every_ready_file_and_not_for_a_node_that_stopped(tmp_path):
    import threading
    c = _docker_cluster(tmp_path, ["node-0", "node-1", "node-2"], {"node-2": "exited:1"})
    (tmp_path / "node-0").write_text("1")
    threading.Timer(0.6, lambda: (tmp_path / "node-1").write_text("1")).start()
    t0 = time.monotonic()
    got = c._await_ready(30)
    assert 0.5 < time.monotonic() - t0 < 10
    assert got["not_ready"] == [] and got["not_running"] == ["node-2"]


def test_a_node_never_ready_is_named_after_the_bound_and_a_standby_is_not_awaited(tmp_path):
    c = _docker_cluster(tmp_path, ["node-0", "node-3"], {})
    c.plan.standby.add("node-3")
    got = c._await_ready(0.4)
    assert got["not_ready"] == ["node-0"] and got["waited_s"] >= 0.4
