"""Find and signal one node's worker processes, from inside the node (stdlib only).

Shipped as the source of `python -c` by every backend (scripts.PROCS), and imported by the tests:

    python -c SRC workers <SIG> <LOCAL_RANK> [KEY=VALUE ...]   signal one local rank's worker; print its pids
                                                               (SIG 0: only list them)
    python -c SRC node <SIG> [KEY=VALUE ...]                   signal every process of the node; print their pids
    python -c SRC throttle <FRACTION> [KEY=VALUE ...]          run the node FRACTION of the time until SIGTERM

A worker is a process torchrun gave LOCAL_RANK (the agent has none) whose environment also holds every
KEY=VALUE marker naming the node. With the reference trainer's warm start, torchrun's worker is a thin
client and the training process is forked by a node-local server: the fork's /proc/environ is the
server's, but it holds a pidfd of its client, which names it. A process that holds a pidfd of its own
descendant is a launcher watching its child (asyncio's pidfd child watcher does so), never a fork: a
fork is not an ancestor of its client. Children of either (data loaders) go with them, so "the worker"
is the whole subtree a rank's training runs in, never the agent.
"""
from __future__ import annotations

import os
import signal
import sys
import time


def environ(pid: int) -> dict[bytes, bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    return dict(kv.split(b"=", 1) for kv in raw.split(b"\0") if b"=" in kv)


def pids() -> list[int]:
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]


def parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def pidfd_targets(pid: int) -> set[int]:
    """The processes `pid` holds a pidfd of (fdinfo's `Pid:` line)."""
    out = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:[pidfd]":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                out.update(int(line.split()[1]) for line in f if line.startswith("Pid:"))
        except (OSError, ValueError, IndexError):
            continue
    return out


def ancestors(pids_: set[int]) -> set[int]:
    out: set[int] = set()
    for pid in pids_:
        up = parent(pid)
        while up > 1 and up not in out:
            out.add(up)
            up = parent(up)
    return out


def subtree(roots: set[int], everyone: list[int]) -> set[int]:
    found, parents = set(roots), {p: parent(p) for p in everyone}
    grew = True
    while grew:
        more = {p for p, pp in parents.items() if pp in found and p not in found}
        found |= more
        grew = bool(more)
    return found


def marked(markers: dict[bytes, bytes], everyone: list[int]) -> set[int]:
    return {p for p in everyone if (env := environ(p)) and all(env.get(k) == v for k, v in markers.items())}


def node(markers: dict[str, str]) -> list[int]:
    """Every process of the node: launcher, agent, workers (warm-start forks included), their children."""
    everyone = pids()
    roots = marked({k.encode(): v.encode() for k, v in markers.items()}, everyone)
    return sorted(subtree(roots, everyone))


def workers(local_rank: int, markers: dict[str, str]) -> list[int]:
    """The pids of one local rank's worker on this node (see the module doc)."""
    want = {b"LOCAL_RANK": str(local_rank).encode(), **{k.encode(): v.encode() for k, v in markers.items()}}
    everyone = pids()
    roots = marked(want, everyone)
    holders = {p for p in everyone if p not in roots and pidfd_targets(p) & roots}
    roots |= holders - ancestors(roots)   # warm-start forks; a launcher watching its own child is not one
    return sorted(subtree(roots, everyone))


def signal_all(targets: list[int], sig: int) -> list[int]:
    hit = []
    for pid in targets:
        try:
            os.kill(pid, sig)
            hit.append(pid)
        except ProcessLookupError:
            pass
    return hit


def throttle(fraction: float, markers: dict[str, str], period: float = 0.1, rescan: int = 10) -> None:
    """A SIGCONT/SIGSTOP duty cycle over the node's processes: running `fraction` of every `period`,
    where no cgroup CPU quota can be set. The node's process list is re-read every `rescan` periods
    (restarted workers); SIGTERM/SIGINT end it, and the node is left running."""
    stopping = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stopping.append(1))
    targets: list[int] = []
    try:
        n = 0
        while not stopping:
            if n % rescan == 0:
                targets = node(markers)
            n += 1
            signal_all(targets, signal.SIGCONT)
            time.sleep(fraction * period)
            if fraction < 1 and not stopping:
                signal_all(targets, signal.SIGSTOP)
                time.sleep((1 - fraction) * period)
    finally:
        signal_all(sorted(set(targets) | set(node(markers))), signal.SIGCONT)


def main(argv: list[str]) -> int:
    if not (len(argv) >= 3 and argv[0] == "workers" or len(argv) >= 2 and argv[0] in ("node", "throttle")):
        print("usage: workers <SIG> <LOCAL_RANK> [KEY=VALUE ...] | node <SIG> [KEY=VALUE ...] | "
              "throttle <FRACTION> [KEY=VALUE ...]", file=sys.stderr)
        return 2
    if argv[0] == "throttle":
        throttle(float(argv[1]), dict(a.split("=", 1) for a in argv[2:]))
        return 0
    sig = 0 if argv[1] == "0" else getattr(signal, f"SIG{argv[1]}")
    if argv[0] == "node":
        targets = node(dict(a.split("=", 1) for a in argv[2:]))
    else:
        targets = workers(int(argv[2]), dict(a.split("=", 1) for a in argv[3:]))
    for pid in signal_all(targets, sig):
        print(pid)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
