"""Ray's own faults (backend ray): a node's raylet, its object store and the head. A training worker's
crash and hang are the existing kill_worker / freeze_worker, which the Ray backend carries out on its
train worker actors."""
from __future__ import annotations

from typing import Any, Callable

from pydantic import Field, ValidationInfo, field_validator, model_validator

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


KillRaylet = one_shot("kill_raylet", "Ray: SIGKILL a node's raylet; Ray loses the node (its workers die with it), "
                      "the machine and its disks stay (on the containerised cluster `ray start --block` then ends "
                      "the node's other Ray processes and its container: exit 1, NVMe volume kept)", NodeParams,
                      "kill_raylet",
                      lambda fault: fault.pick_node(fault.p.node))
KillRayHead = one_shot("kill_ray_head", "Ray: SIGKILL the head node (GCS, Train controller, driver): without GCS "
                       "fault tolerance the run is lost, whatever its checkpoints", FaultParams, "kill_head",
                       lambda fault: "ray-head")


# What may be put in one node's object store. Beyond its capacity (80 MiB per node on the test cluster)
# Ray spills primary copies to the node's disk, which on the containerised cluster is the host's own
# disk: the bound keeps a typo from filling it.
MAX_FILL_MB = 1024
MAX_FILL_FRACTION = 4.0


@register
class FillObjectStore(Fault):
    name = "fill_object_store"
    help = ("Ray: fill a node's object store (mb MiB, or fraction of its capacity; above 1 Ray spills the rest "
            "to the node's disk) with objects an actor pinned to that node holds for duration_s, then frees them")
    needs = ("fill_object_store", "release_object_store")
    default_duration_s = 30.0

    class Params(NodeParams):
        mb: int | None = Field(None, ge=1, examples=[240])            # MiB put in the node's store
        fraction: float | None = Field(None, gt=0, examples=[1.0])    # ... or this share of its capacity

        @field_validator("mb", "fraction")
        @classmethod
        def _bounded(cls, v: float | None, info: ValidationInfo):
            if info.field_name == "mb" and v is not None and v > MAX_FILL_MB:
                raise ValueError(f"{v} MiB is more than {MAX_FILL_MB}: what does not fit in the node's object store "
                                 f"(80 MiB per node on the containerised cluster) Ray spills to the node's disk, the "
                                 f"host's own here; give mb <= {MAX_FILL_MB}, or fraction (e.g. 3 for three times "
                                 f"the store)")
            if info.field_name == "fraction" and v is not None and v > MAX_FILL_FRACTION:
                raise ValueError(f"{v:g} times the node's object store is more than {MAX_FILL_FRACTION:g}: the excess "
                                 f"is spilled to the node's disk; give fraction <= {MAX_FILL_FRACTION:g} (1: exactly "
                                 f"full), or mb")
            return v

        @model_validator(mode="after")
        def _one_size(self):
            if (self.mb is None) == (self.fraction is None):
                raise ValueError("give exactly one of mb (MiB put in the node's object store) or fraction (of its "
                                 "capacity; above 1 spills), e.g. {mb: 240} or {fraction: 3}")
            return self

    def _inject(self):
        self.target = self.pick_node(self.p.node)
        self.filled = self.cluster.fill_object_store(self.target, self.p.mb, self.p.fraction) or {}

    def recorded(self, action: str) -> dict[str, Any]:
        """What Ray did: the inject record has what was put and the store's state then, the heal record
        what the store held once the objects were freed."""
        return self.filled if action == "inject" else self.released

    def _heal(self):
        self.released = self.cluster.release_object_store(self.target) or {}
