"""Ray's own parts as fault targets: a node's raylet (the node as Ray sees it) and the head (GCS and
driver). Only a Ray cluster has them: cluster/ray/faults.py implements them for the containerised one."""
from __future__ import annotations

from chaosbench.cluster.primitives import backend_primitive

WHY = "only a Ray cluster (--backend ray) has a raylet and a head"


class RayPrimitives:
    @backend_primitive(why=WHY)
    def kill_raylet(self, node: str) -> None:
        """SIGKILL the node's raylet: Ray loses the node, its container and files stay."""

    @backend_primitive(why=WHY)
    def kill_head(self) -> None:
        """SIGKILL the head node (GCS, the driver, the Train controller): the run loses its control plane."""

    @backend_primitive(why=WHY)
    def start_head(self) -> None:
        """Start the head again after kill_head (its worker nodes must rejoin by themselves)."""
