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
from chaosbench.cluster.compose_file import CONTROL_IN_NODE, GO_FILE, STANDBY_CPU_SHARES, ComposePlan, go_file_of, node_service
from chaosbench.cluster.launch import GO_GATE, gated, prepared, unprepared, warm_start_argv

REPO = Path(__file__).resolve().parents[2]
TORCHRUN = ["python", "-m", "torch.distributed.run", "--nnodes=1"]


def test_warm_node_waits_itself_and_other_commands_behind_the_shell_gate():
    warm = warm_start_argv("python", TORCHRUN, ["-m", "trainer.train"])
    assert gated(warm, "/c/go")[:7] == ["python", "-m", "trainer.warm_start", "node", "--go", "/c/go", "--"]
    user = prepared(["py", "job.py"])
    assert gated(user, "/c/go") == [*GO_GATE, "/c/go", *user]
    assert unprepared(gated(user, "/c/go")) == ["py", "job.py"]
    assert unprepared([a.replace("$", "$$") for a in gated(user, "/c/go")]) == ["py", "job.py"]   # as compose writes it


def _plan(control):
    return ComposePlan(project="cbx", image="img", subnet=ipaddress.ip_network("10.9.9.0/24"), owner="o",
                       events_host_dir="/ev", control_host_dir=control)


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
    go, out = tmp_path / "go", tmp_path / "parent"
    worker = ["sh", "-c", f'tr "\\0" " " < /proc/$PPID/cmdline > {out}']
    argv = [sys.executable, "-m", "trainer.warm_start", "node", "--preload", "json", "--go", str(go), "--",
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
    go.write_text("go")
    log, _ = p.communicate(timeout=180)
    assert p.returncode == 0, log
    parent = out.read_text()
    assert "-m trainer.warm_start node" in parent and "--go" in parent
