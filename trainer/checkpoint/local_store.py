"""A checkpoint tier kept in a local directory: node-local shared memory or an NVMe disk.

Layout: <root>/step-<10-digit step>/{state.pt, manifest.json}. A checkpoint is built in
<root>/.tmp-step-…-<pid>/ and renamed into place, so a reader only ever sees complete directories;
temp directories (from a killed writer) are never listed and are removed on start-up.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import threading
from dataclasses import dataclass
from typing import Callable

from . import fmt
from .errors import CheckpointCorrupt, CheckpointSaveError, MemoryLimitExceeded

STEP_DIR = re.compile(r"^step-(\d{10})$")
CHUNK = 8 << 20


@dataclass
class CheckpointRef:
    tier: str
    step: int
    location: str  # directory path or S3 key prefix


def step_dir_name(step: int) -> str:
    return f"step-{step:010d}"


# Held from a checkpoint's rename into place until its `checkpoint_saved` is logged (on_published),
# and taken by the worker's exit paths before os._exit (train.Worker): a published checkpoint never
# goes unlogged because its writer thread was cut off by a fatal exit a moment after the rename. The
# harness checks every restore claim against its own inventory at the fault and, where that missed the
# checkpoint, against a save logged after it (checks/restore_evidence.py); a published-but-unlogged one read
# as an invented claim (seen once: oom_worker, a snapshot published 60 ms after the inventory while
# the worker died of its peer's OOM kill).
PUBLISHING = threading.Lock()


def _log_callback_error(step: int, exc: Exception) -> None:
    import logging
    logging.getLogger(__name__).warning("step %s published, but logging it failed: %s", step, exc)


class LocalStore:
    def __init__(self, tier: str, root: str, keep_last: int, fsync: bool, max_bytes: int | None = None):
        self.tier = tier
        self.root = os.path.abspath(root)
        self.keep_last = keep_last
        self.fsync = fsync
        self.max_bytes = max_bytes

    def __repr__(self):
        return f"LocalStore({self.tier}, {self.root})"

    # ---- write side (one writer per node: local rank 0) ----
    def save(self, step: int, data: bytes, manifest: dict,
             on_published: Callable[[str], None] | None = None) -> str:
        if self.max_bytes is not None and len(data) > self.max_bytes:
            raise MemoryLimitExceeded(
                f"snapshot of step {step} is {len(data) / 2**20:.1f} MB but max_memory_mb is "
                f"{self.max_bytes / 2**20:.1f} MB; raise checkpoint.max_memory_mb or shrink the model")
        final = os.path.join(self.root, step_dir_name(step))
        tmp = os.path.join(self.root, f".tmp-{step_dir_name(step)}-{os.getpid()}")
        try:
            self._make_root()
            self._make_room(len(data))
            shutil.rmtree(tmp, ignore_errors=True)
            os.mkdir(tmp)
            self._write(os.path.join(tmp, fmt.STATE_FILE), data)
            self._write(os.path.join(tmp, fmt.MANIFEST_FILE), fmt.encode_manifest(manifest))
            self._sync_dir(tmp)
            with PUBLISHING:                 # only the publish and its log line hold it, never the write
                if os.path.exists(final):  # re-save of the same step: move the old one out of the way first
                    self._remove(final)
                os.rename(tmp, final)
                self._sync_dir(self.root)
                if on_published is not None:
                    try:
                        on_published(final)
                    except Exception as e:   # not a failed save: the checkpoint is in place
                        _log_callback_error(step, e)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise CheckpointSaveError(self.tier, f"write of step {step} to {self.root} failed: "
                                      f"{_describe(e)}") from e
        self._retain()
        return final

    def _write(self, path: str, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            for off in range(0, len(view), CHUNK):
                chunk = view[off:off + CHUNK]
                while chunk:
                    n = os.write(fd, chunk)
                    chunk = chunk[n:]
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def _make_root(self) -> None:
        """Create the root and missing parents, each new entry fsynced into its parent: POSIX makes a
        directory's name durable only by an fsync of its parent, and without it a power loss after the
        first save may take the whole tier's directory, with the checkpoints fsynced inside it."""
        missing, path = [], self.root
        while not os.path.lexists(path):
            missing.append(path)
            path = os.path.dirname(path)
        for d in reversed(missing):
            try:
                os.mkdir(d)   # under a file: ENOTDIR, as makedirs says it
            except FileExistsError:
                pass          # made meanwhile by another writer: still fsync it into its parent
            self._sync_dir(os.path.dirname(d))
        if not missing:
            os.makedirs(self.root, exist_ok=True)   # there already (or a file: the error names it)

    def _sync_dir(self, path: str) -> None:
        if not self.fsync:
            return
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _remove(self, path: str) -> None:
        # rename first so a half-deleted checkpoint never looks like a checkpoint
        doomed = os.path.join(self.root, f".tmp-del-{os.path.basename(path)}-{os.getpid()}")
        os.rename(path, doomed)
        shutil.rmtree(doomed, ignore_errors=True)

    def _retain(self) -> None:
        for ref in self.list()[self.keep_last:]:
            try:
                self._remove(ref.location)
            except OSError:
                pass

    def _make_room(self, incoming: int) -> None:
        """Memory tier: evict the oldest snapshots until the new one fits max_bytes."""
        if self.max_bytes is None:
            return
        refs = self.list()
        used = sum(_dir_size(r.location) for r in refs)
        while refs and used + incoming > self.max_bytes:
            oldest = refs.pop()
            used -= _dir_size(oldest.location)
            self._remove(oldest.location)

    def cleanup_temp(self) -> None:
        """Remove temp dirs left by a killed writer (called by the node's writer at start-up)."""
        if not os.path.isdir(self.root):
            return
        for name in os.listdir(self.root):
            if name.startswith(".tmp-"):
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)

    # ---- read side (any rank on the node) ----
    def list(self) -> list[CheckpointRef]:
        """Complete-looking checkpoints, newest first (validity is checked on read)."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        refs = [CheckpointRef(self.tier, int(m.group(1)), os.path.join(self.root, n))
                for n in names if (m := STEP_DIR.match(n)) and os.path.isdir(os.path.join(self.root, n))]
        return sorted(refs, key=lambda r: r.step, reverse=True)

    def read(self, ref: CheckpointRef) -> tuple[bytes, dict]:
        """Bytes and manifest of a checkpoint; CheckpointCorrupt unless manifest, size and checksum agree."""
        where = f"{self.tier} {ref.location}"
        try:
            with open(os.path.join(ref.location, fmt.MANIFEST_FILE), "rb") as f:
                manifest = fmt.parse_manifest(f.read(), where)
            with open(os.path.join(ref.location, fmt.STATE_FILE), "rb") as f:
                data = f.read()
        except FileNotFoundError as e:
            raise CheckpointCorrupt(f"{where}: missing {os.path.basename(e.filename)}") from None
        if manifest["step"] != ref.step:
            raise CheckpointCorrupt(f"{where}: manifest step {manifest['step']} != directory step {ref.step}")
        fmt.verify(manifest, data, where)
        return data, manifest


def _dir_size(path: str) -> int:
    total = 0
    for name in os.listdir(path) if os.path.isdir(path) else ():
        try:
            total += os.path.getsize(os.path.join(path, name))
        except OSError:
            pass
    return total


def _describe(e: OSError) -> str:
    name = errno.errorcode.get(e.errno, "")
    text = e.strerror or str(e)
    return f"{text} ({name})" if name else text
