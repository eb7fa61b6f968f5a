"""JSON-lines as the harness reads them (events, faults.jsonl).

A writer killed mid-line leaves a torn last line (no newline after it): that one is skipped, never
fatal, and never reported. Any other line that does not decode to a JSON object is not torn but
garbled, and a caller that passes `malformed` learns of it ((line number, first 80 chars)): the
record's integrity (checks/record.py) names it, so no line is dropped unsaid. A line whose well-known
fields have the wrong type (docs/events.md) is left out too, so no reader has to guard every
comparison; it breaks the event contract, and callers that pass `rejected` learn of it (the
`event_contract` check fails on it)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

_NUM = (int, float)
# field -> accepted types (None, a missing value, is always accepted); bool is not a number here
_TYPES = {"ts": _NUM, "step": int, "rank": int, "local_rank": int, "world_size": int, "restart_count": int,
          "pid": int, "event": str, "node": str, "loss": _NUM}
SNIPPET = 80   # chars of a garbled line quoted in a problem


def _ill_typed(obj: dict) -> list[str]:
    return [k for k, t in _TYPES.items()
            if obj.get(k) is not None and (not isinstance(obj[k], t) or isinstance(obj[k], bool))]


def numbered(lines: Iterable[str], require: str | None = None, rejected: list[str] | None = None,
             malformed: list[tuple[int, str]] | None = None, torn_last: bool = False) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each JSON object among `lines` that has key `require` (when given).
    `torn_last`: the last line had no newline after it (a writer killed mid-line), so it may be cut."""
    lines = list(lines)
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
            what = None if isinstance(obj, dict) else "not a JSON object"
        except json.JSONDecodeError:
            obj, what = None, "not JSON"
        if what is None and require is not None and require not in obj:
            what = f"no {require!r} field"
        if what is not None:
            if malformed is not None and not (torn_last and n == len(lines)):
                malformed.append((n, f"{what}: {line[:SNIPPET]}"))
            continue
        bad = _ill_typed(obj)
        if bad:
            if rejected is not None:
                rejected.append(f"line {n}: " + ", ".join(f"field {k!r} is {type(obj[k]).__name__}" for k in bad))
            continue
        yield n, obj


def parse_jsonl(lines: Iterable[str], require: str | None = None,
                rejected: list[str] | None = None) -> list[dict[str, Any]]:
    """The JSON objects among `lines` (those that have key `require`, when given). Lines dropped for
    wrong-typed fields are described in `rejected` ("line N: field 'step' is str"), when given."""
    return [obj for _, obj in numbered(lines, require, rejected)]


def file_lines(path: Path) -> tuple[list[str], bool]:
    """A file's lines and whether the last one is torn (no newline after it). errors='replace': a log
    cut by SIGKILL may end mid-UTF-8 sequence. Split on newlines only: a writer's line is one write
    ending in '\\n', whatever other separators its strings hold."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    if not text:
        return [], False
    lines = text.split("\n")
    if text.endswith("\n"):
        return lines[:-1], False
    return lines, True


def read_numbered(path: Path, require: str | None = None, rejected: list[str] | None = None,
                  malformed: list[tuple[int, str]] | None = None) -> list[tuple[int, dict]]:
    """`numbered` over a file; a missing file is no lines."""
    if not Path(path).is_file():
        return []
    lines, torn = file_lines(path)
    return list(numbered(lines, require, rejected, malformed, torn))


def read_jsonl(path: Path, require: str | None = None) -> list[dict[str, Any]]:
    """parse_jsonl of a file; a missing file is no lines."""
    return [obj for _, obj in read_numbered(path, require)]
