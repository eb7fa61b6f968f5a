"""dns_fault on a real docker cluster: each mode's effect measured inside the node with getaddrinfo and
connect, the other names untouched, and heal putting /etc/hosts and /etc/resolv.conf back byte for byte."""
import pytest

from chaosbench.cluster import ClusterSpec, UnsupportedFault, available_backends, create_cluster
from chaosbench.cluster.docker.cli import docker

_why = available_backends()["docker"]
pytestmark = [pytest.mark.docker, pytest.mark.timeout(600),
              pytest.mark.skipif(_why is not None, reason=f"docker backend unusable: {_why}")]

# in the node: for each name, its addresses (or the gaierror) and how long getaddrinfo took; with
# --connect, whether a TCP connect to the first address on port 29400 finished within 2 s
PROBE = """
import json, socket, sys, time
out = {}
for h in sys.argv[1:]:
    t = time.monotonic()
    try:
        r = sorted({a[4][0] for a in socket.getaddrinfo(h, 29400, socket.AF_INET, socket.SOCK_STREAM)})
    except socket.gaierror as e:
        r = [e.errno, e.strerror]
    out[h] = {"result": r, "took": time.monotonic() - t}
    if out[h]["result"] and isinstance(r[0], str):
        s = socket.socket(); s.settimeout(2)
        try:
            s.connect((r[0], 29400)); out[h]["connect"] = "connected"
        except socket.timeout:
            out[h]["connect"] = "timeout"
        except OSError as e:
            out[h]["connect"] = type(e).__name__
        finally:
            s.close()
print(json.dumps(out))
"""
FILES = "cat /etc/hosts /etc/resolv.conf; iptables -S OUTPUT; ls -A /run/chaosbench-names 2>/dev/null || true"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from chaosbench.cluster.docker.images import node_image
    spec = ClusterSpec(run_id="dnsf", run_dir=tmp_path_factory.mktemp("dns"), nodes=2, min_nodes=1, max_nodes=2,
                       rendezvous="c10d", command=["sleep", "600"], nvme_size_mb=64)   # no training needed
    c = create_cluster("docker", spec, image=node_image())
    with c:
        c.start_training()
        yield c


def probe(cluster, *names):
    import json
    return json.loads(docker("exec", cluster.plan.container("node-1"), "python", "-c", PROBE, *names, timeout=120))


def files(cluster, node="node-1"):
    return docker("exec", cluster.plan.container(node), "sh", "-c", FILES)


def test_nxdomain_is_name_or_service_not_known_at_once_for_that_name_alone(cluster):
    before = files(cluster)
    cluster.break_name("node-1", "node-0", "nxdomain")
    try:
        r = probe(cluster, "node-0", "etcd")
    finally:
        cluster.restore_names("node-1")
    assert r["node-0"]["result"] == [-2, "Name or service not known"] and r["node-0"]["took"] < 1   # EAI_NONAME
    assert r["etcd"]["result"] == [cluster.plan.ip("etcd")]
    assert files(cluster) == before
    assert probe(cluster, "node-0")["node-0"]["result"] == [cluster.plan.ip("node-0")]


def test_wrong_address_resolves_to_a_blackhole_whose_connects_time_out(cluster):
    before = files(cluster)
    cluster.break_name("node-1", "node-0", "wrong_address")
    try:
        r = probe(cluster, "node-0", "s3")
        other = files(cluster, "node-0")
    finally:
        cluster.restore_names("node-1")
    assert r["node-0"]["result"] == ["192.0.2.1"] and r["node-0"]["connect"] == "timeout"
    assert r["s3"]["result"] == [cluster.plan.ip("s3")]
    assert "192.0.2.1" not in other, "only the named node's files change"
    assert files(cluster) == before
    # the real address answers at once: nothing listens on node-0 (its command is `sleep`), so refused
    assert probe(cluster, "node-0")["node-0"]["connect"] == "ConnectionRefusedError"


def test_slow_answers_late_with_the_right_address(cluster):
    before = files(cluster)
    cluster.break_name("node-1", "node-0", "slow", 3.0)
    try:
        r = probe(cluster, "node-0", "etcd")
    finally:
        cluster.restore_names("node-1")
    assert r["node-0"]["result"] == [cluster.plan.ip("node-0")] and 2.9 < r["node-0"]["took"] < 6
    assert r["etcd"]["took"] < 1
    assert files(cluster) == before


def test_restore_is_idempotent_and_an_endpoint_given_as_an_address_is_refused(cluster):
    before = files(cluster)
    cluster.restore_names("node-1")
    assert files(cluster) == before
    with pytest.raises(UnsupportedFault, match="IP address"):
        cluster.break_name("node-1", "rendezvous", "nxdomain")
    assert files(cluster) == before
