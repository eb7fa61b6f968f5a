"""disk_fault on a real docker cluster: the layer is mounted over /nvme from the node's start (and again
after a restart), a fault takes effect on the node's own writes and heals verified, a restarted node's
writeback layer has lost what was never fsynced, and after a SIGKILLed harness mid-fault the sweep that
`chaosbench clean` runs removes the nodes and with them every layer mount."""
import json
import textwrap
import time

import pytest

from chaosbench.cluster import ClusterSpec, available_backends, create_cluster

from chaosbench.cluster.node import scripts
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.node.disk_layer import FSNAME, layer_mounts
from chaosbench.cluster.docker.cli import docker, leftovers
from tests.cluster.helpers import harness_mid_fault, sigkill_then_clean

_why = available_backends()["docker"]
pytestmark = [pytest.mark.docker, pytest.mark.timeout(900),
              pytest.mark.skipif(_why is not None, reason=f"docker backend unusable: {_why}")]

SLEEP = ["python", "-c", "import time; time.sleep(600)"]
# in the node: `<path> <fsync 0|1>`: write 4 KiB, fsync or not; prints the errno name or 'ok'
WRITE = ("import errno, os, sys\ntry:\n    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)\n"
         "    os.write(fd, b'x' * 4096)\n    int(sys.argv[2]) and os.fsync(fd)\n    os.close(fd); print('ok')\n"
         "except OSError as e:\n    print(errno.errorcode[e.errno])\n")


@pytest.fixture(scope="module")
def image():
    from chaosbench.cluster.docker.images import node_image
    return node_image()


def _mounts(cluster, node: str) -> str:
    return docker("exec", cluster.plan.container(node), "grep", FSNAME, "/proc/mounts", check=False)


def _write(cluster, node: str, path: str, fsync: bool) -> str:
    return docker("exec", cluster.plan.container(node), "python", "-c", WRITE, path, "1" if fsync else "0").strip()


def _wait_mounted(cluster, node: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while "/nvme" not in _mounts(cluster, node):
        assert time.monotonic() < deadline, f"{node}: no disk layer over /nvme after {timeout:g} s"
        time.sleep(0.5)


def test_fault_heal_and_writeback_loss_across_a_restart(tmp_path, image):
    spec = ClusterSpec(run_id="disk", run_dir=tmp_path, nodes=2, min_nodes=1, max_nodes=2, command=SLEEP,
                       disk_layers={"node-1": {"tiers": ["nvme"], "writeback": True}})
    with create_cluster("docker", spec, image=image) as c:
        c.start_training()
        _wait_mounted(c, "node-1")
        assert _mounts(c, "node-0") == "", "the layer runs only where the scenario asks for it"
        with pytest.raises(ClusterError, match="no disk layer over its memory tier"):
            c.fault_disk("node-1", "memory", {"op": "write", "errno": "EIO"})
        assert _write(c, "node-1", "/nvme/a", fsync=True) == "ok"
        stats = c.fault_disk("node-1", "nvme", {"op": "write", "errno": "ENOSPC", "probability": 1.0})
        assert stats["active"]["errno"] == "ENOSPC"
        assert _write(c, "node-1", "/nvme/b", fsync=True) == "ENOSPC"
        healed = c.heal_disk("node-1", "nvme")
        assert healed["active"] is None and healed["injected"]["write"] >= 1
        assert _write(c, "node-1", "/nvme/b", fsync=True) == "ok"
        # writeback: a synced file survives the kill, an unsynced one keeps its name and loses its data
        assert _write(c, "node-1", "/nvme/unsynced", fsync=False) == "ok"
        deadline = time.monotonic() + 5   # the layer writes its stats within POLL_S
        while c.disk_stats("node-1", "nvme")["pending_bytes"] < 4096:
            assert time.monotonic() < deadline, "the layer does not hold the unsynced write"
            time.sleep(0.2)
        c.kill_node("node-1")
        c.start_node("node-1")
        _wait_mounted(c, "node-1")   # mounted again at the new start, before the node's command
        sizes = docker("exec", c.plan.container("node-1"), "stat", "-c", "%n %s", "/nvme/a", "/nvme/b",
                       "/nvme/unsynced").strip().split("\n")
        assert sizes == ["/nvme/a 4096", "/nvme/b 4096", "/nvme/unsynced 0"], sizes
        # a fault set while the node was down: heal empties the control file the next start would read
        c.fault_disk("node-1", "nvme", {"op": "read", "errno": "EIO", "probability": 1.0})
        c.kill_node("node-1")
        assert c.heal_disk("node-1", "nvme") is None
        c.start_node("node-1")
        _wait_mounted(c, "node-1")
        assert json.loads(c._run_in_node("node-1", scripts.DISK_LAYER, "stats", "nvme"))["active"] is None
        project = c.project
    assert leftovers(project) == {"containers": [], "networks": [], "volumes": []}


HARNESS = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from chaosbench.cluster import ClusterSpec, create_cluster
    spec = ClusterSpec(run_id="diskkill", run_dir=Path(sys.argv[1]), nodes=1, min_nodes=1, max_nodes=1,
                       command=["python", "-c", "import time; time.sleep(600)"],
                       disk_layers={"node-0": {"tiers": ["nvme", "memory"], "writeback": False}})
    with create_cluster("docker", spec) as c:
        c.start_training()
        for _ in range(120):
            if c.node_status("node-0") == "running":
                try:
                    c.fault_disk("node-0", "nvme", {"op": "fsync", "errno": "EIO", "probability": 1.0})
                    break
                except Exception:
                    pass
            time.sleep(0.5)
        print("READY", c.project, flush=True)
        time.sleep(600)
""")


def test_a_sigkilled_harness_mid_fault_leaves_no_mount_after_clean(tmp_path, image, monkeypatch):
    monkeypatch.setenv("CHAOSBENCH_NODE_IMAGE", image)
    p, project = harness_mid_fault(HARNESS, tmp_path)
    node = f"{project}-node-0"
    mounts = docker("exec", node, "grep", FSNAME, "/proc/mounts")
    assert " /nvme " in mounts and " /dev/shm/chaosbench " in mounts, mounts   # mid-fault: both layers there
    sigkill_then_clean(p, project, node)   # the mounts lived in the node's own mount namespace
    # ours only: another test's run on this host may hold its own loop disks (under a path that
    # contains "chaosbench-disk") and, on the local backend, its own layers
    ours = [m for m in layer_mounts() if project in m]
    assert not ours, f"a disk layer mount is visible on the host: {ours}"
