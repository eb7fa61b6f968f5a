"""Inventory of checkpoint files on each node's disk, taken by the runner before teardown.

A checkpoint is a directory holding the data file and a `manifest.json` with `bytes` and a
self-describing `checksum` ("crc32:<hex>", "sha256:<hex>" or "blake2b:<hex>"; the data file is
`file` if named, else `state.pt`). We record every file, verify every manifest against its data,
and flag partial/temporary leftovers, so `checkpoints_valid` can judge from the record. Trainers
may still be rotating snapshots while we look: files that vanish mid-walk are skipped, not errors.
"""
from __future__ import annotations

import hashlib
import json
import os
import zlib
from pathlib import Path

PARTIAL_MARKERS = (".tmp", "tmp-", ".partial", ".incomplete", "~")


def _digest(path: Path, algo: str) -> str | None:
    """Streamed digest in the manifest's "<algo>:<hex>" form; None for an algorithm we don't know."""
    if algo == "crc32":
        crc = 0
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                crc = zlib.crc32(chunk, crc)
        return f"crc32:{crc:08x}"
    if algo not in ("sha256", "blake2b"):
        return None
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return f"{algo}:{h.hexdigest()}"


def verify_dir(d: Path) -> tuple[bool | None, str]:
    """(valid, why) for a checkpoint directory; None when it cannot be judged (no manifest, or gone)."""
    m = d / "manifest.json"
    try:
        man = json.loads(m.read_text())
    except FileNotFoundError:
        return (None, "no manifest.json") if d.exists() else (None, "removed while inspected (rotated)")
    except (ValueError, OSError) as e:
        return False, f"unreadable manifest: {e}"
    if not isinstance(man, dict):
        return False, "manifest is not a JSON object"
    data = d / str(man.get("file", "state.pt"))
    expected = man.get("checksum") or (f"sha256:{man['sha256']}" if "sha256" in man else None)
    if not isinstance(expected, str) or ":" not in expected:
        return False, "manifest has no checksum"
    try:
        size = data.stat().st_size
        if "bytes" in man and size != int(man["bytes"]):
            return False, f"size {size} != manifest {man['bytes']}"
        got = _digest(data, expected.split(":", 1)[0])
    except FileNotFoundError:
        return (None, "removed while inspected (rotated)") if not m.exists() else \
            (False, f"manifest names missing file {data.name}")
    if got is None:
        return False, f"unknown checksum algorithm {expected.split(':', 1)[0]!r}"
    if got != expected:
        return False, f"checksum mismatch ({got[:18]} != manifest {expected[:18]})"
    return True, f"{expected.split(':', 1)[0]} checksum ok"


def take_inventory(roots: dict[str, tuple[str, Path]]) -> dict:
    """roots: label -> (tier, directory). Returns {'files': [...], 'checkpoints': [...]}."""
    files, ckpts = [], []
    for label, (tier, root) in sorted(roots.items()):
        root = Path(root)
        if not root.is_dir():
            continue
        dirs = set()
        for dirpath, _, names in os.walk(root):          # os.walk ignores directories that vanish
            for name in sorted(names):
                p = Path(dirpath) / name
                if name.startswith("fill"):              # fill_nvme's ballast is not a checkpoint
                    continue
                try:
                    size = p.stat().st_size
                except FileNotFoundError:                # rotated away while we looked
                    continue
                files.append({"node": label, "tier": tier, "path": str(p.relative_to(root)), "bytes": size,
                              "partial": any(m in p.name.lower() or m in p.parent.name.lower()
                                             for m in PARTIAL_MARKERS)})
                dirs.add(p.parent)
        for d in sorted(dirs):
            valid, why = verify_dir(d)
            if valid is None and why.startswith("removed"):
                continue
            ckpts.append({"node": label, "tier": tier, "dir": str(d.relative_to(root)) or ".",
                          "valid": valid, "reason": why})
    return {"files": files, "checkpoints": ckpts}
