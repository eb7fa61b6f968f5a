"""dns_fault: its parameters, the calls it makes, the refusal where nodes share the host's resolver,
and the in-node scripts run here against copies of the resolver files (never the host's own)."""
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from chaosbench.cluster.node import scripts
from chaosbench.cluster.errors import UnsupportedFault
from chaosbench.cluster.docker.backend import DockerCluster
from chaosbench.cluster.local.backend import LocalCluster
from chaosbench.cluster.slurm.backend import SlurmCluster
from chaosbench.faults import validate_params
from chaosbench.faults.capabilities import missing_primitives
from chaosbench.scenario import ScenarioError, load_scenario
from tests.faults.recording import RecordingCluster, make_fault

ROOT = Path(__file__).resolve().parents[2]


# -- parameters ---------------------------------------------------------------------------------

@pytest.mark.parametrize("params, field", [
    ({"name": "node-0", "mode": "refused"}, "mode"),
    ({"name": "", "mode": "nxdomain"}, "name"),
    ({"name": "a b", "mode": "nxdomain"}, "name"),          # reaches a node's script as one word
    ({"name": "-rf", "mode": "nxdomain"}, "name"),
    ({"name": "node-0", "mode": "slow", "delay_s": 0}, "delay_s"),
    ({"name": "node-0", "mode": "slow", "delay_s": 40}, "delay_s"),   # glibc gives up after 30 s
    ({"name": "node-0", "mode": "nxdomain", "node": "etcd"}, "node"),
])
def test_bad_params_are_refused_by_field(params, field):
    with pytest.raises(ValidationError) as ei:
        validate_params("dns_fault", params)
    assert [e["loc"][0] for e in ei.value.errors()] == [field]


@pytest.mark.parametrize("name", ["rendezvous", "etcd", "s3", "proxy", "node-0", "s3.example.com."])
def test_endpoint_names_and_host_names_pass(name):
    assert validate_params("dns_fault", {"name": name, "mode": "nxdomain"}).name == name


@pytest.mark.parametrize("entry, field", [
    ("dns_fault: {node: node-1, name: node-0, mode: nowhere}", "faults[0].dns_fault.mode"),
    ("dns_fault: {node: node-1, name: '', mode: nxdomain}", "faults[0].dns_fault.name"),
    ("dns_fault: {node: node-1, name: node-0, mode: slow}\n    duration_s: -1", "faults[0].duration_s"),
])
def test_a_scenario_names_file_line_and_field(tmp_path, monkeypatch, entry, field):
    monkeypatch.chdir(ROOT)
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\ncluster: {{nodes: 2}}\nfaults:\n  - at: {{step: 5}}\n    {entry}\n"
                    "expect: {reaches_step: 20}\n")
    with pytest.raises(ScenarioError) as ei:
        load_scenario(path)
    (p,) = ei.value.problems
    assert p.startswith(f"{path}:") and field in p


def test_the_library_story_loads():
    s = load_scenario(ROOT / "scenarios" / "rendezvous_name_failure.yaml")
    dns = [f for f in s.faults if f.kind == "dns_fault"]
    assert len(dns) == 1 and dns[0].duration_s and dns[0].duration_s > 0


# -- the fault's calls ----------------------------------------------------------------------------

def test_inject_breaks_the_name_on_the_node_and_heal_restores_that_node(tmp_path):
    cluster = RecordingCluster(tmp_path)
    fault = make_fault("dns_fault", {"node": "node-1", "name": "node-0", "mode": "slow", "delay_s": 3},
                       cluster, tmp_path / "faults.jsonl")
    fault.inject()
    fault.heal()
    assert cluster.calls == [("break_name", ("node-1", "node-0", "slow", 3.0)), ("restore_names", ("node-1",))]


# -- backends -------------------------------------------------------------------------------------

def test_only_docker_has_the_name_primitives():
    both = {"break_name", "restore_names"}
    assert both <= DockerCluster.supported_faults
    assert not both & LocalCluster.supported_faults
    assert not both & SlurmCluster.implemented_faults()


def test_a_local_scenario_is_refused_up_front_naming_the_primitives():
    fault = type("F", (), {"id": "f1", "kind": "dns_fault", "params": {"name": "node-0", "mode": "nxdomain"}})
    assert missing_primitives([fault], LocalCluster.supported_faults) == [
        "f1 (dns_fault) needs break_name, restore_names"]


def test_local_says_why_and_which_backend_has_it():
    with pytest.raises(UnsupportedFault, match="'local' does not support break_name: .*share the host's resolver"
                                               ".*docker backend has it"):
        LocalCluster.__new__(LocalCluster).break_name("node-0", "node-0", "nxdomain")


@pytest.mark.parametrize("name", ["rendezvous", "etcd", "s3", "proxy"])
def test_an_endpoint_name_is_refused_up_front_where_nodes_get_it_as_an_address(name, tmp_path):
    fault = type("F", (), {"id": "f1", "kind": "dns_fault", "params": {"name": name, "mode": "nxdomain"}})
    for cls in (DockerCluster, LocalCluster):
        assert missing_primitives([fault], cls.supported_faults)[0].startswith("f1 (dns_fault) needs break_endpoint_name")
    cluster = RecordingCluster(tmp_path)
    make_fault("dns_fault", {"node": "node-1", "name": name, "mode": "slow"}, cluster, tmp_path / "f.jsonl").inject()
    assert cluster.calls == [("break_endpoint_name", ("node-1", name, "slow", 5.0))]
    with pytest.raises(UnsupportedFault, match="break_endpoint_name: .*IP addresses.*node-0"):
        DockerCluster.__new__(DockerCluster).break_endpoint_name("node-1", name, "nxdomain")


@pytest.mark.parametrize("name", ["rendezvous", "etcd", "s3", "proxy"])
def test_docker_break_name_itself_refuses_an_endpoint_it_gives_as_an_address(name):
    cluster = DockerCluster.__new__(DockerCluster)
    cluster._run_in_node = lambda *a, **k: pytest.fail("nothing may run in the node")
    with pytest.raises(UnsupportedFault, match=f"cannot break the name '{name}': .*IP address.*node-0"):
        cluster.break_name("node-1", name, "nxdomain")


# -- the in-node scripts, against copies of the files ---------------------------------------------

def _free_port(kind=socket.SOCK_DGRAM) -> int:
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _rehome(source: str, root: Path, port: int, upstream_port: int) -> str:
    """The script with /etc and /run under `root`, its responder on `port`, the upstream on another, and
    iptables a fake that logs its arguments to root/iptables.log and fails (no rule yet, none left)."""
    fake = root / "iptables"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {root}/iptables.log\nexit 1\n')
    fake.chmod(0o755)
    return (source.replace("'iptables'", repr(str(fake)))
            .replace("/run/chaosbench-names", f"{root}/run").replace("/etc/", f"{root}/etc/")
            .replace("('127.0.0.1', 53)", f"('127.0.0.1', {port})").replace("(upstream, 53)", f"(upstream, {upstream_port})"))


def _query(name: str, qid: int = 0x1234) -> bytes:
    q = b"".join(bytes([len(x)]) + x.encode() for x in name.split(".")) + b"\0"
    return struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + q + struct.pack(">HH", 1, 1)


@pytest.fixture
def node(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (tmp_path / "run").mkdir()
    hosts = b"127.0.0.1\tlocalhost\n10.0.0.11\tnode-1\n"
    resolv = b"nameserver 127.0.0.11\noptions ndots:0\n"
    (etc / "hosts").write_bytes(hosts)
    (etc / "resolv.conf").write_bytes(resolv)
    port, up = _free_port(), _free_port()
    run = []

    def script(s: scripts.Script, *args):
        src = _rehome(s.source, tmp_path, port, up)
        r = subprocess.run([sys.executable, "-c", src, *args], capture_output=True, text=True, timeout=30)
        run.append(r)
        return r
    yield type("Node", (), {"etc": etc, "hosts": hosts, "resolv": resolv, "port": port, "upstream": up,
                            "run": staticmethod(script)})
    script(scripts.RESTORE_NAMES)   # never leave a responder behind


def test_wrong_address_adds_a_blackhole_entry_and_restore_is_byte_exact(node):
    r = node.run(scripts.BREAK_NAME, "node-0", "wrong_address", "5")
    assert r.returncode == 0, r.stderr
    assert (node.etc / "hosts").read_bytes() == node.hosts + b"192.0.2.1\tnode-0\t# chaosbench dns_fault\n"
    assert (node.etc / "resolv.conf").read_bytes() == node.resolv
    log = node.etc.parent / "iptables.log"
    assert log.read_text().splitlines() == ["-C OUTPUT -d 192.0.2.1 -j DROP", "-I OUTPUT -d 192.0.2.1 -j DROP"]
    assert node.run(scripts.RESTORE_NAMES).returncode == 0
    assert log.read_text().splitlines()[2:] == ["-D OUTPUT -d 192.0.2.1 -j DROP"]
    assert (node.etc / "hosts").read_bytes() == node.hosts
    assert not list((node.etc.parent / "run").iterdir()), "the backup is dropped once restored"


def test_a_second_break_keeps_the_first_backup(node):
    node.run(scripts.BREAK_NAME, "node-0", "wrong_address", "5")
    node.run(scripts.BREAK_NAME, "etcd", "wrong_address", "5")
    assert (node.etc / "hosts").read_bytes().count(b"192.0.2.1") == 2
    node.run(scripts.RESTORE_NAMES)
    assert (node.etc / "hosts").read_bytes() == node.hosts


def test_restore_without_a_break_changes_nothing(node):
    assert node.run(scripts.RESTORE_NAMES).returncode == 0
    assert (node.etc / "hosts").read_bytes() == node.hosts


def _ask(port: int, name: str, timeout: float = 5) -> tuple[bytes | None, float]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    t = time.monotonic()
    s.sendto(_query(name), ("127.0.0.1", port))
    try:
        return s.recv(4096), time.monotonic() - t
    except socket.timeout:
        return None, time.monotonic() - t
    finally:
        s.close()


@pytest.fixture
def upstream(node):
    """A nameserver that answers every query with rcode 0 (its id echoed)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.11", node.upstream))   # the nameserver the copied resolv.conf names
    s.settimeout(0.2)
    stop = []

    def serve():
        while not stop:
            try:
                msg, addr = s.recvfrom(4096)
            except socket.timeout:
                continue
            s.sendto(msg[:2] + b"\x81\x80" + msg[4:], addr)
    import threading
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield
    stop.append(1)
    t.join()
    s.close()


def test_nxdomain_answers_nxdomain_for_the_name_alone(node, upstream):
    r = node.run(scripts.BREAK_NAME, "node-0", "nxdomain", "5")
    assert r.returncode == 0, r.stderr
    resolv = (node.etc / "resolv.conf").read_text()
    assert "nameserver 127.0.0.1\n" in resolv and "127.0.0.11" not in resolv
    assert resolv.rstrip().endswith("options timeout:8 attempts:1") and "options ndots:0" in resolv
    for name in ("node-0", "NODE-0", "node-0.search.example"):
        reply, _ = _ask(node.port, name)
        assert reply is not None and reply[:2] == b"\x12\x34" and reply[3] & 0x0F == 3, name   # NXDOMAIN
    reply, took = _ask(node.port, "node-01")   # not a suffix match: forwarded, answered
    assert reply is not None and reply[3] & 0x0F == 0 and took < 2
    assert node.run(scripts.RESTORE_NAMES).returncode == 0
    assert (node.etc / "resolv.conf").read_bytes() == node.resolv
    assert _ask(node.port, "node-0", timeout=1)[0] is None, "the responder is gone"


def test_slow_forwards_the_name_late_and_others_at_once(node, upstream):
    assert node.run(scripts.BREAK_NAME, "node-0", "slow", "1.5").returncode == 0
    reply, took = _ask(node.port, "node-0")
    assert reply is not None and reply[3] & 0x0F == 0 and 1.4 < took < 4
    reply, took = _ask(node.port, "etcd")
    assert reply is not None and took < 1


def test_one_responder_at_a_time(node, upstream):
    assert node.run(scripts.BREAK_NAME, "node-0", "nxdomain", "5").returncode == 0
    r = node.run(scripts.BREAK_NAME, "etcd", "nxdomain", "5")
    assert r.returncode != 0 and "one nxdomain/slow name at a time" in r.stderr
