"""Unit: how many nodes the local backend lets add_node run (no processes started)."""
import pytest

from chaosbench.cluster import ClusterSpec
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.local.backend import LocalCluster


def test_add_node_counts_live_nodes_and_spares(tmp_path, monkeypatch):
    c = LocalCluster(ClusterSpec(run_id="t", run_dir=tmp_path, nodes=2, max_nodes=2, spare_nodes=1))
    monkeypatch.setattr(c, "_make_dirs", lambda node: None)
    assert c.add_node() == "node-2"                       # the spare: beyond torchrun's max_nodes
    with pytest.raises(ClusterError, match="spare_nodes=1"):
        c.add_node()
    monkeypatch.setattr(c, "node_status", lambda n: "exited:-9" if n == "node-0" else "running")
    assert c.add_node() == "node-3"                       # a lost node's place is refilled under a new name
    with pytest.raises(ClusterError, match="3 nodes running"):
        c.add_node()
