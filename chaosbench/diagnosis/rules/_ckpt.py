"""Shared reading of the harness's checkpoint inventories (docs/result.md): who held what, when."""
from __future__ import annotations

import re

from ..record import RunRecord

STEP = re.compile(r"(\d+)(?!.*\d)")      # the last number in a file name: snapshot-20.pt, step-00000040


def held(inv: dict) -> dict[str, list[dict]]:
    """node -> its complete (not partial) checkpoint files on node-local tiers (S3 is shared)."""
    out: dict[str, list[dict]] = {}
    for f in inv.get("files") or []:
        if isinstance(f, dict) and not f.get("partial") and f.get("node") not in (None, "s3") \
                and f.get("tier") in ("nvme", "memory"):
            out.setdefault(node_name(f["node"]), []).append(f)
    return out


def node_name(root: object) -> str:
    """'node-0/nvme' (an inventory root) -> 'node-0'."""
    return str(root).split("/", 1)[0]


def looked_at(inv: dict, nodes: list[str]) -> list[str]:
    """The nodes the inventory could look into (its `looked` roots; older ones: every node not unseen)."""
    if isinstance(inv.get("looked"), list):
        return sorted({node_name(r) for r in inv["looked"]} - {"s3"})
    return [n for n in nodes if n not in unseen_nodes(inv)]


def file_step(path: str) -> int | None:
    m = STEP.search(str(path).rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def newest_step(files: list[dict]) -> int | None:
    steps = [s for f in files if (s := file_step(f.get("path", ""))) is not None]
    return max(steps) if steps else None


def nodes_of(rec: RunRecord) -> list[str]:
    return sorted(rec.logs) or sorted({str(e.get("node")) for e in rec.events if e.get("node")})


def unseen_nodes(inv: dict) -> set[str]:
    return {node_name(u.get("node")) for u in inv.get("unseen") or [] if isinstance(u, dict)}


def rank0_node(rec: RunRecord) -> str | None:
    """The node where global rank 0 ran first (from worker_start / step events)."""
    for e in rec.events:
        if e.get("rank") == 0 and e.get("node"):
            return str(e["node"])
    return None
