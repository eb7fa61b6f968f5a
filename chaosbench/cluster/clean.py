"""`chaosbench clean`: remove what runs that are gone left behind (or, with everything=True, all of ours).

What is ours: docker containers, networks and volumes labelled with a chaosbench project, processes
carrying CHAOSBENCH_OWNER, shm dirs and loop-mounted NVMe disks with an owner file, libfaketime's
/dev/shm files of the preloaded trees an shm dir lists (clock_skew, local backend), loop devices
backed by our disk images, Slurm jobs named chaosbench-* whose owner (their comment) is gone, where
Slurm's commands are reachable ($CHAOSBENCH_SLURM_LOGIN or sbatch on PATH), with the fault chain and
the run's directories on their hosts (slurm/allocation.py: sweep), Ray jobs on a site's cluster at
$RAY_ADDRESS whose owner (their metadata) is gone, with the run's node-local directories. iptables rules and qdiscs exist only inside node containers' network
namespaces (partition, packet_fault) and go with them, as do the disk layers' FUSE mounts in their
mount namespaces (disk_fault); a layer mounted on this host whose daemon died is unmounted lazily. An owner on another host cannot be checked from here, so a plain clean keeps (and
lists) its things; `--all` removes them too.
"""
from __future__ import annotations

import shutil
import signal
import socket
from pathlib import Path

from chaosbench.cluster import loopfs, proctree

from chaosbench.cluster.node import disk_layer
from chaosbench.cluster import owner as owner_mod

SHM_ROOT = Path("/dev/shm")   # local nodes' memory tier: chaosbench-<project>/<node>, with an owner file
# in that shm dir: "<pid> <start time>" of the root of each libfaketime-preloaded tree the cluster started
CLOCK_ROOTS = "clock-roots"


def note_clock_root(shm_dir: Path, pid: int) -> None:
    """libfaketime names its /dev/shm files by the root of a preloaded tree and leaves them when that
    tree is SIGKILLed; written down here, they go with the shm dir even when the harness is killed too."""
    with open(Path(shm_dir) / CLOCK_ROOTS, "a") as f:
        f.write(f"{pid} {owner_mod._start_time(pid)}\n")


def clock_leftovers(shm_dir: Path) -> list[str]:
    """Remove the libfaketime files of the trees `shm_dir` lists; the paths removed. A pid that is now
    another process (another start time) may own a file of that name: kept."""
    from chaosbench.cluster.node.clock import SHM_FILES
    try:
        lines = (Path(shm_dir) / CLOCK_ROOTS).read_text().splitlines()
    except OSError:
        return []
    gone = []
    for line in lines:
        pid, _, start = line.partition(" ")
        if not pid.isdigit():
            continue
        now = owner_mod._start_time(int(pid))
        if now is not None and now != start:
            continue
        for name in SHM_FILES:
            path = SHM_ROOT / (name % int(pid))
            try:
                path.unlink()
                gone.append(str(path))
            except FileNotFoundError:
                pass
    return gone


def _other_host(tok: str) -> bool:
    return tok.count(":") >= 2 and tok.rsplit(":", 2)[0] != socket.gethostname()


def _docker(everything: bool, removed: dict, kept: list) -> None:
    from chaosbench.cluster.docker.cli import docker_unusable, leftovers, owners, remove_project
    why = docker_unusable()
    if why is not None:
        removed["docker"] = [f"not checked: {why}"]
        return
    for kind in ("containers", "networks", "volumes"):
        removed.setdefault(kind, [])
    for project, tok in owners().items():
        if not everything and owner_mod.alive(tok):
            if _other_host(tok):
                kept.append(f"docker project {project} (owner {tok} on another host)")
            continue
        names = leftovers(project)
        remove_project(project)
        for kind, items in names.items():
            removed.setdefault(kind, []).extend(items)
    from chaosbench.cluster.jobenv.image import sweep as sweep_job_builds
    removed["containers"].extend(sweep_job_builds(everything))   # a job image's build, its harness gone


def sweep_local(everything: bool = False, removed: dict | None = None, kept: list | None = None,
                unowned: bool = False) -> list[int]:
    """SIGKILL processes of dead harnesses (they carry CHAOSBENCH_OWNER) and remove their shm dirs;
    everything=True: of live ones too. An owner on another host is kept (and listed in `kept`).
    Each local cluster start runs it (an shm dir without its owner file yet may be a cluster being
    created: kept), so does `chaosbench clean` (unowned=True: removed). Returns the pids killed."""
    removed = {} if removed is None else removed
    kept = [] if kept is None else kept
    pids = []
    for pid, tok in proctree.find_with_key(owner_mod.OWNER_ENV).items():
        if everything or not owner_mod.alive(tok):
            pids.append(pid)
        elif _other_host(tok):
            kept.append(f"process {pid} (owner {tok} on another host)")
    proctree.signal_all(pids, signal.SIGCONT)
    proctree.signal_all(pids, signal.SIGKILL)
    removed["processes"] = sorted(pids)
    for d in SHM_ROOT.glob("chaosbench-cb*"):
        try:
            tok = (d / "owner").read_text().strip()
        except OSError:
            if not unowned:
                continue
            tok = ""
        if everything or not owner_mod.alive(tok):
            files = clock_leftovers(d)   # before the dir that lists them
            if files:
                removed.setdefault("faketime shm files", []).extend(files)
            shutil.rmtree(d, ignore_errors=True)
            removed.setdefault("shm dirs", []).append(str(d))
        elif _other_host(tok):
            kept.append(f"shm dir {d} (owner {tok} on another host)")
    return sorted(pids)


def _slurm(everything: bool, removed: dict) -> None:
    from chaosbench.cluster.slurm.allocation import sweep
    from chaosbench.cluster.slurm.commands import Slurm, unusable
    if unusable() is not None:
        return   # no Slurm here: nothing of ours can be there
    removed["slurm jobs"] = sweep(Slurm(), everything=everything, removed=removed)


def _ray_address(everything: bool, removed: dict) -> None:
    """A site's Ray cluster at $RAY_ADDRESS: the jobs of harnesses that are gone, by their metadata."""
    from chaosbench.cluster.errors import ClusterError
    from chaosbench.cluster.ray.address import address, sweep
    from chaosbench.cluster.ray.jobs_api import JobsClient
    if address():
        try:
            removed["ray jobs"] = sweep(JobsClient(address()), everything)
        except ClusterError as e:
            removed["ray jobs"] = [f"not checked: {e}"]


def clean(everything: bool = False, docker: bool = True) -> tuple[dict[str, list], list[str]]:
    """(kind -> what was removed, what was kept because its owner may be alive on another host)."""
    removed: dict[str, list] = {}
    kept: list[str] = []
    sweep_local(everything, removed, kept, unowned=True)
    if docker:
        _docker(everything, removed, kept)
    _slurm(everything, removed)
    _ray_address(everything, removed)
    removed["loop disks"] = loopfs.sweep(everything)
    removed["disk layer mounts"] = disk_layer.sweep_dead()   # on the host: a dead daemon's FUSE mount
    removed["loop devices"] = loopfs.stale_loops(everything)
    if loopfs.ROOT.exists() and not everything:
        for base in loopfs.ROOT.iterdir():
            try:
                tok = (base / "owner").read_text().strip()
            except OSError:
                continue
            if _other_host(tok):
                kept.append(f"loop disks {base.name} (owner {tok} on another host)")
    return removed, kept
