"""packet_fault on a real docker cluster: a real TCP transfer between two nodes shows the loss and the
rate took effect, restore leaves no rule or qdisc, and after a SIGKILLed harness the sweep that
`chaosbench clean` runs removes the nodes and with them every rule and qdisc in their namespaces."""
import os
import re
import subprocess
import textwrap
import time

import pytest

from chaosbench.cluster import ClusterSpec, available_backends, create_cluster

from chaosbench.cluster.node import scripts
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.docker.cli import docker
from tests.cluster.helpers import harness_mid_fault, sigkill_then_clean

_why = available_backends()["docker"]
pytestmark = [pytest.mark.docker, pytest.mark.timeout(900),
              pytest.mark.skipif(_why is not None, reason=f"docker backend unusable: {_why}")]

PORT = 9911
# node-1: receive until EOF, answer with the byte count (so the sender's clock covers delivery)
RECV = ("import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        f"s.bind(('0.0.0.0', {PORT})); s.listen(1); c, _ = s.accept(); n = 0\n"
        "while True:\n    b = c.recv(1 << 16)\n    if not b: break\n    n += len(b)\n"
        "c.sendall(str(n).encode()); c.close()\n")
# node-0: `<ip> <bytes>`: send, wait for the count; prints seconds, then the count
SEND = ("import socket, sys, time\nfor _ in range(100):\n    try: c = socket.create_connection((sys.argv[1], "
        f"{PORT}), timeout=5); break\n    except OSError: time.sleep(0.1)\n"
        "t = time.monotonic(); c.settimeout(120); c.sendall(b'x' * int(sys.argv[2])); c.shutdown(socket.SHUT_WR)\n"
        "n = c.recv(64).decode(); print(time.monotonic() - t, n)\n")


def _retrans(container: str) -> int:
    """TCP segments the node has retransmitted (its own network namespace's counter)."""
    snmp = docker("exec", container, "cat", "/proc/net/snmp").splitlines()
    head, vals = [line.split() for line in snmp if line.startswith("Tcp:")][:2]
    return int(vals[head.index("RetransSegs")])


def _transfer(cluster, nbytes: int) -> float:
    project = cluster.project
    recv = subprocess.Popen(["docker", "exec", f"{project}-node-1", "python", "-c", RECV],
                            stdout=subprocess.PIPE, text=True)
    try:
        out = docker("exec", f"{project}-node-0", "python", "-c", SEND, cluster.plan.ip("node-1"), str(nbytes),
                     timeout=180).split()
    finally:
        recv.wait(timeout=30)
    assert int(out[1]) == nbytes, out
    return float(out[0])


def _counted(container: str, chain: str, target: str) -> int:
    """Packets the rules of `chain` jumping to `target` have seen."""
    table = docker("exec", container, "iptables", "-L", chain, "-v", "-n", "-x")
    return sum(int(m) for m in re.findall(rf"^\s*(\d+)\s+\d+\s+{re.escape(target)}\s", table, re.M))


def _ours(cluster, node: str) -> str:
    return cluster._run_in_node(node, scripts.LINK_STATE, "eth0").strip()


@pytest.fixture(scope="module")
def image():
    from chaosbench.cluster.docker.images import node_image
    return node_image()


def _spec(tmp_path):
    return ClusterSpec(run_id="pkt", run_dir=tmp_path, nodes=2, min_nodes=1, max_nodes=2,
                       command=["python", "-c", "import time; time.sleep(600)"])


def test_loss_and_rate_take_effect_on_a_real_transfer_and_restore_leaves_nothing(tmp_path, image):
    with create_cluster("docker", _spec(tmp_path), image=image) as cluster:
        cluster.start_training()
        node0 = f"{cluster.project}-node-0"
        base = _transfer(cluster, 2_000_000)
        # rate: 800 kbit/s = 100 kB/s on what node-0 sends to its peers: 400 kB take >= ~3 s
        out = cluster.degrade_link("node-0", {"to": "data", "rate_kbit": 800})
        assert out["mechanism"] == {"rate_kbit": "htb"} and out["targets"] == [cluster.plan.ip("node-1")]
        shaped = _transfer(cluster, 400_000)
        assert shaped > 2.5, (base, shaped)   # unshaped, 400 kB take a millisecond here
        cluster.restore_link("node-0")
        assert _ours(cluster, "node-0") == ""
        assert _transfer(cluster, 400_000) < 1.5, "the rate limit outlived its restore"
        # loss: 20 % of packets both ways between node-0 and node-1; TCP still delivers every byte
        before = _retrans(node0)
        out = cluster.degrade_link("node-0", {"to": "data", "loss_pct": 20})
        assert out["mechanism"] == {"loss_pct": "iptables statistic"}
        lossy = _transfer(cluster, 20_000_000)
        retrans = _retrans(node0) - before
        drops = _counted(node0, scripts.LINK_CHAIN, "DROP")
        seen = _counted(node0, "INPUT", scripts.LINK_CHAIN) + _counted(node0, "OUTPUT", scripts.LINK_CHAIN)
        assert seen > 200 and 0.12 < drops / seen < 0.28, (drops, seen)
        print(f"\ntransfer 2 MB: {base:.3f} s; 20 MB with 20 % loss: {lossy:.3f} s, {drops} of {seen} packets dropped, "
              f"{retrans} retransmitted segments; 400 kB at 800 kbit/s: {shaped:.2f} s")
        # the partition's chain and heal are apart from ours
        cluster.partition("node-0", peers=["s3"])
        cluster.heal_network("node-0")
        assert scripts.LINK_CHAIN in _ours(cluster, "node-0"), "healing a partition removed a degraded link"
        cluster.restore_link("node-0")
        assert _ours(cluster, "node-0") == ""
        assert _transfer(cluster, 20_000_000) < max(2.0, 0.5 * lossy), "loss outlived its restore"
        # a restore that finds something of ours left fails loudly: our chain, still referenced elsewhere
        docker("exec", node0, "sh", "-c", f"iptables -N {scripts.LINK_CHAIN} && iptables -I FORWARD -j {scripts.LINK_CHAIN}")
        with pytest.raises(ClusterError, match="degraded link not restored"):
            cluster.restore_link("node-0")
        docker("exec", node0, "iptables", "-D", "FORWARD", "-j", scripts.LINK_CHAIN)
        cluster.restore_link("node-0")
        assert _ours(cluster, "node-0") == ""

HARNESS = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from chaosbench.cluster import ClusterSpec, create_cluster
    spec = ClusterSpec(run_id="pktkill", run_dir=Path(sys.argv[1]), nodes=2, max_nodes=2,
                       command=["python", "-c", "import time; time.sleep(600)"])
    with create_cluster("docker", spec) as c:
        c.start_training()
        c.degrade_link("node-0", {"to": "all", "loss_pct": 30, "rate_kbit": 500})
        print("READY", c.project, flush=True)
        time.sleep(600)
""")


def test_a_sigkilled_harness_mid_fault_leaves_no_rule_or_qdisc_after_clean(tmp_path, image, monkeypatch):
    monkeypatch.setenv("CHAOSBENCH_NODE_IMAGE", image)
    p, project = harness_mid_fault(HARNESS, tmp_path)
    node0 = f"{project}-node-0"
    state = docker("exec", node0, "sh", "-c", scripts.LINK_STATE.source, "x", "eth0")
    assert scripts.LINK_CHAIN in state and " 1cb: root" in state, state   # mid-fault: there
    pid = docker("inspect", "-f", "{{.State.Pid}}", node0).strip()
    netns = os.readlink(f"/proc/{pid}/ns/net") if os.access(f"/proc/{pid}/ns/net", os.R_OK) else None
    # the rules and qdiscs lived in the node's own network namespace, gone with its last process
    sigkill_then_clean(p, project, node0)
    if netns:
        held = [q for q in filter(str.isdigit, os.listdir("/proc"))
                if os.access(f"/proc/{q}/ns/net", os.R_OK) and os.readlink(f"/proc/{q}/ns/net") == netns]
        assert not held, f"processes {held} still hold the node's network namespace"
