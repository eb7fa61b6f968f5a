"""Storage faults: fill a node's NVMe, corrupt the newest checkpoint of a tier."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from chaosbench.cluster.base import FILL_FILE, ClusterError
from chaosbench.faults.base import Fault, NodeParams
from chaosbench.faults.registry import register


@register
class FillNvme(Fault):
    name = "fill_nvme"
    help = "fill a node's NVMe mount to a percentage (100 = ENOSPC); healed by freeing it"
    needs = ("fill_nvme", "free_nvme")

    class Params(NodeParams):
        percent: float = Field(100.0, gt=0, le=100)

    def _inject(self):
        self.target = self.pick_node(self.p.node)
        self.cluster.fill_nvme(self.target, self.p.percent)

    def _heal(self):
        self.cluster.free_nvme(self.target)


def newest_checkpoint_file(root: Path) -> Path | None:
    """The largest data file of the most recently written checkpoint under root.

    Temp/partial files and manifests are skipped: corrupting those would test nothing the
    restorer should notice.
    """
    skip = ("tmp", "partial", "manifest", "lock")
    files = [p for p in root.rglob("*") if p.is_file() and p.stat().st_size > 0
             and not any(s in p.name.lower() for s in skip) and p.name != FILL_FILE]
    if not files:
        return None
    newest_dir = max(files, key=lambda p: p.stat().st_mtime).parent
    return max((p for p in files if p.parent == newest_dir), key=lambda p: p.stat().st_size)


def flip_byte(path: Path) -> int:
    size = path.stat().st_size
    offset = size // 2
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))
    return offset


@register
class CorruptCheckpoint(Fault):
    name = "corrupt_checkpoint"
    help = "flip a byte in the newest checkpoint of a tier (nvme or memory) on a node"
    healable = False

    class Params(NodeParams):
        tier: Literal["nvme", "memory"] = "nvme"

    @classmethod
    def needs_for(cls, params):
        return frozenset({"nvme_dir" if params.tier == "nvme" else "shm_dir"})

    def _inject(self):
        node = self.pick_node(self.p.node)
        root = self.cluster.nvme_dir(node) if self.p.tier == "nvme" else self.cluster.shm_dir(node)
        path = newest_checkpoint_file(Path(root))
        if path is None:
            raise ClusterError(f"corrupt_checkpoint: no checkpoint file under {root} on {node}")
        offset = flip_byte(path)
        self.target = f"{node}:{path.relative_to(root)}@{offset}"
