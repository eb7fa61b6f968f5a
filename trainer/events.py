"""The trainer's event stream (docs/events.md): one JSON line per event, per worker process.

Each line is written with a single `write()` on an O_APPEND descriptor, so concurrent restarts of
the same worker append whole lines and a reader only ever sees a torn line at the very end of a
killed process's output.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path


def node_name() -> str:
    return os.environ.get("CHAOSBENCH_NODE") or socket.gethostname()


class EventWriter:
    """Appends events for one worker; `emit(event, fields)` is the callable other parts receive."""

    def __init__(self, events_dir: str | os.PathLike | None = None, *, node: str | None = None,
                 rank: int | None = None, local_rank: int | None = None, world_size: int | None = None,
                 restart_count: int | None = None, run_id: str | None = None):
        env = os.environ
        self.node = node or node_name()
        self.common = {
            "node": self.node,
            "rank": int(env.get("RANK", 0)) if rank is None else rank,
            "local_rank": int(env.get("LOCAL_RANK", 0)) if local_rank is None else local_rank,
            "world_size": int(env.get("WORLD_SIZE", 1)) if world_size is None else world_size,
            "restart_count": int(env.get("TORCHELASTIC_RESTART_COUNT", 0)) if restart_count is None else restart_count,
            "pid": os.getpid(),
            "run_id": env.get("CHAOSBENCH_RUN_ID", "") if run_id is None else run_id,
        }
        events_dir = events_dir if events_dir is not None else env.get("CHAOSBENCH_EVENTS_DIR")
        self.path: Path | None = None
        self._fd: int | None = None
        self._lock = threading.Lock()
        if events_dir:  # no directory given -> events go nowhere (human logs still go to stderr)
            Path(events_dir).mkdir(parents=True, exist_ok=True)
            self.path = Path(events_dir) / f"events-{self.node}-local{self.common['local_rank']}.jsonl"
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def emit(self, event: str, fields: dict | None = None) -> dict:
        record = {"ts": time.time(), "event": event, **self.common, **(fields or {})}
        line = (json.dumps(record, default=str) + "\n").encode()
        with self._lock:
            if self._fd is not None:
                os.write(self._fd, line)
        return record

    __call__ = emit

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def read_events(path: str | os.PathLike) -> list[dict]:
    """Parse an events file, ignoring a torn last line (a killed writer)."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
