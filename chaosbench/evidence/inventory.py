"""Inventory of checkpoint files on each node's disk, taken by the runner before teardown.

A checkpoint is a directory holding its data file(s) and a `manifest.json` (docs/manifest.md),
verified by chaosbench.instrument.manifest, the code the trainers write it with. We record every
file, verify every manifest against its data, and flag partial/temporary leftovers, so
`checkpoints_valid` can judge from the record. Trainers may still be rotating snapshots while we
look: files that vanish mid-walk are skipped, not errors.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from chaosbench.cluster.node.scripts import FILL_FILE
from chaosbench.instrument.manifest import STEP_NAME, is_temporary, step_of, verify_dir

__all__ = ["STEP_NAME", "take_inventory", "verify_dir"]


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
                              "partial": is_temporary(p.name) or is_temporary(str(p.parent.relative_to(root)))})
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
            if is_temporary(rel):
                ckpts.append({"node": label, "tier": tier, "dir": rel, "step": step_of(d), "published": False,
                              "valid": None, "reason": "temp leftover of an interrupted write"})
                continue
            valid, why = verify_dir(d)
            if valid is None and why.startswith("removed"):
                continue
            if valid is None and not any(d.iterdir() if d.is_dir() else ()):
                why = "empty published directory"
            ckpts.append({"node": label, "tier": tier, "dir": rel, "step": step_of(d), "published": True,
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
