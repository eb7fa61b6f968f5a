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
            out.setdefault(str(f["node"]), []).append(f)
    return out


def file_step(path: str) -> int | None:
    m = STEP.search(str(path).rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def newest_step(files: list[dict]) -> int | None:
    steps = [s for f in files if (s := file_step(f.get("path", ""))) is not None]
    return max(steps) if steps else None


def nodes_of(rec: RunRecord) -> list[str]:
    return sorted(rec.logs) or sorted({str(e.get("node")) for e in rec.events if e.get("node")})


def unseen_nodes(inv: dict) -> set[str]:
    return {str(u.get("node")) for u in inv.get("unseen") or [] if isinstance(u, dict)}


def rank0_node(rec: RunRecord) -> str | None:
    """The node where global rank 0 ran first (from worker_start / step events)."""
    for e in rec.events:
        if e.get("rank") == 0 and e.get("node"):
            return str(e["node"])
    return None
