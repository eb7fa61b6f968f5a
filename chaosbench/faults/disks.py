"""Disk faults through a FUSE passthrough layer (cluster/node/disk_layer.py) over a node's NVMe or memory tier:
errors (EIO, ENOSPC, EROFS) on one kind of operation with a probability, latency, bits flipped on read.

The layer must be mounted before the job starts, so the scenario decides where it runs: `disk_layers`
(below) names the nodes and tiers every disk_fault and lose_unsynced_writes kill reaches, and the
backend mounts a layer there at each start of the node (ClusterSpec.disk_layers).
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from chaosbench.cluster.errors import ClusterError
from chaosbench.faults.base import NODE_NAME, Fault, FaultParams
from chaosbench.faults.registry import register

MECHANISM = "fuse passthrough (mfusepy)"
WRITEBACK = "fuse writeback: data held in the layer until fsync (mfusepy)"


class DiskParams(FaultParams):
    node: str = Field("random", pattern=NODE_NAME)
    tier: Literal["nvme", "memory"] = "nvme"
    op: Literal["read", "write", "fsync", "open"] | None = None   # which operation fails or is slowed
    errno: Literal["EIO", "ENOSPC", "EROFS"] | None = None
    probability: float = Field(1.0, gt=0, le=1)                   # share of `op` calls that fail
    latency_ms: float | None = Field(None, gt=0, le=60_000)       # added to each `op` call
    # newest: the data file of the tier's newest checkpoint when injected; all: every file read
    bitflip_on_read: Literal["newest", "all"] | None = Field(None, examples=["all"])

    @model_validator(mode="after")
    def _an_effect(self):
        if not (self.errno or self.latency_ms or self.bitflip_on_read):
            raise ValueError("give at least one effect: errno (with op), latency_ms (with op) or bitflip_on_read "
                             "(a disk fault that changes nothing proves nothing)")
        if (self.errno or self.latency_ms) and self.op is None:
            raise ValueError("errno and latency_ms need op: read, write, fsync or open (which operation they hit)")
        if self.op is not None and not (self.errno or self.latency_ms):
            raise ValueError(f"op={self.op} without errno or latency_ms does nothing: add errno: EIO|ENOSPC|EROFS "
                             "or latency_ms")
        return self


@register
class DiskFault(Fault):
    name = "disk_fault"
    help = ("a node's NVMe or memory tier fails through a FUSE layer: errno (EIO|ENOSPC|EROFS) on read|write|fsync|"
            "open with a probability, latency_ms, or bitflip_on_read (newest checkpoint | all files)")
    Params = DiskParams
    default_duration_s = 30.0

    @classmethod
    def needs_for(cls, params: DiskParams) -> frozenset[str]:
        newest = {"nvme_dir" if params.tier == "nvme" else "shm_dir"} if params.bitflip_on_read == "newest" else set()
        return frozenset({"fault_disk", "heal_disk", *newest})

    def _inject(self):
        from chaosbench.faults.storage import newest_checkpoint_file
        self.node = self.pick_node(self.p.node)
        fault = {k: v for k, v in self.p.model_dump(include={"op", "errno", "latency_ms"}).items() if v is not None}
        if self.p.errno:
            fault["probability"] = self.p.probability
        if self.p.bitflip_on_read == "newest":
            root = Path(self.cluster.nvme_dir(self.node) if self.p.tier == "nvme" else self.cluster.shm_dir(self.node))
            path = newest_checkpoint_file(root)
            if path is None:
                raise ClusterError(f"disk_fault: no checkpoint file under {root} on {self.node} to flip bits in")
            fault["bitflip_on_read"] = [path.relative_to(root).as_posix()]
        elif self.p.bitflip_on_read == "all":
            fault["bitflip_on_read"] = "all"
        self.fault = fault
        self.cluster.fault_disk(self.node, self.p.tier, fault)
        self.target = f"{self.node}:{self.p.tier}"
        self.counts: dict | None = None

    def _heal(self):
        self.counts = self.cluster.heal_disk(self.node, self.p.tier)

    def recorded(self, action: str) -> dict:
        """At the heal, what the layer did meanwhile (counts None: the node was not running, and a node's
        layer starts with no fault)."""
        if action == "inject":
            return {"mechanism": MECHANISM, "layer_fault": self.fault}
        return {"mechanism": MECHANISM, "counts": None if self.counts is None else
                {k: self.counts.get(k) for k in ("injected", "delayed", "bitflips")}}


def disk_layers(faults, nodes: list[str]) -> dict[str, dict]:
    """node -> {'tiers': [...], 'writeback': bool}: where a scenario's faults (entries with .kind and
    .params) need the layer mounted from the node's start. 'random' reaches every node."""
    out: dict[str, dict] = {}

    def need(node: str, tier: str, writeback: bool = False):
        for n in nodes if node == "random" else [node]:
            layer = out.setdefault(n, {"tiers": [], "writeback": False})
            if tier not in layer["tiers"]:
                layer["tiers"].append(tier)
            layer["writeback"] |= writeback
    for f in faults:
        params = f.params or {}
        if f.kind == "disk_fault":
            need(params.get("node", "random"), params.get("tier", "nvme"))
        elif f.kind in ("kill_node", "kill_all") and params.get("lose_unsynced_writes"):
            need(params.get("node", "random") if f.kind == "kill_node" else "random", "nvme", writeback=True)
    return out
