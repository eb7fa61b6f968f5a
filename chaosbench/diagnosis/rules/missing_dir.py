"""A save into a directory that does not exist (torch.save does not create parents)."""
from __future__ import annotations

from ..model import Finding
from ..record import RunRecord
from ._paths import MISSING, path_of


def check(rec: RunRecord) -> list[Finding]:
    hits = []
    for node in sorted(rec.logs):
        for e in rec.errors(node):
            p = path_of(e.text)
            if p and MISSING.search(e.text) and ("Parent directory" in e.text or "checkpoint" in p.lower()
                                                  or "ckpt" in p.lower() or p.endswith((".pt", ".pth", ".ckpt"))):
                hits.append((e, p))
    if not hits:
        return []
    e, p = hits[0]
    parent = p if "Parent directory" in e.text else p.rsplit("/", 1)[0] or p
    nodes = sorted({x.node for x, _ in hits})
    sub = parent.split("/checkpoints/", 1)[1] if "/checkpoints/" in parent else None
    make = (f"os.makedirs(os.path.join(os.environ['CHAOSBENCH_CHECKPOINT_DIR'], {sub!r}), exist_ok=True)" if sub
            else f"os.makedirs({parent!r}, exist_ok=True)")
    return [Finding(
        rule="checkpoint_dir_missing",
        title=f"The job saves into {parent}, which does not exist ({len(hits)} failed save(s) on "
              f"{', '.join(nodes)}).",
        fix=f"create the directory before the first save: `{make}` (chaosbench creates "
            "$CHAOSBENCH_CHECKPOINT_DIR itself, not the subdirectories a job adds)",
        effect="the first save succeeds instead of every restart failing on it",
        evidence=[x.evidence() for x, _ in hits[:3]], severity="cause")]
