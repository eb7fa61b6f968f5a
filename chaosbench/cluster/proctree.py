"""Find and signal a local node's processes, whatever session they moved to.

torchrun starts each worker in its own session, so killing the agent's process group misses the
workers (they live on as orphans). Every process of a node inherits marker variables from the
launcher, so scanning /proc/*/environ finds the whole node — agent, workers, their children. Also the
two readings of a process the local and Slurm backends start here: a launcher's status and an
in-node command's result.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

from chaosbench.cluster.errors import ClusterError


def _environ(pid: int) -> dict[bytes, bytes] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return dict(kv.split(b"=", 1) for kv in raw.split(b"\0") if b"=" in kv)


def find(markers: dict[str, str]) -> list[int]:
    """PIDs whose environment contains every KEY=VALUE in markers (never this process)."""
    want = {k.encode(): v.encode() for k, v in markers.items()}
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        env = _environ(int(name))
        if env and all(env.get(k) == v for k, v in want.items()):
            found.append(int(name))
    return found


def find_with_key(key: str) -> dict[int, str]:
    """pid -> value for every process that has `key` in its environment."""
    k, out = key.encode(), {}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            env = _environ(int(name))
            if env and k in env:
                out[int(name)] = env[k].decode(errors="replace")
    return out


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def kill_all(markers: dict[str, str], timeout: float = 10.0) -> list[int]:
    """SIGKILL every matching process (repeatedly: a dying agent may still be forking) until none is left."""
    deadline, killed = time.monotonic() + timeout, set()
    while True:
        pids = [p for p in find(markers) if not zombie(p)]
        if not pids:
            return sorted(killed)
        signal_all(pids, signal.SIGCONT)   # a stopped process still dies on SIGKILL, but be explicit
        signal_all(pids, signal.SIGKILL)
        killed.update(pids)
        if time.monotonic() > deadline:
            return sorted(killed)
        time.sleep(0.05)


def zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] == b"Z"
    except OSError:
        return True


def launcher_status(proc: subprocess.Popen | None) -> str | None:
    """node_status of a node run by a launcher process here: 'absent', 'exited:<code>', or None while it runs."""
    if proc is None:
        return "absent"
    code = proc.poll()
    return None if code is None else f"exited:{code}"


def completed(argv: list[str], proc: subprocess.CompletedProcess, where: str) -> str:
    """stdout of a finished in-node command, or ClusterError with its stderr."""
    if proc.returncode != 0:
        raise ClusterError(f"{where}: {' '.join(argv[:2])[:80]} ... failed ({proc.returncode}): "
                           f"{(proc.stderr or '').strip()[-500:]}")
    return proc.stdout
