"""JSON-lines as the harness reads them (events, faults.jsonl): a writer killed mid-line leaves a
torn last line, so undecodable or non-object lines are skipped, never fatal. So is a line whose
well-known fields have the wrong type (docs/events.md): no reader has to guard every comparison.
Such a line breaks the event contract rather than being torn: callers that pass `rejected` learn of
it (the `event_contract` check fails on it), so a skipped line never goes unsaid."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

_NUM = (int, float)
# field -> accepted types (None, a missing value, is always accepted); bool is not a number here
_TYPES = {"ts": _NUM, "step": int, "rank": int, "local_rank": int, "world_size": int, "restart_count": int,
          "pid": int, "event": str, "node": str, "loss": _NUM}


def _ill_typed(obj: dict) -> list[str]:
    return [k for k, t in _TYPES.items()
            if obj.get(k) is not None and (not isinstance(obj[k], t) or isinstance(obj[k], bool))]


def parse_jsonl(lines: Iterable[str], require: str | None = None,
                rejected: list[str] | None = None) -> list[dict[str, Any]]:
    """The JSON objects among `lines` (those that have key `require`, when given). Lines dropped for
    wrong-typed fields are described in `rejected` ("line N: field 'step' is str"), when given."""
    out = []
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict) or (require is not None and require not in obj):
            continue
        bad = _ill_typed(obj)
        if bad:
            if rejected is not None:
                rejected.append(f"line {n}: " + ", ".join(f"field {k!r} is {type(obj[k]).__name__}" for k in bad))
            continue
        out.append(obj)
    return out


def read_jsonl(path: Path, require: str | None = None) -> list[dict[str, Any]]:
    """parse_jsonl of a file; a missing file is no lines. errors='replace': a log cut by SIGKILL may end
    mid-UTF-8 sequence."""
    if not path.is_file():
        return []
    return parse_jsonl(path.read_text(encoding="utf-8", errors="replace").splitlines(), require)
