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
import re
import time
import zlib
from pathlib import Path

from chaosbench.cluster.base import FILL_FILE

PARTIAL_MARKERS = (".tmp", "tmp-", ".partial", ".incomplete", "~")
STEP_NAME = re.compile(r"step[-_]?0*(\d+)$")


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


def _step_of(d: Path) -> int | None:
    """The step a checkpoint directory holds: its manifest's `step`, else the number in its name."""
    try:
        man = json.loads((d / "manifest.json").read_text())
        if isinstance(man, dict) and isinstance(man.get("step"), int):
            return man["step"]
    except (OSError, ValueError):
        pass
    m = STEP_NAME.search(d.name)
    return int(m.group(1)) if m else None


def _is_partial(name: str) -> bool:
    return any(m in name.lower() for m in PARTIAL_MARKERS)


def take_inventory(roots: dict[str, tuple[str, Path]], unseen: dict[str, tuple[str, str]] | None = None,
                   s3: dict | None = None) -> dict:
    """roots: label -> (tier, directory); unseen: label -> (tier, why) for directories the caller
    could not locate; s3: an `s3_inventory` result. Returns {'taken_at', 'files', 'checkpoints',
    'unseen'}. A checkpoint is every directory that holds files, or is named like a step
    (`step-00000040`, also when empty); it is published unless its path under the root carries a
    temp marker (`.tmp-step-…`), whatever stray files it holds."""
    started = time.time()   # a checkpoint logged after this may have been missed by the walk
    files, ckpts, looked = [], [], []
    missing = [{"node": label.split("/")[0], "tier": tier, "reason": why} for label, (tier, why) in
               sorted((unseen or {}).items())]
    for label, (tier, root) in sorted(roots.items()):
        root = Path(root)
        if not root.is_dir():
            missing.append({"node": label.split("/")[0], "tier": tier, "reason": f"{root} does not exist"})
            continue
        looked.append(label)
        dirs, errors = set(), []
        for dirpath, subdirs, names in os.walk(root, onerror=errors.append):   # vanished dirs are skipped
            here = Path(dirpath)
            if STEP_NAME.search(here.name) and here != root:
                dirs.add(here)                                 # seen even when empty
            for name in sorted(names):
                p = here / name
                if name == FILL_FILE:                          # fill_nvme's ballast is not a checkpoint
                    continue
                try:
                    size = p.stat().st_size
                except FileNotFoundError:                      # rotated away while we looked
                    continue
                files.append({"node": label, "tier": tier, "path": str(p.relative_to(root)), "bytes": size,
                              "partial": _is_partial(p.name) or _is_partial(str(p.parent.relative_to(root)))})
                if here != root:
                    dirs.add(here)
        for err in errors:
            if not isinstance(err, FileNotFoundError):
                missing.append({"node": label.split("/")[0], "tier": tier,
                                "reason": f"could not read {err.filename}: {err.strerror}"})
                if label in looked:
                    looked.remove(label)
        for d in sorted(dirs):
            rel = str(d.relative_to(root))
            if _is_partial(rel):
                ckpts.append({"node": label, "tier": tier, "dir": rel, "step": _step_of(d), "published": False,
                              "valid": None, "reason": "temp leftover of an interrupted write"})
                continue
            valid, why = verify_dir(d)
            if valid is None and why.startswith("removed"):
                continue
            if valid is None and not any(d.iterdir() if d.is_dir() else ()):
                why = "empty published directory"
            ckpts.append({"node": label, "tier": tier, "dir": rel, "step": _step_of(d), "published": True,
                          "valid": valid, "reason": why})
    if s3 is not None:
        files += s3.get("files", [])
        ckpts += s3.get("checkpoints", [])
        missing += s3.get("unseen", [])
        if not s3.get("unseen"):
            looked.append("s3/s3")
    # looked: the node/tier directories walked whole (an absent checkpoint there is evidence of absence)
    return {"started_at": started, "taken_at": time.time(), "files": files, "checkpoints": ckpts,
            "unseen": missing, "looked": looked}
