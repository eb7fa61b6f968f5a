"""memory_pressure on docker: a node's memory squeezed through its cgroup, read back from its cgroup.

The node gets `limit_mb` MiB. A limit below what the processes hold is refused on cgroup v1
(measured with docker 20.10: runc reclaims the page cache, then fails with "unable to set memory
limit to ... (current usage: ...)"). So the limit goes to what the node uses now plus HEADROOM_MB,
and a ballast takes the rest: a memfd (shared memory in no process's RSS) written by a small process
in the node until the processes have `limit_mb` left. Writing it makes the kernel reclaim, then
OOM-kill the task with the largest RSS: the worker, which holds the model and optimizer on top of
everything its warm-start server forked it with; the ballast is never the victim while a bigger
process of its oom_score_adj is left (the workers and the ballast get 1000: BALLAST below). At that
first kill the ballast leaves, so the restarted worker fits under the limit (usage + HEADROOM_MB)
that stays until release, which restores the container's own limits. The in-node scripts read
cgroup v2's files too (memory.current, memory.events); v2 is not measured here.
"""
from __future__ import annotations

import json
import time

from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.docker.cli import docker

BALLAST_MARK = "chaosbench-ballast"   # in the ballast's argv: release finds it by this word only
HEADROOM_MB = 64                      # above the usage read, so the kernel accepts the limit

# `chaosbench-ballast <mb>`: write <mb> MiB of memfd pages; leave (freeing them) at the first OOM kill
# of the node's cgroup, so the restarted worker fits again; otherwise hold them until killed. It writes
# as fast as it can: a slow ballast lets the kernel trade the processes' code pages back and forth
# (measured: a node thrashing for 15 s, its agent missing its etcd lease, before any kill). It leaves
# within a millisecond of the kill: the kernel frees a many-threaded victim's memory a few ms later,
# and a ballast still charging then got a second process killed (measured: the warm-start server).
# The watcher thread ends a write blocked in the kernel; the main thread also checks between chunks,
# because on loaded cores the watcher was not scheduled in time and the writes went on charging
# (measured: the agent killed 11 ms after the worker). A chunk of 256 KiB bounds the charge after a kill.
# That still happened in a later CI, so the kernel's choice of a second victim is settled too: the
# workers' processes (pids after <mb>) and the ballast get oom_score_adj 1000 (raising needs no
# privilege; lowering the agent's would need CAP_SYS_RESOURCE). The worker, far larger, still goes
# first; a second kill then takes the ballast, whose death frees the memfd, never the agent.
BALLAST = f"""
import os, sys, threading, time
for pid in sys.argv[3:] + ['self']:
    try:
        with open(f'/proc/{{pid}}/oom_score_adj', 'w') as f:
            f.write('1000')
    except OSError:
        pass
def kills():
    for path in ('/sys/fs/cgroup/memory/memory.oom_control', '/sys/fs/cgroup/memory.events'):
        try:
            return dict(l.split()[:2] for l in open(path)).get('oom_kill')
        except OSError:
            pass
def leave_at_first_kill(before):   # os._exit also ends a write waiting in the kernel for memory
    while kills() == before:
        time.sleep(0.001)
    os._exit(0)
before = kills()
threading.Thread(target=leave_at_first_kill, args=(before,), daemon=True).start()
fd, left = os.memfd_create({BALLAST_MARK!r}), int(sys.argv[2]) << 20
chunk = bytes(256 << 10)
while left > 0:
    left -= os.write(fd, chunk[:left])
    if kills() != before:
        os._exit(0)
threading.Event().wait()
"""

# no arguments: SIGKILL every ballast of the node
RELEASE = f"""
import os, signal
for p in filter(str.isdigit, os.listdir('/proc')):
    try:
        if {BALLAST_MARK!r}.encode() in open(f'/proc/{{p}}/cmdline', 'rb').read().split(b'\\0')[1:]:
            os.kill(int(p), signal.SIGKILL)
    except OSError:
        pass
"""

# no arguments: the cgroup's memory figures as JSON, v1 or v2 (MiB; oom_kill is a count)
READ = """
import json, os
v1 = '/sys/fs/cgroup/memory/'
def kv(path):
    try:
        return {k: int(v) for k, v in (l.split()[:2] for l in open(path) if len(l.split()) >= 2)}
    except OSError:
        return {}
if os.path.exists(v1 + 'memory.stat'):
    st, usage, oom = kv(v1 + 'memory.stat'), int(open(v1 + 'memory.usage_in_bytes').read()), kv(v1 + 'memory.oom_control')
    held = st.get('total_rss', st.get('rss', 0)) + st.get('total_shmem', st.get('shmem', 0))
else:
    st, oom = kv('/sys/fs/cgroup/memory.stat'), kv('/sys/fs/cgroup/memory.events')
    usage, held = int(open('/sys/fs/cgroup/memory.current').read()), st.get('anon', 0) + st.get('shmem', 0)
print(json.dumps({'usage_mb': usage >> 20, 'held_mb': held >> 20, 'oom_kill': oom.get('oom_kill')}))
"""


def parse_read(out: str) -> dict:
    """READ's output: {'usage_mb', 'held_mb', 'oom_kill' (None where the kernel keeps no count)}."""
    lines = out.strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


def plan(limit_mb: int, usage_mb: int) -> tuple[int, int]:
    """(the cgroup limit to set, the ballast to write), both MiB: the processes keep limit_mb."""
    cgroup = max(limit_mb, usage_mb + HEADROOM_MB)
    return cgroup, cgroup - limit_mb


def squeeze(cluster, node: str, limit_mb: int | None, fraction: float | None) -> dict:
    """DockerCluster.squeeze_memory: what it set, and the node's figures at that moment."""
    container = cluster._node(node)
    host = json.loads(docker("inspect", "-f", "{{json .HostConfig}}", container))
    seen = parse_read(docker("exec", container, "python", "-c", READ))
    limit = limit_mb if limit_mb is not None else int(fraction * seen["held_mb"])
    if limit < 8:
        raise ClusterError(f"squeeze_memory {node}: a limit of {limit} MiB (fraction {fraction} of "
                           f"{seen['held_mb']} MiB) is below docker's minimum; raise it")
    cgroup_mb, ballast_mb = plan(limit, seen["usage_mb"])
    docker("update", "--memory", f"{cgroup_mb}m", "--memory-swap", f"{cgroup_mb}m", container)
    cluster._squeezed[node] = {"memory": host.get("Memory") or 0, "swap": host.get("MemorySwap") or 0,
                               "oom_kill": seen["oom_kill"], "since": time.time(),
                               "incarnation": cluster._incarnation(node)}
    if ballast_mb:
        docker("exec", "-d", container, "python", "-c", BALLAST, BALLAST_MARK, str(ballast_mb),
               *_worker_pids(cluster, node))
    return {"limit_mb": limit, "cgroup_mb": cgroup_mb, "ballast_mb": ballast_mb, **seen}


def _worker_pids(cluster, node: str) -> list[str]:
    """Every local rank's worker processes on the node now (none found: the ballast still runs)."""
    found = []
    for rank in range(cluster.spec.procs_per_node):
        try:
            found += cluster._signal_worker(node, rank, "0")
        except ClusterError:
            pass
    return found


def _same_node(cluster, node: str, saved: dict) -> bool:
    """The squeezed container still runs, not a restarted one (whose cgroup counts afresh)."""
    return cluster.node_status(node) == "running" and cluster._incarnation(node) == saved["incarnation"]


def _kills_since(container: str, saved: dict) -> int | None:
    now = parse_read(docker("exec", container, "python", "-c", READ, check=False) or "{}")
    if isinstance(now.get("oom_kill"), int) and isinstance(saved["oom_kill"], int) and now["oom_kill"] >= saved["oom_kill"]:
        return now["oom_kill"] - saved["oom_kill"]
    return None


def kills(cluster, node: str) -> int | None:
    """DockerCluster.memory_kills: the cgroup's OOM kills since the squeeze, while it holds."""
    saved = cluster._squeezed.get(node)
    if saved is None or not _same_node(cluster, node, saved):
        return None
    return _kills_since(cluster._node(node), saved)


def release(cluster, node: str) -> dict:
    """DockerCluster.release_memory: the ballast gone, the container's own limits back, and the OOM
    kills since the squeeze (the cgroup's count; None when it cannot be read, e.g. the node restarted)
    with docker's own `oom` events as a second witness."""
    saved = cluster._squeezed.pop(node, None)
    if saved is None:
        return {"oom_kills": None}
    container = cluster._node(node)
    kills = None
    if _same_node(cluster, node, saved):
        docker("exec", container, "python", "-c", RELEASE, check=False)
        kills = _kills_since(container, saved)
    memory, swap = saved["memory"], saved["swap"]
    if memory <= 0:   # docker 20.10 refuses -1 and ignores 0: the host's memory is as good as no limit
        memory = int(docker("info", "--format", "{{.MemTotal}}").strip())
    docker("update", "--memory", str(memory), "--memory-swap", str(swap if swap > 0 else memory), container)
    if swap < 0:
        docker("update", "--memory-swap", "-1", container)
    events = docker("events", "--since", f"{saved['since']:.3f}", "--until", f"{time.time():.3f}",
                    "--filter", f"container={container}", "--filter", "event=oom", "--format", "{{.Time}}",
                    check=False, timeout=30)
    return {"oom_kills": kills, "docker_oom_events": len(events.split())}
