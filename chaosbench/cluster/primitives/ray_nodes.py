"""Ray's own parts as fault targets: a node's raylet (the node as Ray sees it), its object store and the
head (GCS and driver). Only a Ray cluster has them: cluster/ray/faults.py implements them for the containerised one."""
from __future__ import annotations

from chaosbench.cluster.primitives import backend_primitive

WHY = "only a Ray cluster (--backend ray) has a raylet and a head"
WHY_STORE = ("only a Ray cluster (--backend ray) has an object store; a torchrun job's tensors live in its "
             "processes (memory_pressure squeezes those)")


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

    @backend_primitive(why=WHY_STORE)
    def fill_object_store(self, node: str, mb: int | None = None, fraction: float | None = None) -> dict:
        """Put mb MiB (or fraction of its capacity) of objects in the node's object store, held by an actor
        pinned to the node until release_object_store; what was put and what the store reported
        ({'capacity_mb', 'put_mb', 'put_error', 'store': {'used_mb', 'spilled_mb', ...}, ...})."""

    @backend_primitive(why=WHY_STORE)
    def release_object_store(self, node: str) -> dict:
        """Free what fill_object_store put; {'released': the node's store stats after, or None}."""
