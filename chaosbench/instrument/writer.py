"""The one event writer of the project (docs/events.md): one JSON line per event, per worker process.

Each line is written with a single `write()` on an O_APPEND descriptor, so restarts of the same
worker append whole lines and a reader only ever sees a torn line at the very end of a killed
process's output. Writing events must never break training: an I/O error (unwritable directory,
full disk) is reported once on stderr and further events are dropped.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path


def node_name() -> str:
    return os.environ.get("CHAOSBENCH_NODE") or socket.gethostname()


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


class EventWriter:
    """Appends events for one worker; `emit(event, fields)` is the callable other parts receive.
    Without an events directory (argument or $CHAOSBENCH_EVENTS_DIR) it writes nothing."""

    def __init__(self, events_dir: str | os.PathLike | None = None, *, node: str | None = None,
                 rank: int | None = None, local_rank: int | None = None, world_size: int | None = None,
                 restart_count: int | None = None, run_id: str | None = None):
        self.node = node or node_name()
        self.common = {
            "node": self.node,
            "rank": _env_int("RANK", 0) if rank is None else rank,
            "local_rank": _env_int("LOCAL_RANK", 0) if local_rank is None else local_rank,
            "world_size": _env_int("WORLD_SIZE", 1) if world_size is None else world_size,
            "restart_count": _env_int("TORCHELASTIC_RESTART_COUNT", 0) if restart_count is None else restart_count,
            "pid": os.getpid(),
            "run_id": os.environ.get("CHAOSBENCH_RUN_ID", "") if run_id is None else run_id,
        }
        events_dir = events_dir if events_dir is not None else os.environ.get("CHAOSBENCH_EVENTS_DIR")
        self.path: Path | None = None
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._broken = False
        if events_dir:
            self.path = Path(events_dir) / f"events-{self.node}-local{self.common['local_rank']}.jsonl"
            try:
                Path(events_dir).mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            except OSError as e:
                self._give_up(e)

    @property
    def enabled(self) -> bool:
        return self._fd is not None

    def _give_up(self, e: OSError) -> None:
        if not self._broken:
            self._broken = True
            print(f"chaosbench: cannot write events to {self.path}: {e}; further events are dropped",
                  file=sys.stderr, flush=True)

    def emit(self, event: str, fields: dict | None = None) -> dict:
        record = {"ts": time.time(), "event": event, **self.common, **(fields or {})}
        with self._lock:
            if self._fd is not None:
                try:
                    os.write(self._fd, (json.dumps(record, default=str) + "\n").encode())
                except OSError as e:
                    self._give_up(e)
                    self._close()
        return record

    __call__ = emit

    def _close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def close(self) -> None:
        with self._lock:
            self._close()


def read_events(path: str | os.PathLike) -> list[dict]:
    """Parse an events file, ignoring a torn last line (a killed writer)."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
