"""disk_fault on the local backend (root, /dev/fuse, fusermount3 here): the layer over a node's NVMe
directory from its start, a fault on the host's writes through it, a kill that loses unsynced data and
leaves a dead mount, the next start mounting afresh, and teardown leaving no layer mounted."""
import os
import time
from pathlib import Path

import pytest

from chaosbench.cluster import ClusterSpec, create_cluster
from chaosbench.cluster.node.disk_layer import layer_mounts
from chaosbench.cluster.local.backend import _no_fuse

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300),
              pytest.mark.skipif(_no_fuse() is not None, reason=f"no disk layer here: {_no_fuse()}")]


def _wait_mounted(path: str, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while os.path.realpath(path) not in layer_mounts():
        assert time.monotonic() < deadline, f"no disk layer over {path} after {timeout:g} s"
        time.sleep(0.2)
    for _ in range(int(timeout / 0.2)):   # a dead layer of the previous start answers ENOTCONN until replaced
        try:
            os.listdir(path)
            return
        except OSError:
            time.sleep(0.2)


def test_local_fault_kill_restart_and_teardown(tmp_path):
    spec = ClusterSpec(run_id="dlocal", run_dir=tmp_path, nodes=1, min_nodes=1, max_nodes=1,
                       command=["python", "-c", "import time; time.sleep(600)"],
                       disk_layers={"node-0": {"tiers": ["nvme"], "writeback": True}})
    with create_cluster("local", spec) as c:
        c.start_training()
        nvme = c._disk_tiers_in_node("node-0")["nvme"]
        _wait_mounted(nvme)
        c.fault_disk("node-0", "nvme", {"op": "write", "errno": "ENOSPC", "probability": 1.0})
        with pytest.raises(OSError, match="No space left"):
            Path(nvme, "f").write_bytes(b"x" * 100)
        assert c.heal_disk("node-0", "nvme")["injected"]["write"] >= 1
        with open(Path(nvme, "synced"), "wb") as f:
            f.write(b"s" * 100)
            f.flush()
            os.fsync(f.fileno())
        Path(nvme, "unsynced").write_bytes(b"u" * 100)
        c.kill_node("node-0")   # the layer dies with the node: its held data is gone
        c.start_node("node-0")
        _wait_mounted(nvme)
        assert Path(nvme, "synced").read_bytes() == b"s" * 100
        assert Path(nvme, "unsynced").read_bytes() == b""
        mounted = os.path.realpath(nvme)
    assert mounted not in layer_mounts(), "teardown left the disk layer mounted"
