"""JSON-lines as the harness reads them (events, faults.jsonl): a writer killed mid-line leaves a
torn last line, so undecodable or non-object lines are skipped, never fatal."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable


def parse_jsonl(lines: Iterable[str], require: str | None = None) -> list[dict[str, Any]]:
    """The JSON objects among `lines` (those that have key `require`, when given)."""
    out = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and (require is None or require in obj):
            out.append(obj)
    return out


def read_jsonl(path: Path, require: str | None = None) -> list[dict[str, Any]]:
    """parse_jsonl of a file; a missing file is no lines. errors='replace': a log cut by SIGKILL may end
    mid-UTF-8 sequence."""
    if not path.is_file():
        return []
    return parse_jsonl(path.read_text(encoding="utf-8", errors="replace").splitlines(), require)
