"""The harness's side of the NFQUEUE handler (node/nfqueue.py): start it on a node, wait until it has
bound its queue (only then do DEGRADE_LINK's rules send it packets), and reap its handle at restore.
RESTORE_LINK stops the handler itself, inside the node, so a harness that died cannot leave one running
unseen: the next restore, and LINK_LEFT's check, find it by its pid file and its bound queue."""
from __future__ import annotations

import json
import subprocess
import time

from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.node import scripts

BIND_TIMEOUT_S = 20.0


def _handles(cluster) -> dict[str, subprocess.Popen]:
    return cluster.__dict__.setdefault("_nfqueues", {})


def start(cluster, node: str, effects: dict) -> str:
    """Start the handler on `node` with `effects` (delay_ms, jitter_ms, duplicate_pct, corrupt_pct,
    reorder_pct); the queue number once it is bound. Raises ClusterError if it exits or never binds."""
    queue = str(scripts.NFQUEUE_NUM)
    proc = cluster._start_in_node(node, scripts.NFQUEUE, "chaosbench-nfqueue", queue, scripts.NFQUEUE_PIDFILE,
                                  json.dumps(effects, sort_keys=True))
    _handles(cluster)[node] = proc
    deadline = time.monotonic() + BIND_TIMEOUT_S
    while True:
        try:
            cluster._run_in_node(node, scripts.NFQUEUE_BOUND, queue, timeout=30)
            return queue
        except ClusterError:
            pass
        if proc.poll() is not None:
            raise ClusterError(f"{node}: the NFQUEUE handler exited ({proc.returncode}) before binding queue {queue} "
                               f"(its output: logs/{node}-nfqueue.log)")
        if time.monotonic() > deadline:
            raise ClusterError(f"{node}: the NFQUEUE handler did not bind queue {queue} within {BIND_TIMEOUT_S:g} s")
        time.sleep(0.2)


def reap(cluster, node: str) -> None:
    """After RESTORE_LINK stopped the handler in the node: wait for our handle on it (docker exec, srun).
    Raises ClusterError if the handler had failed on its own: from then on packets bypassed it
    (--queue-bypass) and the fault's effects had silently stopped."""
    proc = _handles(cluster).pop(node, None)
    if proc is None:
        return
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    if proc.returncode not in STOPPED:
        raise ClusterError(f"{node}: the NFQUEUE handler failed during the fault (exit {proc.returncode}); the "
                           f"delay / jitter / duplicate / corrupt / reorder stopped then (logs/{node}-nfqueue.log)")


# how the handler (or its docker exec / srun) ends when restore stops it: SIGTERM handled (0), SIGKILL after
# 5 s (137 through docker exec, -9 as a child here), our own kill of a hung handle (-9), the node gone (-15)
STOPPED = {0, 137, -9, -15, 143}
