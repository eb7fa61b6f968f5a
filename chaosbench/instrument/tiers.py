"""Which storage tier a checkpoint path is on, from where the harness put each node's storage."""
from __future__ import annotations

import os

# The harness's side of the tier names in the event contract (docs/events.md "Tiers"), fastest first;
# every harness module takes them from here (the trainer's side is trainer/checkpoint/config.py).
TIERS = ("memory", "nvme", "s3")
_DIRS = (("memory", "CHAOSBENCH_MEMORY_DIR"), ("nvme", "CHAOSBENCH_NVME_DIR"))


def _under(path: str, root: str) -> bool:
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def tier_of(path, tier: str | None = None) -> tuple[str | None, str | None]:
    """(tier, note): s3:// -> s3, under $CHAOSBENCH_MEMORY_DIR -> memory, under $CHAOSBENCH_NVME_DIR ->
    nvme; elsewhere `tier` as given. The note says why a tier is missing or differs from the given one."""
    derived = None
    if path is not None:
        p = os.fspath(path)
        if p.startswith("s3://"):
            derived = "s3"
        else:
            derived = next((t for t, var in _DIRS if os.environ.get(var) and _under(p, os.environ[var])), None)
    if derived is None:
        if tier is None:
            where = "no path given" if path is None else f"{os.fspath(path)} is under neither " \
                "$CHAOSBENCH_NVME_DIR nor $CHAOSBENCH_MEMORY_DIR"
            return None, f"tier unknown: {where}; pass tier= (memory, nvme or s3)"
        return tier, None
    if tier is not None and tier != derived:
        return derived, f"path is on {derived}, not the given tier {tier!r}"
    return derived, None
