"""Size-limited, persistent "NVMe" disks: an ext4 image file loop-mounted on the host.

A node's NVMe must really fill (ENOSPC), survive a container restart and be visible from the host
(corruption faults). A tmpfs has a size limit but dies with the container; a docker volume has no
size limit. A loop-mounted ext4 file has all three, at the price of needing root. Each disk lives
under ROOT/<project>/<node>/ with an `owner` file, so a sweep can unmount disks of dead owners.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from chaosbench.cluster import owner as owner_mod
from chaosbench.cluster.errors import ClusterError

ROOT = Path(os.environ.get("CHAOSBENCH_DISK_ROOT", "/var/tmp/chaosbench-disks"))


def supported() -> str | None:
    """None if loop disks can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root (loop mount)"
    for tool in ("mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    return None


def create(project: str, node: str, size_mb: int) -> Path:
    d = ROOT / project / node
    mnt, img = d / "mnt", d / "disk.img"
    (ROOT / project).mkdir(parents=True, exist_ok=True)
    (ROOT / project / "owner").write_text(owner_mod.token())
    mnt.mkdir(parents=True, exist_ok=True)
    with open(img, "wb") as f:
        f.truncate(size_mb * 1024 * 1024)
    # -m 0: no blocks reserved for root, so the container (root) sees ENOSPC at the stated size.
    for cmd in (["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0", str(img)],
                ["mount", "-o", "loop,noatime", str(img), str(mnt)]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise ClusterError(f"NVMe disk for {node}: {' '.join(cmd)} failed: {r.stderr.strip()}")
    (mnt / "lost+found").rmdir()
    return mnt


def _mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == target for line in f)


def mounted(project: str) -> bool:
    return any(_mounted(m) for m in (ROOT / project).glob("*/mnt"))


def stale_loops(everything: bool = False) -> list[str]:
    """Detach loop devices still backed by one of our images whose disk is no longer mounted (a
    harness killed between mount and umount -d); returns the devices detached."""
    if shutil.which("losetup") is None or os.geteuid() != 0:
        return []
    r = subprocess.run(["losetup", "-a"], capture_output=True, text=True, timeout=30)
    out = []
    for line in r.stdout.splitlines():   # /dev/loop3: []: (/var/tmp/chaosbench-disks/<p>/<node>/disk.img)
        dev, _, rest = line.partition(":")
        img = rest[rest.find("(") + 1:rest.rfind(")")].removesuffix(" (deleted)")
        if not img.startswith(str(ROOT) + "/"):
            continue
        project = Path(img).relative_to(ROOT).parts[0]
        if (everything or not mounted(project)) and \
                subprocess.run(["losetup", "-d", dev], capture_output=True, timeout=30).returncode == 0:
            out.append(dev)
    return out


def remove_project(project: str) -> None:
    base = ROOT / project
    if not base.exists():
        return
    for mnt in base.glob("*/mnt"):
        if _mounted(mnt):
            # -d frees the loop device; lazy as a last resort so teardown never hangs on a busy mount.
            if subprocess.run(["umount", "-d", str(mnt)], capture_output=True, timeout=60).returncode:
                subprocess.run(["umount", "-l", "-d", str(mnt)], capture_output=True, timeout=60)
    if not any(_mounted(m) for m in base.glob("*/mnt")):
        shutil.rmtree(base, ignore_errors=True)


def sweep(everything: bool = False) -> list[str]:
    """Remove disks whose owner process is gone (everything=True: all of ours); returns the projects."""
    removed = []
    if not ROOT.exists():
        return removed
    for base in ROOT.iterdir():
        try:
            tok = (base / "owner").read_text().strip()
        except OSError:   # being created right now by another run, or garbage
            if time.time() - base.stat().st_mtime < 60:
                continue
            tok = ""
        if everything or not owner_mod.alive(tok):
            remove_project(base.name)
            removed.append(base.name)
    return removed
