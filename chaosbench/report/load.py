"""Read a run directory (docs/result.md) into plain dicts and lists.

The report depends only on the JSON layout, not on the runner's models, so any run directory
written by any version of the runner renders. What it shows comes from result.json and
diagnosis.json, which the analyse step wrote (chaosbench/analyse.py); events/ and logs/ are read
only as text for the searchable viewer, never parsed. Nothing is read through a link planted in the
run directory (chaosbench/rundir.py): a linked part is left out and result.json's `links` names it.
Missing optional pieces (events/, logs/, a field that could not be measured) are tolerated; a
result.json that is not a JSON object is not.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaosbench import rundir
from chaosbench.jsonl import parse_jsonl

from .errors import ReportInputError

SUPPORTED_SCHEMA = 1
# A log bigger than this is cut to its tail: the end of a log is where the failure is.
MAX_LOG_LINES = 4000
MAX_EVENT_LINES = 4000


@dataclass
class TextFile:
    name: str
    lines: list[str]
    omitted: int = 0  # lines dropped from the head to keep the page small


@dataclass
class RunDir:
    path: Path
    result: dict[str, Any]
    event_files: list[TextFile] = field(default_factory=list)  # raw lines, for the searchable viewer
    logs: list[TextFile] = field(default_factory=list)
    faults_log: list[dict[str, Any]] = field(default_factory=list)
    exits: Any = None
    diagnosis: dict[str, Any] | None = None   # diagnosis.json (chaosbench/diagnosis): what broke, what to change


def load_result(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "result.json"
    if not run_dir.is_dir():
        raise ReportInputError(f"{run_dir}: not a directory; pass a run directory such as reports/<run-id>/")
    try:
        data = rundir.read_bytes(run_dir, "result.json")
    except rundir.LinkRefused as exc:
        raise ReportInputError(f"{path}: {exc}") from exc
    except OSError as exc:
        raise ReportInputError(
            f"{path}: not found; a run directory holds the result.json written by `chaosbench run` "
            "(see docs/result.md)"
        ) from exc
    try:
        result = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ReportInputError(f"{path}: not UTF-8 text ({exc}); re-run or restore the file") from exc
    except json.JSONDecodeError as exc:
        raise ReportInputError(
            f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}; "
            "re-run the scenario or repair the file"
        ) from exc
    if not isinstance(result, dict):
        raise ReportInputError(f"{path}: top level must be a JSON object, got {type(result).__name__}")
    version = result.get("schema_version", SUPPORTED_SCHEMA)
    if version != SUPPORTED_SCHEMA:
        raise ReportInputError(
            f"{path}: field 'schema_version' is {version!r}; this chaosbench renders version "
            f"{SUPPORTED_SCHEMA}; render it with the chaosbench version that wrote it"
        )
    _check_types(path, result)
    return result


# Fields whose type the report relies on; null is always allowed ("not measured").
_LIST_FIELDS = ("faults", "recoveries", "checks")
_DICT_FIELDS = ("scenario", "cluster", "checkpoints", "timeline", "goodput", "files")


def _check_types(path: Path, result: dict[str, Any]) -> None:
    for name in _LIST_FIELDS:
        value = result.get(name)
        if value is not None and not isinstance(value, list):
            raise ReportInputError(f"{path}: field '{name}' must be a list, got {type(value).__name__}")
        for i, item in enumerate(value or []):
            if not isinstance(item, dict):
                raise ReportInputError(
                    f"{path}: field '{name}[{i}]' must be an object, got {type(item).__name__}"
                )
    for name in _DICT_FIELDS:
        value = result.get(name)
        if value is not None and not isinstance(value, dict):
            raise ReportInputError(f"{path}: field '{name}' must be an object, got {type(value).__name__}")


# Terminal colour/cursor codes (rich, torchrun) would show as "[31m" litter in the page.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _lines(text: str, name: str, limit: int) -> TextFile:
    # the text was read with errors="replace": a log cut by a SIGKILL may end mid-UTF-8 sequence
    lines = _ANSI.sub("", text).splitlines()
    omitted = max(0, len(lines) - limit)
    return TextFile(name=name, lines=lines[omitted:], omitted=omitted)


def _text_files(run_dir: Path, sub: str, suffix: str, limit: int) -> list[TextFile]:
    out = []
    for name in rundir.files(run_dir, sub, suffix):
        text = rundir.read_text(run_dir, f"{sub}/{name}")
        if text is not None:
            out.append(_lines(text, name, limit))
    return out


def _json_file(run_dir: Path, name: str) -> Any:
    """A JSON file of the run, or None when absent, unreadable, a link or not JSON."""
    text = rundir.read_text(run_dir, name)
    try:
        return json.loads(text) if text is not None else None
    except ValueError:
        return None


def load_run_dir(run_dir: str | Path, result: dict[str, Any] | None = None,
                 diagnosis: dict[str, Any] | None = None) -> RunDir:
    """The run's files for the report; `result` and `diagnosis` when the analyse step holds them already."""
    run_dir = Path(run_dir)
    run = RunDir(path=run_dir, result=result if result is not None else load_result(run_dir))
    files = run.result.get("files") or {}
    events, logs = str(files.get("events") or "events"), str(files.get("logs") or "logs")
    run.event_files = _text_files(run_dir, events, ".jsonl", MAX_EVENT_LINES)
    run.logs = _text_files(run_dir, logs, "", MAX_LOG_LINES)
    log = rundir.read_text(run_dir, "faults.jsonl")
    run.faults_log = parse_jsonl(log.splitlines()) if log else []
    d = diagnosis if diagnosis is not None else _json_file(run_dir, "diagnosis.json")
    run.diagnosis = d if isinstance(d, dict) else None  # the section says the diagnosis is missing
    run.exits = _json_file(run_dir, "exits.json")       # None: "not recorded"; result.json is the authority
    return run
