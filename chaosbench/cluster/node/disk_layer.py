"""A FUSE passthrough layer over one of a node's storage tiers, injecting disk faults (disk_fault).

Runs inside the node with the node's python (stdlib + mfusepy only: the harness also ships this file
as an in-node Script). `start` mounts one layer per tier OVER the tier's directory, then execs the
node's command; every later start of the node (kill_node + start_node, kill_all) runs `start` again.
Each layer keeps an fd to the directory underneath, opened before the mount, and serves every
operation relative to it (*at calls), so the job's paths do not change.

Control: <CONTROL_DIR>/<tier>.json (outside the mount; re-read within POLL_S of a change) holds the
active fault, {} for none: {"op": read|write|fsync|open, "errno": "EIO"|"ENOSPC"|"EROFS",
"probability": 0..1, "latency_ms": n, "bitflip_on_read": [paths relative to the tier] | "all"}.
`control` writes it and waits until the layer acknowledges it in <tier>.stats.json (its `gen`, the
control file's mtime_ns), which also counts what the layer did: errors injected per op, delayed ops,
bits flipped.

Writeback mode (--writeback, for kill_node's lose_unsynced_writes): file data written through the
layer is held in the layer's memory until the file is fsynced (fsync/fdatasync) or its oldest
unsynced write is WRITEBACK_S old (the kernel's dirty_expire_centisecs is 30 s); reads and stat see
it. Metadata — create, mkdir, rename, unlink, rmdir, truncate, chmod, utimens — goes through at once,
and fsync of a directory is passed through. So when the node is killed, data never fsynced is gone
while the names stay: a file created, written and renamed without fsync is left empty (the classic
crash result of rename-without-fsync), one written before an fsync keeps exactly what was synced.
"""
from __future__ import annotations

import errno as errno_mod
import json
import os
import random
import signal
import stat
import sys
import threading
import time

CONTROL_DIR = os.environ.get("CHAOSBENCH_DISK_CONTROL", "/run/chaosbench-disk")   # tests point it elsewhere
# (on docker it is in the container's own filesystem: a fault and its counts outlive a restart of the node)
FSNAME = "chaosbench-disk"      # what /proc/mounts shows for a layer: teardown and clean look for it
WRITEBACK_S = 30.0
POLL_S = 0.1
OPS = ("read", "write", "fsync", "open")
ERRNOS = {"EIO": errno_mod.EIO, "ENOSPC": errno_mod.ENOSPC, "EROFS": errno_mod.EROFS}


def control_path(tier: str) -> str:
    return os.path.join(CONTROL_DIR, f"{tier}.json")


def stats_path(tier: str) -> str:
    return os.path.join(CONTROL_DIR, f"{tier}.stats.json")


def _write_json(path: str, doc: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def layer_mounts(where: str = "/proc/self/mounts") -> list[str]:
    """Mount points of our layers (fsname FSNAME) in this mount namespace."""
    try:
        with open(where) as f:
            return [line.split()[1].replace("\\040", " ") for line in f if line.split()[0] == FSNAME]
    except OSError:
        return []


class _Dirty:
    """Data written to one file (by inode) and not yet synced: writes in order, and the size they make."""

    def __init__(self, fd: int, size: int):
        self.fd = os.dup(fd)     # kept until flushed: the kernel also writes back files closed meanwhile
        self.size = size
        self.writes: list[tuple[int, bytes]] = []
        self.since = time.monotonic()

    def overlay(self, data: bytearray, offset: int) -> bytearray:
        end = offset + len(data)
        for off, buf in self.writes:
            lo, hi = max(off, offset), min(off + len(buf), end)
            if lo < hi:
                data[lo - offset:hi - offset] = buf[lo - off:hi - off]
        return data


def _layer_class():
    import mfusepy

    class Layer(mfusepy.Operations):
        use_ns = True

        def __init__(self, root: str, tier: str, writeback: bool, writeback_s: float = WRITEBACK_S):
            self.root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)   # before the mount hides it
            self.tier, self.writeback, self.writeback_s = tier, writeback, writeback_s
            self._mu = threading.Lock()
            self.fault: dict = {}
            self.gen = 0
            self.counts = {"injected": dict.fromkeys(OPS, 0), "delayed": 0, "bitflips": 0, "flushed_bytes": 0}
            self.dirty: dict[int, _Dirty] = {}    # inode -> unsynced data (writeback mode)
            self.ino: dict[int, int] = {}         # open fd -> its inode
            self.rng = random.Random()
            self._stats_due = True
            self._load_counts()
            self._reload()   # a fault set before this start (the node restarted) holds from the first op

        # -- control, stats, writeback: one background thread --------------------------------
        def _load_counts(self):
            try:
                with open(stats_path(self.tier)) as f:
                    old = json.load(f)
                for op in OPS:
                    self.counts["injected"][op] += old.get("injected", {}).get(op, 0)
                for k in ("delayed", "bitflips", "flushed_bytes"):
                    self.counts[k] += old.get(k, 0)
            except (OSError, ValueError):
                pass

        def background(self):
            while True:
                try:
                    self._reload()
                    self._expire()
                    if self._stats_due:
                        self._stats_due = False
                        self._write_stats()
                except Exception as exc:   # keep serving: the log says what went wrong
                    print(f"disk_layer {self.tier}: {exc!r}", file=sys.stderr, flush=True)
                time.sleep(POLL_S)

        def _reload(self):
            try:
                st = os.stat(control_path(self.tier))
            except FileNotFoundError:
                if self.fault or self.gen:
                    self.fault, self.gen, self._stats_due = {}, 0, True
                return
            if st.st_mtime_ns == self.gen:
                return
            with open(control_path(self.tier)) as f:
                text = f.read()
            self.fault = json.loads(text) if text.strip() else {}
            self.gen, self._stats_due = st.st_mtime_ns, True

        def _write_stats(self):
            with self._mu:
                pending = sum(len(b) for d in self.dirty.values() for _, b in d.writes)
                doc = {"pid": os.getpid(), "gen": self.gen, "active": self.fault or None,
                       "writeback": self.writeback, "pending_bytes": pending, **self.counts,
                       "injected": dict(self.counts["injected"])}
            _write_json(stats_path(self.tier), doc)

        def _expire(self):
            now = time.monotonic()
            for ino in [i for i, d in list(self.dirty.items()) if now - d.since >= self.writeback_s]:
                self._flush(ino)

        def _flush(self, ino: int):
            with self._mu:
                d = self.dirty.pop(ino, None)
            if d is None:
                return
            try:
                for off, buf in d.writes:
                    os.pwrite(d.fd, buf, off)
                    self.counts["flushed_bytes"] += len(buf)
            finally:
                os.close(d.fd)
            self._stats_due = True

        # -- the fault -------------------------------------------------------------------
        def _maybe_fail(self, op: str):
            f = self.fault
            if not f or f.get("op") != op:
                return
            if f.get("latency_ms"):
                self.counts["delayed"] += 1
                self._stats_due = True
                time.sleep(f["latency_ms"] / 1000)
            if f.get("errno") and self.rng.random() < f.get("probability", 1.0):
                self.counts["injected"][op] += 1
                self._stats_due = True
                raise mfusepy.FuseOSError(ERRNOS[f["errno"]])

        def _flip(self, path: str, data: bytes) -> bytes:
            match = self.fault.get("bitflip_on_read") if self.fault else None
            if not data or not match or (match != "all" and path.lstrip("/") not in match):
                return data
            out = bytearray(data)
            out[len(out) // 2] ^= 0x01
            self.counts["bitflips"] += 1
            self._stats_due = True
            return bytes(out)

        # -- passthrough, relative to the fd underneath --------------------------------------
        @staticmethod
        def _rel(path: str) -> str:
            return path.lstrip("/") or "."

        def _attrs(self, st) -> dict:
            keys = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")
            out = {k: getattr(st, k) for k in keys}
            out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
            d = self.dirty.get(st.st_ino)
            if d is not None and stat.S_ISREG(st.st_mode):
                out["st_size"] = d.size
            return out

        def getattr(self, path, fh=None):
            if fh is not None:
                return self._attrs(os.fstat(fh))
            rel = self._rel(path)
            st = os.stat(self.root_fd) if rel == "." else os.stat(rel, dir_fd=self.root_fd, follow_symlinks=False)
            return self._attrs(st)

        def readdir(self, path, fh):
            fd = os.open(self._rel(path), os.O_RDONLY | os.O_DIRECTORY, dir_fd=self.root_fd)
            try:
                return [".", "..", *os.listdir(fd)]
            finally:
                os.close(fd)

        def statfs(self, path):
            sv = os.fstatvfs(self.root_fd)
            return {k: getattr(sv, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                                 "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax")}

        def _opened(self, fd: int) -> int:
            self.ino[fd] = os.fstat(fd).st_ino
            return fd

        # O_APPEND stays out of our fds: the kernel hands every write its offset, and pwrite on an
        # O_APPEND fd would ignore it
        def open(self, path, flags):
            self._maybe_fail("open")
            return self._opened(os.open(self._rel(path), flags & ~(os.O_CREAT | os.O_APPEND), dir_fd=self.root_fd))

        def create(self, path, mode, flags=os.O_WRONLY):
            self._maybe_fail("open")
            return self._opened(os.open(self._rel(path), (flags | os.O_CREAT) & ~os.O_APPEND, mode,
                                        dir_fd=self.root_fd))

        def read(self, path, size, offset, fh):
            self._maybe_fail("read")
            data = os.pread(fh, size, offset)
            d = self.dirty.get(self.ino.get(fh, -1))
            if d is not None:
                end = min(offset + size, d.size)
                buf = bytearray(data) + bytes(max(0, end - offset - len(data)))
                data = bytes(d.overlay(buf, offset))
            return self._flip(path, data)

        def write(self, path, data, offset, fh):
            self._maybe_fail("write")
            if not self.writeback:
                return os.pwrite(fh, data, offset)
            ino = self.ino[fh]
            with self._mu:
                d = self.dirty.get(ino)
                if d is None:
                    d = self.dirty[ino] = _Dirty(fh, os.fstat(fh).st_size)
                d.writes.append((offset, bytes(data)))
                d.size = max(d.size, offset + len(data))
            self._stats_due = True   # pending_bytes: what a kill now would lose
            return len(data)

        def truncate(self, path, length, fh=None):
            if fh is None:
                fd = os.open(self._rel(path), os.O_WRONLY, dir_fd=self.root_fd)
                try:
                    self._truncate(fd, length)
                finally:
                    os.close(fd)
            else:
                self._truncate(fh, length)
            return 0

        def _truncate(self, fd, length):
            os.ftruncate(fd, length)   # metadata: at once
            with self._mu:
                d = self.dirty.get(os.fstat(fd).st_ino)
                if d is not None:
                    d.writes = [(o, b[:max(0, length - o)]) for o, b in d.writes if o < length]
                    d.size = length

        def fsync(self, path, datasync, fh):
            self._maybe_fail("fsync")
            self._flush(self.ino.get(fh, -1))
            (os.fdatasync if datasync else os.fsync)(fh)
            return 0

        def fsyncdir(self, path, datasync, fh):
            self._maybe_fail("fsync")
            fd = os.open(self._rel(path), os.O_RDONLY | os.O_DIRECTORY, dir_fd=self.root_fd)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            return 0

        def flush(self, path, fh):
            return 0

        def release(self, path, fh):
            self.ino.pop(fh, None)
            os.close(fh)
            return 0

        def mkdir(self, path, mode):
            os.mkdir(self._rel(path), mode, dir_fd=self.root_fd)
            return 0

        def rmdir(self, path):
            os.rmdir(self._rel(path), dir_fd=self.root_fd)
            return 0

        def unlink(self, path):
            os.unlink(self._rel(path), dir_fd=self.root_fd)
            return 0

        def rename(self, old, new):
            os.rename(self._rel(old), self._rel(new), src_dir_fd=self.root_fd, dst_dir_fd=self.root_fd)
            return 0

        def chmod(self, path, mode):
            os.chmod(self._rel(path), mode, dir_fd=self.root_fd)
            return 0

        def chown(self, path, uid, gid):
            os.chown(self._rel(path), uid, gid, dir_fd=self.root_fd, follow_symlinks=False)
            return 0

        def utimens(self, path, times=None):
            rel = self._rel(path)
            os.utime(rel, ns=times, dir_fd=self.root_fd, follow_symlinks=False) if times else \
                os.utime(rel, dir_fd=self.root_fd, follow_symlinks=False)
            return 0

        def symlink(self, target, source):
            os.symlink(source, self._rel(target), dir_fd=self.root_fd)
            return 0

        def readlink(self, path):
            return os.readlink(self._rel(path), dir_fd=self.root_fd)

        def link(self, target, source):
            os.link(self._rel(source), self._rel(target), src_dir_fd=self.root_fd, dst_dir_fd=self.root_fd)
            return 0

        def access(self, path, amode):
            return 0

    return Layer, mfusepy


def serve(root: str, tier: str, writeback: bool, writeback_s: float = WRITEBACK_S) -> None:
    """Mount the layer over `root` and serve until unmounted or SIGTERM (which unmounts)."""
    Layer, mfusepy = _layer_class()
    os.makedirs(CONTROL_DIR, exist_ok=True)
    layer = Layer(root, tier, writeback, writeback_s)
    threading.Thread(target=layer.background, daemon=True).start()
    # SIGTERM/SIGINT/SIGHUP: libfuse's own handlers end the loop and unmount (a Python handler would
    # never run: the main thread stays inside fuse_main)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    # default_permissions: the kernel checks modes as on the disk; allow_other: the job may not be root
    mfusepy.FUSE(layer, root, foreground=True, nothreads=False, fsname=FSNAME, subtype=tier,
                 allow_other=True, default_permissions=True)


def start(mounts: list[tuple[str, str]], writeback: bool, writeback_s: float = WRITEBACK_S,
          timeout: float = 20.0) -> list[int]:
    """Start one `serve` daemon per (tier, dir) in its own session; return once each is mounted. Run
    as a file (`python disk_layer.py start ...`): the daemons are started from the same file."""
    import subprocess
    os.makedirs(CONTROL_DIR, exist_ok=True)
    pids = []
    for tier, root in mounts:
        unmount([root])   # the dead layer of the node's previous incarnation (local nodes: killed with it)
        os.makedirs(root, exist_ok=True)
        root = os.path.realpath(root)
        log = open(os.path.join(CONTROL_DIR, f"{tier}.log"), "ab")
        argv = [sys.executable, os.path.abspath(sys.argv[0]), "serve", tier, root, "1" if writeback else "0",
                str(writeback_s)]
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + timeout
        while root not in layer_mounts():
            if p.poll() is not None or time.monotonic() > deadline:
                p.kill()
                with open(os.path.join(CONTROL_DIR, f"{tier}.log"), "rb") as f:
                    tail = f.read()[-600:].decode(errors="replace")
                sys.exit(f"chaosbench disk layer over {root} did not mount: {tail}")
            time.sleep(0.05)
        pids.append(p.pid)
    return pids


def unmount(paths: list[str]) -> list[str]:
    """Lazily unmount our layers at these paths (dead or alive); the ones still mounted after."""
    import subprocess
    for mp in set(layer_mounts()) & {os.path.realpath(p) for p in paths}:
        subprocess.run(["fusermount3", "-u", "-z", mp], capture_output=True)
    return sorted(set(layer_mounts()) & {os.path.realpath(p) for p in paths})


def sweep_dead(where: str = "/proc/self/mounts") -> list[str]:
    """Lazily unmount (fusermount3 -u -z) our layers whose daemon is gone: their mount point answers
    ENOTCONN. A live layer (its daemon answers) is never touched. `chaosbench clean` runs it on the host."""
    import subprocess
    out = []
    for mp in layer_mounts(where):
        try:
            os.stat(mp)
            continue
        except OSError as exc:
            if exc.errno != errno_mod.ENOTCONN:
                continue
        if subprocess.run(["fusermount3", "-u", "-z", mp], capture_output=True).returncode == 0:
            out.append(mp)
    return out


def control(tier: str, fault: dict, timeout: float = 10.0) -> dict:
    """Set the active fault ({} for none); wait for the layer to acknowledge; its stats."""
    if not os.path.isdir(CONTROL_DIR):
        raise SystemExit(f"no disk layer on this node ({CONTROL_DIR} is missing)")
    _write_json(control_path(tier), fault)
    gen = os.stat(control_path(tier)).st_mtime_ns
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(stats_path(tier)) as f:
                stats = json.load(f)
            if stats.get("gen") == gen and (stats.get("active") or {}) == fault:
                return stats
        except (OSError, ValueError):
            stats = None
        if time.monotonic() > deadline:
            raise SystemExit(f"the {tier} disk layer did not take the fault {fault} within {timeout:g} s "
                             f"(stats: {stats})")
        time.sleep(0.05)


def start_argv(python: str, script: str, layer: dict, tiers: dict[str, str], argv: list[str],
               control_dir: str | None = None) -> list[str]:
    """The node command behind this layer's `start` (what main() parses): `layer` is the node's
    spec.disk_layers entry, `tiers` tier -> directory as the node sees it, `script` this file there."""
    return [python, script, *([f"--control-dir={control_dir}"] if control_dir else []), "start",
            *(["--writeback"] if layer.get("writeback") else []),
            *(f"{t}={tiers[t]}" for t in layer["tiers"]), "--", *argv]


def main(argv: list[str]) -> None:
    global CONTROL_DIR
    if argv and argv[0].startswith("--control-dir="):   # a node's own control directory (local nodes)
        CONTROL_DIR = os.environ["CHAOSBENCH_DISK_CONTROL"] = argv[0].split("=", 1)[1]
        argv = argv[1:]
    cmd = argv[0] if argv else ""
    if cmd == "serve":   # serve <tier> <dir> <writeback 0|1> [<writeback_s>]
        serve(argv[2], argv[1], argv[3] == "1", float(argv[4]) if len(argv) > 4 else WRITEBACK_S)
    elif cmd == "start":   # start [--writeback] [--writeback-s=S] <tier>=<dir> ... -- <node command ...>
        sep = argv.index("--") if "--" in argv else len(argv)
        opts = argv[1:sep]
        mounts = [tuple(a.split("=", 1)) for a in opts if "=" in a and not a.startswith("--")]
        wb = [float(a.split("=", 1)[1]) for a in opts if a.startswith("--writeback-s=")]
        start(mounts, "--writeback" in opts, wb[0] if wb else WRITEBACK_S)
        if argv[sep + 1:]:
            os.execvp(argv[sep + 1], argv[sep + 1:])
    elif cmd == "control":   # control <tier> <fault json>: prints the stats once acknowledged
        print(json.dumps(control(argv[1], json.loads(argv[2]))))
    elif cmd == "stats":     # stats <tier>: what the layer did so far, and what it holds unsynced
        with open(stats_path(argv[1])) as f:
            print(f.read())
    elif cmd == "mounts":    # the layers mounted here, one a line
        print("\n".join(layer_mounts()))
    else:
        sys.exit("usage: disk_layer.py serve|start|control|mounts ...")


if __name__ == "__main__":
    main(sys.argv[1:])
