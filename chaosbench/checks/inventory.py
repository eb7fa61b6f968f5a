"""Inventory of checkpoint files on each node's disk, taken by the runner before teardown.

A checkpoint is a directory holding the data file(s) and a `manifest.json` with `file`, `bytes`
and `sha256` (trainer/checkpoint/fmt.py). We record every file, verify every manifest against its
data, and flag partial/temporary leftovers, so `checkpoints_valid` can judge from the record.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

PARTIAL_MARKERS = (".tmp", "tmp-", ".partial", ".incomplete", "~")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_dir(d: Path) -> tuple[bool | None, str]:
    """(valid, why) for a checkpoint directory; None when it has no manifest to verify against."""
    m = d / "manifest.json"
    if not m.is_file():
        return None, "no manifest.json"
    try:
        man = json.loads(m.read_text())
        data = d / man["file"]
    except (ValueError, KeyError, TypeError, OSError) as e:
        return False, f"unreadable manifest: {e}"
    if not data.is_file():
        return False, f"manifest names missing file {man['file']}"
    if "bytes" in man and data.stat().st_size != int(man["bytes"]):
        return False, f"size {data.stat().st_size} != manifest {man['bytes']}"
    if "sha256" in man and _sha256(data) != man["sha256"]:
        return False, "sha256 mismatch"
    return True, "checksum ok"


def take_inventory(roots: dict[str, tuple[str, Path]]) -> dict:
    """roots: label -> (tier, directory). Returns {'files': [...], 'checkpoints': [...]}."""
    files, ckpts = [], []
    for label, (tier, root) in sorted(roots.items()):
        root = Path(root)
        if not root.is_dir():
            continue
        dirs = set()
        for p in sorted(root.rglob("*")):
            if not p.is_file() or p.name.startswith("fill"):   # fill_nvme's ballast is not a checkpoint
                continue
            rel = str(p.relative_to(root))
            files.append({"node": label, "tier": tier, "path": rel, "bytes": p.stat().st_size,
                          "partial": any(m in p.name.lower() or m in p.parent.name.lower()
                                         for m in PARTIAL_MARKERS)})
            dirs.add(p.parent)
        for d in sorted(dirs):
            valid, why = verify_dir(d)
            ckpts.append({"node": label, "tier": tier, "dir": str(d.relative_to(root)) or ".",
                          "valid": valid, "reason": why})
    return {"files": files, "checkpoints": ckpts}
