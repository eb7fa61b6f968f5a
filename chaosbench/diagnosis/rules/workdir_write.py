"""A job writing into its working directory, which chaosbench mounts read-only on docker (and which a
cluster's shared project directory often is): every save fails, on every restart."""
from __future__ import annotations

from ..model import Finding
from ..record import RunRecord
from ._paths import READ_ONLY, path_of

WORKDIR_IN_NODE = "/workspace"


def _in_workdir(path: str, workdir: str | None) -> bool:
    if not path.startswith("/"):
        return True                                   # relative: under the job's cwd, its workdir
    return path.startswith(WORKDIR_IN_NODE + "/") or bool(workdir) and path.startswith(workdir.rstrip("/") + "/")


def check(rec: RunRecord) -> list[Finding]:
    if not rec.user_job:
        return []
    workdir = rec.trainer.get("workdir")
    hits = []
    for node in sorted(rec.logs):
        for e in rec.errors(node):
            p = path_of(e.text)
            if READ_ONLY.search(e.text) and p and _in_workdir(p, workdir):
                hits.append((e, p))
            elif p is None and "Read-only file system" in e.text:
                # torch.save names no path ("open file failed with strerror: Read-only file system"); every
                # directory chaosbench gives a job is writable, the workdir is the read-only one
                hits.append((e, None))
    if not hits:
        return []
    e, p = hits[0]
    nodes = sorted({x.node for x, _ in hits})
    return [Finding(
        rule="write_to_workdir",
        title=(f"The job writes {p!r} into its working directory" if p else
               "The job writes into a read-only file system: its working directory (every directory chaosbench "
               "gives a job is writable)") + f", which is not writable here ({len(hits)} failed write(s) on "
              f"{', '.join(nodes)}).",
        fix="write checkpoints and outputs under $CHAOSBENCH_CHECKPOINT_DIR (e.g. trainer.args: [\"--ckpt-dir\", "
            "\"$CHAOSBENCH_CHECKPOINT_DIR\"]); the project directory is mounted read-only on docker",
        effect="the save succeeds on every node and node faults reach the checkpoints",
        evidence=[x.evidence() for x, _ in hits[:3]], severity="cause")]
