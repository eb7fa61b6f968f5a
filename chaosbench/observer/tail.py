"""Incremental reader of the trainers' events-*.jsonl files.

Files are appended to by several processes; a reader may see the half-written last line of a
killed process, which it must skip (docs/events.md). We keep a byte offset per file and consume
only complete lines. A finished run's files are read once more, whole (`read_events`): there a
garbled line anywhere but at a file's torn end is reported, never dropped unsaid.
"""
from __future__ import annotations

import time
from pathlib import Path

from chaosbench.jsonl import file_lines, numbered
from chaosbench.observer.received import RECEIPTS, write_receipts
from chaosbench.observer.stream import complete_lines


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
        lines, self._offsets[path] = complete_lines(path, self._offsets.get(path, 0))
        return parse_lines([line.decode("utf-8", "replace") for line in lines])


def parse_lines(lines, rejected: list[str] | None = None, malformed: list[tuple[int, str]] | None = None,
                torn_last: bool = False) -> list[dict]:
    """Event lines (objects with an "event" key). An event without `ts` breaks the contract (every
    reader orders and windows events by it): left out and described in `rejected`."""
    return [ev for _, ev in _with_ts(numbered(lines, "event", rejected, malformed, torn_last), rejected)]


def _with_ts(got, rejected: list[str] | None):
    for n, ev in got:
        if "ts" in ev:
            yield n, ev
        elif rejected is not None:
            rejected.append(f"line {n}: field 'ts' is missing")


def read_events(events_dir: Path, rejected: list[str] | None = None, malformed: list[tuple[str, str]] | None = None,
                origin: dict[int, str] | None = None, pattern: str = "events-*.jsonl") -> list[dict]:
    """Every complete event of a finished run, sorted by time. A torn last line is skipped; lines that
    break the contract's field types are described in `rejected` ("file line N: ..."), garbled lines
    in `malformed` ("file:N", first chars), and `origin` maps id(event) to its "file:N"."""
    events: list[dict] = []
    for path in sorted(Path(events_dir).glob(pattern)):
        if path.is_symlink():   # a planted link is an integrity failure (rundir.links), never read
            continue
        bad: list[str] = []
        garbled: list[tuple[int, str]] = []
        lines, torn = file_lines(path)
        for n, ev in _with_ts(numbered(lines, "event" if pattern.startswith("events") else "ts", bad, garbled, torn), bad):
            events.append(ev)
            if origin is not None:
                origin[id(ev)] = f"{path.name}:{n}"
        if rejected is not None:
            rejected += [f"{path.name} {b}" for b in bad]
        if malformed is not None:
            malformed += [(f"{path.name}:{n}", text) for n, text in garbled]
    events.sort(key=lambda e: e.get("ts", 0.0))
    return events
