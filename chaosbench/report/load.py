"""Read a run directory (docs/result.md) into plain dicts and lists.

The report depends only on the JSON layout, not on the runner's models, so any run directory
written by any version of the runner renders. Missing optional pieces (events/, logs/, a field
that could not be measured) are tolerated; a result.json that is not a JSON object is not.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    event_paths: list[Path] = field(default_factory=list)
    event_files: list[TextFile] = field(default_factory=list)  # raw lines, for the searchable viewer
    logs: list[TextFile] = field(default_factory=list)
    faults_log: list[dict[str, Any]] = field(default_factory=list)
    exits: Any = None
    diagnosis: dict[str, Any] | None = None   # diagnosis.json (chaosbench/diagnosis): what broke, what to change

    def parse_events(self) -> dict[str, list[dict[str, Any]]]:
        """file name -> parsed lines; only needed (and paid for) when result.json has no timeline."""
        return {p.name: parse_jsonl(p.read_text(encoding="utf-8", errors="replace").splitlines())
                for p in self.event_paths}


def load_result(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "result.json"
    if not run_dir.is_dir():
        raise ReportInputError(f"{run_dir}: not a directory; pass a run directory such as reports/<run-id>/")
    if not path.is_file():
        raise ReportInputError(
            f"{path}: not found; a run directory holds the result.json written by `chaosbench run` "
            "(see docs/result.md)"
        )
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
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


def _read_lines(path: Path, limit: int) -> TextFile:
    # errors="replace": a log cut by a SIGKILL may end mid-UTF-8 sequence; show it, don't fail.
    lines = _ANSI.sub("", path.read_text(encoding="utf-8", errors="replace")).splitlines()
    omitted = max(0, len(lines) - limit)
    return TextFile(name=path.name, lines=lines[omitted:], omitted=omitted)


def load_run_dir(run_dir: str | Path) -> RunDir:
    run_dir = Path(run_dir)
    run = RunDir(path=run_dir, result=load_result(run_dir))
    files = run.result.get("files") or {}
    events_dir = run_dir / str(files.get("events") or "events")
    logs_dir = run_dir / str(files.get("logs") or "logs")
    if events_dir.is_dir():
        run.event_paths = sorted(events_dir.glob("*.jsonl"))
        run.event_files = [_read_lines(p, MAX_EVENT_LINES) for p in run.event_paths]
    if logs_dir.is_dir():
        for p in sorted(logs_dir.iterdir()):
            if p.is_file():
                run.logs.append(_read_lines(p, MAX_LOG_LINES))
    faults_path = run_dir / "faults.jsonl"
    if faults_path.is_file():
        run.faults_log = parse_jsonl(faults_path.read_text(encoding="utf-8", errors="replace").splitlines())
    diag_path = run_dir / "diagnosis.json"
    if diag_path.is_file():
        try:
            d = json.loads(diag_path.read_text(encoding="utf-8"))
            run.diagnosis = d if isinstance(d, dict) else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            run.diagnosis = None  # the section says the diagnosis is missing; the rest renders
    exits_path = run_dir / "exits.json"
    if exits_path.is_file():
        try:
            run.exits = json.loads(exits_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            run.exits = None  # shown as "not recorded"; result.json is the authority
    return run
