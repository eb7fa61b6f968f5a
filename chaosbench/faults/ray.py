"""Ray's own faults (backend ray): a node's raylet and the head. A training worker's crash and hang are
the existing kill_worker / freeze_worker, which the Ray backend carries out on its train worker actors."""
from __future__ import annotations

from chaosbench.faults.base import Fault, FaultParams, NodeParams
from chaosbench.faults.registry import register


@register
class KillRaylet(Fault):
    name = "kill_raylet"
    help = ("Ray: SIGKILL a node's raylet; Ray loses the node (its workers die with it) while the machine, its "
            "disks and shared memory stay")
    healable = False
    needs = ("kill_raylet",)
    Params = NodeParams

    def _inject(self):
        self.target = self.pick_node(self.p.node)
        self.cluster.kill_raylet(self.target)


@register
class KillRayHead(Fault):
    name = "kill_ray_head"
    help = ("Ray: SIGKILL the head node (GCS, Train controller, driver): without GCS fault tolerance the run "
            "is lost, whatever its checkpoints")
    healable = False
    needs = ("kill_head",)
    Params = FaultParams

    def _inject(self):
        self.target = "ray-head"
        self.cluster.kill_head()
