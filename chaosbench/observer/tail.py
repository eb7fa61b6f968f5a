"""Incremental reader of the trainers' events-*.jsonl files.

Files are appended to by several processes; a reader may see the half-written last line of a
killed process, which it must skip (docs/events.md). We keep a byte offset per file and consume
only complete lines.
"""
from __future__ import annotations

import time
from pathlib import Path

from chaosbench.jsonl import parse_jsonl
from chaosbench.observer.received import RECEIPTS, write_receipts


class EventTail:
    """`receipts`: where to note when each line was read (received.py: the timeline under clock skew);
    default received.jsonl beside the events directory, None: nowhere."""

    def __init__(self, events_dir: Path, pattern: str = "events-*.jsonl", receipts: Path | None | bool = True):
        self.dir = Path(events_dir)
        self.pattern = pattern
        self._offsets: dict[Path, int] = {}
        self.receipts = self.dir.parent / RECEIPTS if receipts is True else receipts or None

    def poll(self) -> list[dict]:
        """New complete events from every file, in timestamp order."""
        out: list[dict] = []
        if not self.dir.is_dir():
            return out
        read: list[tuple[str, int, float]] = []
        for path in sorted(self.dir.glob(self.pattern)):
            before = self._offsets.get(path, 0)
            out += self._read_new(path)
            if self._offsets.get(path, 0) != before:
                read.append((path.name, self._offsets[path], time.time()))
        if self.receipts is not None:
            write_receipts(self.receipts, read)
        out.sort(key=lambda e: e.get("ts", 0.0))
        return out

    def _read_new(self, path: Path) -> list[dict]:
        start = self._offsets.get(path, 0)
        try:
            with open(path, "rb") as f:
                f.seek(start)
                chunk = f.read()
        except OSError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self._offsets[path] = start + end + 1
        return list(parse_lines(chunk[: end + 1].decode("utf-8", "replace").splitlines()))


def parse_lines(lines, rejected: list[str] | None = None) -> list[dict]:
    """Event lines (objects with an "event" key); torn lines skipped. An event without `ts` breaks the
    contract (every reader orders and windows events by it): left out and described in `rejected`."""
    lines = list(lines)
    out = parse_jsonl(lines, require="event", rejected=rejected)
    if all("ts" in e for e in out):
        return out
    kept = []   # find the line numbers of the ones without ts, for the event_contract check
    for i, line in enumerate(lines, 1):
        for e in parse_jsonl([line], require="event"):
            if "ts" in e:
                kept.append(e)
            elif rejected is not None:
                rejected.append(f"line {i}: field 'ts' is missing")
    return kept


def read_events(events_dir: Path, rejected: list[str] | None = None) -> list[dict]:
    """Every complete event of a finished run, sorted by time (torn last lines skipped; lines that
    break the contract's field types described in `rejected`, "file line N: ...")."""
    events: list[dict] = []
    for path in sorted(Path(events_dir).glob("events-*.jsonl")):
        bad: list[str] = []
        events += parse_lines(path.read_text(errors="replace").splitlines(), bad)
        if rejected is not None:
            rejected += [f"{path.name} {b}" for b in bad]
    events.sort(key=lambda e: e.get("ts", 0.0))
    return events
