"""A Slurm run's directories on a compute host: private, never another user's, removed at the end.

A compute host outlives the job, and its /dev/shm and $CHAOSBENCH_SLURM_SCRATCH are shared by every user
of the host, while the run's directory name (`chaosbench-<project>`) is public from the moment the job is
submitted (it is the job's name in squeue). A directory of that name another user created first would
hand them the run's checkpoints and events (or let them plant files and links in them). So:

    python -c <this file> make BASE REL [BASE REL ...] [-- COMMAND ...]

creates BASE/REL one directory at a time, the first part of REL (`chaosbench-<project>`) mode 0700, and
refuses (exit 2, naming the directory and why) when one already exists and is a link, not a directory,
not ours, or (the first part) open to anyone else; below a private first part nobody else can reach.
Then it execs COMMAND (the node's launcher, the event stream, the services). BASE itself (/dev/shm, the
site's scratch) is the site's and is not judged.

    python -c <this file> remove BASE REL [BASE REL ...]

removes BASE/REL when it is a directory of ours (not through a link) and prints `removed PATH` or
`kept PATH: why`: the teardown and the sweep of a dead harness's job run it on every host of the job.

Stdlib only: it runs with the nodes' python, from any working directory.
"""
from __future__ import annotations

import os
import shutil
import socket
import stat
import sys

REFUSED = 2


def problem(path: str, first: bool, lstat=os.lstat) -> str | None:
    """Why `path` (which exists) may not be used (None: it may). `first`: the run's own top directory,
    which must be private; deeper ones only ours."""
    st = lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not by this job's uid {os.geteuid()}"
    if first and st.st_mode & 0o077:
        return f"is open to other users (mode {stat.S_IMODE(st.st_mode):04o}; ours are 0700)"
    return None


def parts(rel: str) -> list[str]:
    names = [p for p in rel.split("/") if p not in ("", ".")]
    if not names or ".." in names:
        raise ValueError(f"{rel!r}: a relative path below the base, without '..'")
    return names


def make(base: str, rel: str, lstat=os.lstat) -> str:
    """BASE/REL, created or checked one directory at a time; PermissionError names the one refused."""
    path = base
    for i, name in enumerate(parts(rel)):
        path = os.path.join(path, name)
        try:
            os.mkdir(path, 0o700)   # the umask can only narrow it
        except FileExistsError:
            pass
        why = problem(path, i == 0, lstat)
        if why:
            raise PermissionError(f"refusing to use {path}: it {why}. It was not created by this run; remove it "
                                  f"or point CHAOSBENCH_SLURM_SCRATCH at a directory of your own")
    return path


def remove(base: str, rel: str) -> str:
    """Remove BASE/REL if it is ours; what happened, as one line."""
    path = os.path.join(base, *parts(rel))
    try:
        why = problem(path, False)
    except FileNotFoundError:
        return f"absent {path}"
    if why:
        return f"kept {path}: it {why}"
    shutil.rmtree(path)   # never follows links inside (fd-based on Linux)
    return f"removed {path}"


def _pairs(args: list[str]) -> list[tuple[str, str]]:
    if not args or len(args) % 2:
        raise SystemExit(f"node_dirs: give BASE REL pairs, got {args!r}")
    return list(zip(args[::2], args[1::2]))


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("make", "remove"):
        raise SystemExit("usage: node_dirs make BASE REL [BASE REL ...] [-- COMMAND ...] | remove BASE REL ...")
    rest = argv[1:]
    command = rest[rest.index("--") + 1:] if "--" in rest else []
    pairs = _pairs(rest[:rest.index("--")] if "--" in rest else rest)
    host = socket.gethostname()
    if argv[0] == "remove":
        failed = 0
        for base, rel in pairs:
            try:
                print(f"{host}: {remove(base, rel)}", flush=True)
            except OSError as exc:
                print(f"{host}: not removed {os.path.join(base, rel)}: {exc}", flush=True)
                failed = 1
        return failed
    try:
        for base, rel in pairs:
            make(base, rel)
    except (OSError, ValueError) as exc:   # PermissionError says which directory and why; others name the path
        print(f"chaosbench on {host}: {exc}", file=sys.stderr, flush=True)
        return REFUSED
    if command:
        os.execvp(command[0], command)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
