"""Storage faults: fill a node's NVMe, corrupt the newest checkpoint of a tier."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.node.scripts import FILL_FILE
from chaosbench.faults.base import Fault, NodeParams
from chaosbench.faults.registry import register
from chaosbench.instrument import manifest


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
    """The largest data file of the most recently committed checkpoint under root.

    File roles come from the checkpoint manifest (docs/manifest.md): the files it names are data;
    manifests, leftovers of uncommitted writes and files it does not name are not, since corrupting
    those tests nothing a restore must notice. A job that writes no manifests gets the same rule
    applied to its files: the newest folder's largest file that is no temp leftover or lock.
    """
    committed = [m.parent for m in root.rglob(manifest.MANIFEST_FILE)
                 if not manifest.is_temporary(m.parent.relative_to(root).as_posix())]
    if committed:
        newest = max(committed, key=lambda d: _mtime(d / manifest.MANIFEST_FILE))
        data = [newest / rel for rel, role in manifest.file_roles(newest).items() if role == "data"]
    else:
        data = [p for p in root.rglob("*") if p.is_file() and p.name != FILL_FILE and "lock" not in p.name.lower()
                and not manifest.is_temporary(p.relative_to(root).as_posix())]
        newest = max(data, key=_mtime).parent if data else root
        data = [p for p in data if p.parent == newest]
    data = [p for p in data if p.is_file() and p.stat().st_size > 0]
    return max(data, key=lambda p: p.stat().st_size) if data else None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:   # rotated away while we looked: the trainer keeps only a few
        return float("-inf")


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
    help = "flip a byte in the data file of the newest checkpoint (by its manifest) of a tier (nvme or memory) on a node"
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
