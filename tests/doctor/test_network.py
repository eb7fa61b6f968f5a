"""DNS, TCP reachability and an occupied port, over real sockets."""
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from chaosbench.doctor import Status, from_env, from_scenario, run_preflight
from chaosbench.doctor.checks_network import check_dns, check_port_free, check_reachable
from chaosbench.doctor.ports import port_holders
from chaosbench.services.ports import free_port

from .conftest import run_doctor


@pytest.fixture
def holder():
    """A listening socket held by another process (not an ancestor of the doctor), killed afterwards."""
    port = free_port()
    code = textwrap.dedent(f"""
        import socket, sys, time
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", {port})); s.listen(); print("ready", flush=True); time.sleep(120)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        yield port, p.pid
    finally:
        p.kill()
        p.wait(10)


def test_port_holders_names_the_process(holder):
    port, pid = holder
    hs = port_holders(port)
    assert [h.pid for h in hs] == [pid]
    assert "socket.socket()" in hs[0].cmdline


def test_occupied_rendezvous_port_fails_with_holder(holder, tmp_path):
    port, pid = holder
    sc = tmp_path / "s.yaml"
    sc.write_text("name: t\ncluster: {nodes: 2, rendezvous: c10d}\ntrainer: {config: null}\n")
    t = from_scenario(str(sc))
    t.rdzv_endpoint = f"127.0.0.1:{port}"   # as --rdzv-endpoint sets it
    results = run_preflight(t, versions=False)
    r = next(r for r in results if r.name == f"port rendezvous {port}")
    assert r.status == Status.FAIL
    assert f"port {port} already in use by pid {pid}" in r.evidence
    assert f"kill {pid}" in r.fix and "--rdzv-endpoint 127.0.0.1:OTHER" in r.fix


def test_occupied_master_port_cli_exit_code(holder):
    port, pid = holder
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    p = run_doctor("--env", "--json", "--no-versions", env=env)
    assert p.returncode == 1
    checks = {c["name"]: c for c in json.loads(p.stdout)["checks"]}
    assert checks[f"port master {port}"]["status"] == "FAIL"
    assert f"pid {pid}" in checks[f"port master {port}"]["evidence"]


def test_free_port_passes():
    port = free_port()
    assert check_port_free("master", "127.0.0.1", port, ["127.0.0.1"]).status == Status.PASS


def test_remote_address_port_not_evaluated_here():
    r = check_port_free("master", "192.0.2.1", 29500, ["192.0.2.1"])   # TEST-NET-1: never this host
    assert r.status == Status.SKIP and "not this host" in r.evidence


def test_dns_failure_and_success():
    bad = check_dns("master", "no-such-host.invalid")
    assert bad.status == Status.FAIL and "cannot resolve 'no-such-host.invalid'" in bad.evidence
    assert "/etc/hosts" in bad.fix
    good = check_dns("master", "localhost")
    assert good.status == Status.PASS and "127.0.0.1" in good.evidence and " ms" in good.evidence


def test_unreachable_master_fails_after_wait():
    port = free_port()   # nothing listens
    t0 = time.monotonic()
    r = check_reachable("master", "127.0.0.1", port, must_be_up=True, wait_s=1.5)
    assert r.status == Status.FAIL and "Connection refused" in r.evidence and "waiting 2 s" in r.evidence
    assert time.monotonic() - t0 >= 1.5
    assert "rank 0's torchrun agent" in r.fix


def test_master_becomes_ready_during_wait():
    port = free_port()
    s = socket.socket()
    try:
        def later():
            time.sleep(0.7)
            s.bind(("127.0.0.1", port))
            s.listen()
        import threading
        threading.Thread(target=later, daemon=True).start()
        r = check_reachable("master", "127.0.0.1", port, must_be_up=True, wait_s=10)
        assert r.status == Status.PASS and "ready after" in r.evidence
    finally:
        s.close()


def test_interfaces(monkeypatch):
    from chaosbench.doctor.checks_system import interface_checks, matching_interfaces
    t = from_env({"NCCL_SOCKET_IFNAME": "nosuch0", "GLOO_SOCKET_IFNAME": "lo"})
    res = {r.name: r for r in interface_checks(t)}
    assert res["NCCL_SOCKET_IFNAME"].status == Status.FAIL
    assert "nosuch0 matches no interface" in res["NCCL_SOCKET_IFNAME"].evidence
    assert "set NCCL_SOCKET_IFNAME to one of" in res["NCCL_SOCKET_IFNAME"].fix
    assert res["GLOO_SOCKET_IFNAME"].status == Status.PASS
    names = ["eth0", "eth1", "lo", "docker0"]
    assert matching_interfaces("eth", names, nccl=True) == ["eth0", "eth1"]
    assert matching_interfaces("=eth", names, nccl=True) == []
    assert matching_interfaces("^lo,docker", names, nccl=True) == ["eth0", "eth1"]
    assert matching_interfaces("eth", names, nccl=False) == []   # gloo wants exact names


def test_gpu_required_but_absent_fails_or_passes_with_real_device():
    import torch
    from chaosbench.doctor.checks_system import gpu_check
    t = from_env({})
    t.wants_gpu = True
    r = gpu_check(t, torch)
    if torch.cuda.device_count():
        assert r.status == Status.PASS
    else:
        assert r.status == Status.FAIL and "torch sees 0 CUDA device(s)" in r.evidence and r.fix
