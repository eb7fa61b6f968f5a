"""packet_fault's NFQUEUE mechanism (no sch_netem here) on a real docker cluster: delay + duplicate + corrupt
on node-0's link to node-1 are real (a TCP round trip longer by about the delay, UDP datagrams arriving
twice, corrupted segments dropped by the receiver's checksum and retransmitted, every byte still right),
restore leaves no rule, qdisc, bound queue or handler; and after a SIGKILLed harness the sweep that
`chaosbench clean` runs leaves no handler or docker exec behind."""
import os
import subprocess
import time

import pytest

from chaosbench.cluster import ClusterSpec, available_backends, create_cluster

from chaosbench.cluster.node import scripts
from chaosbench.cluster.docker.cli import docker
from tests.cluster.helpers import harness_mid_fault, sigkill_then_clean
from tests.cluster import test_packet_fault_docker as pkt

_why = available_backends()["docker"]
pytestmark = [pytest.mark.docker, pytest.mark.timeout(900),
              pytest.mark.skipif(_why is not None, reason=f"docker backend unusable: {_why}"),
              pytest.mark.skipif(scripts.netem_mechanism() != "nfqueue", reason="the kernel has sch_netem (or no NFQUEUE)")]

# node-1: a TCP echo (port 9921), a UDP counter (port 9922: prints datagrams, distinct ones and how many came
# after a higher-numbered one, after 2 s quiet)
ECHO = ("import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('0.0.0.0', 9921)); s.listen(4)\nwhile True:\n    c, _ = s.accept()\n    while True:\n"
        "        b = c.recv(1 << 16)\n        if not b: break\n        c.sendall(b)\n    c.close()\n")
UDP = ("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('0.0.0.0', 9922))\n"
       "s.settimeout(8); got = [s.recv(64)]; s.settimeout(2)\ntry:\n    while True: got.append(s.recv(64))\n"
       "except socket.timeout: pass\nseq = [int(x) for x in got]\n"
       "print(len(got), len(set(got)), sum(b < a for a, b in zip(seq, seq[1:])))\n")
# node-0: `<ip> <n>`: median round trip (ms) of n 1-byte echoes; then 2 MB echoed back (sent from a thread:
# a sender that never reads would fill both ways' buffers), compared
PING = ("import socket, sys, time, os, threading\nc = socket.create_connection((sys.argv[1], 9921), timeout=30)\n"
        "c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); ts = []\nfor _ in range(int(sys.argv[2])):\n"
        "    t = time.monotonic(); c.sendall(b'x'); c.recv(1); ts.append(time.monotonic() - t)\n"
        "data = os.urandom(2_000_000); got = bytearray()\n"
        "threading.Thread(target=c.sendall, args=(data,), daemon=True).start()\nwhile len(got) < len(data):\n"
        "    got += c.recv(1 << 16)\nprint(sorted(ts)[len(ts) // 2] * 1000, bytes(got) == data)\n")
SEND_UDP = ("import socket, sys, time\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "for i in range(500):\n    s.sendto(str(i).encode(), (sys.argv[1], 9922)); time.sleep(0.002)\n")


def _snmp(container: str, proto: str, field: str) -> int:
    rows = [line.split() for line in docker("exec", container, "cat", "/proc/net/snmp").splitlines()
            if line.startswith(proto + ":")]
    return int(rows[1][rows[0].index(field)])


def _ping(cluster, n=40) -> tuple[float, bool]:
    out = docker("exec", f"{cluster.project}-node-0", "python", "-c", PING, cluster.plan.ip("node-1"), str(n),
                 timeout=180).split()
    return float(out[0]), out[1] == "True"


def _udp(cluster) -> tuple[int, int, int]:
    recv = subprocess.Popen(["docker", "exec", f"{cluster.project}-node-1", "python", "-c", UDP],
                            stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    docker("exec", f"{cluster.project}-node-0", "python", "-c", SEND_UDP, cluster.plan.ip("node-1"), timeout=60)
    return tuple(int(x) for x in recv.communicate(timeout=60)[0].split())


@pytest.fixture(scope="module")
def image():
    from chaosbench.cluster.docker.images import node_image
    return node_image()


def _ours(cluster, node: str) -> str:
    return cluster._run_in_node(node, scripts.LINK_STATE, "eth0").strip()


def test_delay_duplicate_corrupt_are_real_and_restore_leaves_nothing(tmp_path, image):
    spec = ClusterSpec(run_id="nfq", run_dir=tmp_path, nodes=2, min_nodes=1, max_nodes=2,
                       command=["python", "-c", "import time; time.sleep(600)"])
    with create_cluster("docker", spec, image=image) as cluster:
        cluster.start_training()
        node0, node1 = (f"{cluster.project}-node-{i}" for i in (0, 1))
        echo = subprocess.Popen(["docker", "exec", node1, "python", "-c", ECHO])
        try:
            time.sleep(1.0)
            base, ok = _ping(cluster)
            assert ok
            out = cluster.netem_link("node-0", {"peer": "node-1", "delay_ms": 100, "duplicate_pct": 30,
                                                "corrupt_pct": 10})
            assert out["mechanism"] == dict.fromkeys(("delay_ms", "duplicate_pct", "corrupt_pct"), "nfqueue")
            assert "nfqueue 459 bound" in _ours(cluster, "node-0") and "nfqueue handler pid" in _ours(cluster, "node-0")
            csum0, retrans0 = _snmp(node1, "Tcp", "InCsumErrors"), _snmp(node0, "Tcp", "RetransSegs")
            slow, ok = _ping(cluster, 20)
            assert ok, "corrupted bytes reached the application"
            csum, retrans = _snmp(node1, "Tcp", "InCsumErrors") - csum0, _snmp(node0, "Tcp", "RetransSegs") - retrans0
            # egress only: the round trip is longer by one delay (what node-0 sends waits; node-1's answer does not)
            assert 90 < slow - base < 160, (base, slow)
            # dropped by the receiver's checksum, then resent (fewer resent: a clean copy may arrive in time)
            assert csum > 0 and retrans > 0, (csum, retrans)
            total, distinct, _ = _udp(cluster)
            assert total > distinct + 50, (total, distinct)        # ~30 % of the datagrams arrived twice
            print(f"\nround trip {base:.2f} -> {slow:.2f} ms at delay 100 ms; corrupt 10 %: {csum} segments failed "
                  f"node-1's TCP checksum, {retrans} retransmitted, every byte right; duplicate 30 %: {total} "
                  f"datagrams for {distinct} distinct")
            cluster.restore_link("node-0")
            assert _ours(cluster, "node-0") == ""
            after, ok = _ping(cluster)
            assert ok and after < base + 20, (base, after)
            assert _udp(cluster)[2] == 0, "datagrams out of order without a fault"
            # reorder (netem's): half go at once, the rest 20 ms later
            cluster.netem_link("node-0", {"peer": "node-1", "delay_ms": 20, "reorder_pct": 50})
            total, distinct, early = _udp(cluster)
            assert early > 50 and total == distinct, (total, distinct, early)
            print(f"reorder 50 % at delay 20 ms: {early} of {total} datagrams arrived after a later one")
            cluster.restore_link("node-0")
            assert _ours(cluster, "node-0") == ""
        finally:
            echo.kill()


# the loss / rate test's harness (killed mid-fault below), with the handler's fault instead
HARNESS = pkt.HARNESS.replace('"pktkill"', '"nfqkill"').replace(
    'c.degrade_link("node-0", {"to": "all", "loss_pct": 30, "rate_kbit": 500})',
    'c.netem_link("node-0", {"to": "data", "delay_ms": 50, "jitter_ms": 20})')
assert "netem_link" in HARNESS and "nfqkill" in HARNESS


def _handlers() -> list[str]:
    """Processes on this host (the nodes' included) whose command line names the handler."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"chaosbench-nfqueue" in cmd:
            out.append(pid)
    return out


def test_a_sigkilled_harness_mid_fault_leaves_no_handler_after_clean(tmp_path, image, monkeypatch):
    monkeypatch.setenv("CHAOSBENCH_NODE_IMAGE", image)
    p, project = harness_mid_fault(HARNESS, tmp_path)
    state = docker("exec", f"{project}-node-0", "sh", "-c", scripts.LINK_STATE.source, "x", "eth0")
    assert "nfqueue 459 bound" in state and "NFQUEUE" in state, state   # mid-fault: there
    assert _handlers(), "no handler process seen mid-fault"
    sigkill_then_clean(p, project, f"{project}-node-0")
    deadline = time.monotonic() + 30
    while _handlers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _handlers(), f"handler or its docker exec outlived clean: pids {_handlers()}"
