"""Which process listens on a TCP port: /proc/net/tcp{,6} for the socket inode, /proc/*/fd for its owner.

The same thing `lsof -i :29500` / `ss -ltnp` shows, without needing either tool in the image.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

LISTEN = "0A"


@dataclass
class Holder:
    pid: int | None          # None: the socket exists but its owner is not visible (other namespace, no permission)
    cmdline: str
    inode: int

    def describe(self) -> str:
        return f"pid {self.pid} ({self.cmdline})" if self.pid else f"an unidentified process (socket inode {self.inode})"


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[int]:
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == LISTEN and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(int(f[9]))
    return inodes


def cmdline(pid: int, proc: Path = Path("/proc")) -> str:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200] or "?"


def port_holders(port: int, proc: Path = Path("/proc")) -> list[Holder]:
    inodes = listening_inodes(port, proc)
    if not inodes:
        return []
    targets = {f"socket:[{i}]": i for i in inodes}
    found: dict[int, Holder] = {}
    for pid_dir in proc.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            fds = list((pid_dir / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link in targets and targets[link] not in found:
                found[targets[link]] = Holder(int(pid_dir.name), cmdline(int(pid_dir.name), proc), targets[link])
    return list(found.values()) + [Holder(None, "?", i) for i in inodes - set(found)]


def ancestors(pid: int | None = None, proc: Path = Path("/proc")) -> set[int]:
    pid, seen = pid or os.getpid(), set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            stat = (proc / str(pid) / "stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return seen


def is_local_address(ip: str) -> bool:
    """True if this host owns `ip` (binding to it succeeds), the test the kernel itself applies."""
    fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
    try:
        with socket.socket(fam, socket.SOCK_DGRAM) as s:
            s.bind((ip, 0))
        return True
    except OSError:
        return False
