"""Who started a cluster, and whether that process still lives.

Everything a backend starts is tagged with this process's owner token (docker labels, an env var
inherited by local processes, a file next to loop mounts). A later sweep removes what belongs to a
dead owner only, so parallel runs (pytest-xdist) never reap each other.
"""
from __future__ import annotations

import os
import socket

OWNER_ENV = "CHAOSBENCH_OWNER"


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # comm may contain spaces/parens: fields after the last ')' are fixed; starttime is field 22.
    return stat[stat.rindex(b")") + 2:].split()[19].decode()


def token(pid: int | None = None) -> str:
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid)}"


def alive(owner: str) -> bool:
    """True if the owner process still runs. Tokens from another host count as alive (not ours to reap)."""
    try:
        host, pid, start = owner.rsplit(":", 2)
        pid_i = int(pid)
    except ValueError:
        return False
    if host != socket.gethostname():
        return True
    return _start_time(pid_i) == start
