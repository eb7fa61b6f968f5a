"""Disk primitives: the FUSE disk layer (node/disk_layer.py) mounted over a node's tier from its start,
asked to inject or clear a fault (`_disk_tiers_in_node`: docker and local mount it), and a full NVMe
(fill_nvme's ballast, `_nvme_in_node`)."""
from __future__ import annotations

import json

from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.node import scripts
from chaosbench.cluster.primitives import primitive

# why a backend without the disk layer's hook (_disk_tiers_in_node) refuses disk faults
NO_DISK_LAYER = (
    "no disk layer: disk_fault and lose_unsynced_writes need a FUSE layer mounted over the node's tier from the "
    "node's start (docker: /dev/fuse and CAP_SYS_ADMIN in the node; local: root, /dev/fuse, fusermount3 and "
    "mfusepy on this host); Slurm nodes' directories are the site's; use the docker backend")
DISK_LAYER_PRIMITIVES = frozenset(("fault_disk", "heal_disk", "disk_stats"))


class DiskPrimitives:
    #: fill_nvme refuses unless this node directory is its own filesystem (None: no such check)
    fill_guard: str | None = None

    def _disk_tiers_in_node(self, node: str) -> dict[str, str]:
        """tier -> directory of the node's tiers under the disk layer (node/disk_layer.py), mounted at each
        start of the node where spec.disk_layers asks for it."""
        self._unsupported("fault_disk")

    def _disk_args(self, node: str) -> list[str]:
        """node/disk_layer.py's leading arguments for this node (local nodes: their own control directory)."""
        return []

    def _disk_tier(self, node: str, tier: str) -> None:
        self._check_node(node)
        if tier not in self._disk_tiers_in_node(node):
            raise ClusterError(f"{node} runs no disk layer over its {tier} tier (spec.disk_layers: "
                               f"{self.spec.disk_layers.get(node)}); the scenario's faults decide where it runs")

    @primitive(via=("_run_in_node", "_disk_tiers_in_node"), why=NO_DISK_LAYER)
    def fault_disk(self, node: str, tier: str, fault: dict) -> dict:
        """Make the node's disk layer over `tier` inject `fault` ({op, errno, probability, latency_ms,
        bitflip_on_read}); returns once the layer took it, with the layer's stats."""
        self._disk_tier(node, tier)
        return json.loads(self._run_in_node(node, scripts.DISK_LAYER, *self._disk_args(node), "control", tier,
                                            json.dumps(fault), timeout=30))

    @primitive(via=("_run_in_node", "_disk_tiers_in_node"), why=NO_DISK_LAYER)
    def heal_disk(self, node: str, tier: str) -> dict | None:
        """Clear the layer's fault, verified (the layer acknowledges none active); what it injected meanwhile."""
        return self.fault_disk(node, tier, {})

    @primitive(via=("_run_in_node", "_disk_tiers_in_node"), why=NO_DISK_LAYER)
    def disk_stats(self, node: str, tier: str) -> dict:
        """The layer's counts and what it holds unsynced (writeback mode)."""
        self._disk_tier(node, tier)
        return json.loads(self._run_in_node(node, scripts.DISK_LAYER, *self._disk_args(node), "stats", tier, timeout=30))

    def _nvme_in_node(self, node: str) -> str:
        """The node's NVMe directory as the node's processes see it."""
        self._unsupported("fill_nvme")

    @primitive(via="_nvme_in_node")
    def fill_nvme(self, node: str, percent: float = 100.0) -> None:
        if not 0 < percent <= 100:
            raise ClusterError(f"fill_nvme percent={percent}: must be in (0, 100]")
        self._check_node(node)
        guard = [self.fill_guard] if self.fill_guard else []
        self._run_in_node(node, scripts.FILL, self._nvme_in_node(node), str(percent), *guard)

    @primitive(via="_nvme_in_node")
    def free_nvme(self, node: str) -> None:
        self._check_node(node)
        self._run_in_node(node, scripts.FREE, self._nvme_in_node(node))
