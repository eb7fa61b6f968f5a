"""Render a run directory's report.html from what the analyse step wrote (result.json,
diagnosis.json), and a reports folder's index.html. JUnit is the analyse step's (chaosbench/analyse.py)."""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, select_autoescape

from chaosbench import rundir

from . import fmt
from .errors import ReportInputError
from .load import load_result, load_run_dir
from .view import build_context, check_counts, compact_shape, verdict_of


@functools.lru_cache(maxsize=1)
def _env() -> Environment:
    # Autoescape everything, .j2 included: logs and events are hostile input. One per process: compiling
    # the templates costs more than rendering a run (a recheck of many runs compiles them once).
    env = Environment(loader=PackageLoader("chaosbench.report", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      trim_blocks=False, lstrip_blocks=False)
    env.filters.update(fmt.FILTERS)
    return env


def render_run(run_dir: str | Path, result: dict[str, Any] | None = None,
               diagnosis: dict[str, Any] | None = None) -> Path:
    """Write run_dir/report.html from result.json and diagnosis.json (or those the analyse step passes in)."""
    run_dir = Path(run_dir)
    if result is None:
        result = load_result(run_dir)   # bad input is named before anything is written
    run = load_run_dir(run_dir, result, diagnosis)
    try:
        html = _env().get_template("report.html.j2").render(**build_context(run))
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        # load.py checks the top-level shape; a value of the wrong type deeper down ends here, not in
        # a traceback. result.json is the harness's own output, so this means a damaged or edited file.
        raise ReportInputError(f"{run_dir / 'result.json'}: a field has an unexpected type or value "
                               f"({type(exc).__name__}: {exc}); re-run the scenario or restore the file "
                               "(docs/result.md lists the fields)") from exc
    return rundir.write_text(run_dir, "report.html", html)


def _index_row(run_dir: Path) -> dict[str, Any]:
    try:
        r = load_result(run_dir)
    except ReportInputError as exc:
        return {"run_id": run_dir.name, "broken": str(exc), "started_at": None}
    tiers = sorted({rec.get("tier") for rec in r.get("recoveries") or [] if rec.get("tier")})
    totals = [rec.get("total_s") for rec in r.get("recoveries") or []
              if isinstance(rec.get("total_s"), (int, float))]
    report = run_dir / "report.html"
    return {
        "run_id": r.get("run_id") or run_dir.name, "dir": run_dir.name, "broken": None,
        "scenario": (r.get("scenario") or {}).get("name"), "verdict": verdict_of(r),
        "backend": r.get("backend"), "shape": compact_shape(r.get("cluster") or {}),
        "started_at": r.get("started_at"), "duration_s": r.get("duration_s"),
        "counts": check_counts(r.get("checks") or []), "tiers": tiers,
        "max_recovery_s": max(totals) if totals else None,
        "lost_steps": sum(rec.get("lost_steps") or 0 for rec in r.get("recoveries") or [])
        if any(rec.get("lost_steps") is not None for rec in r.get("recoveries") or []) else None,
        "goodput": (r.get("goodput") or {}).get("ratio"),
        # a relative link, quoted: a folder named `javascript:alert(1)` is a path here, never a scheme
        "report": f"./{quote(run_dir.name)}/report.html" if _plain_file(report) else None,
    }


def render_index(reports_dir: str | Path) -> Path:
    """Write reports_dir/index.html: one row per run directory (a subfolder with result.json)."""
    reports_dir = Path(reports_dir)
    if not reports_dir.is_dir():
        raise ReportInputError(f"{reports_dir}: not a directory; pass the reports folder (default: reports/)")
    runs = [_index_row(d) for d in sorted(reports_dir.iterdir())
            if _plain_dir(d) and _plain_file(d / "result.json")]
    runs.sort(key=lambda row: row["started_at"] if isinstance(row["started_at"], (int, float)) else 0.0,
              reverse=True)
    totals = {v: sum(1 for row in runs if row.get("verdict") == v) for v in ("passed", "failed", "error")}
    html = _env().get_template("index.html.j2").render(runs=runs, totals=totals)
    return rundir.write_text(reports_dir, "index.html", html)


def _plain_dir(p: Path) -> bool:
    """A folder, not a link to one (a run directory linked into reports/ is not listed)."""
    try:
        return stat.S_ISDIR(os.lstat(p).st_mode)
    except OSError:
        return False


def _plain_file(p: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(p).st_mode)
    except OSError:
        return False
