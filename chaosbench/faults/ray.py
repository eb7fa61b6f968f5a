"""Ray's own faults (backend ray): a node's raylet and the head. A training worker's crash and hang are
the existing kill_worker / freeze_worker, which the Ray backend carries out on its train worker actors."""
from __future__ import annotations

from typing import Callable

from chaosbench.faults.base import Fault, FaultParams, NodeParams
from chaosbench.faults.registry import register


def one_shot(name: str, help: str, params: type[FaultParams], primitive: str,
             target: Callable[[Fault], str]) -> type[Fault]:
    """A fault that is one primitive and nothing to undo, called with its target when that is a node."""
    def _inject(self):
        self.target = target(self)
        getattr(self.cluster, primitive)(*([self.target] if params is NodeParams else []))
    cls_name = "".join(w.title() for w in name.split("_"))
    return register(type(cls_name, (Fault,), {"name": name, "help": help, "Params": params, "needs": (primitive,),
                                              "healable": False, "_inject": _inject, "__module__": __name__}))


KillRaylet = one_shot("kill_raylet", "Ray: SIGKILL a node's raylet; Ray loses the node (its workers die with it) "
                      "while the machine, its disks and shared memory stay", NodeParams, "kill_raylet",
                      lambda fault: fault.pick_node(fault.p.node))
KillRayHead = one_shot("kill_ray_head", "Ray: SIGKILL the head node (GCS, Train controller, driver): without GCS "
                       "fault tolerance the run is lost, whatever its checkpoints", FaultParams, "kill_head",
                       lambda fault: "ray-head")
