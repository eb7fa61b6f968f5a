"""From verdict to diagnosis: what broke in a run, on which node, because of which setting or code
pattern, and what to change (docs/diagnosis.md).

    diagnose(run_dir)            -> Diagnosis(root_cause, findings)   a pure function of the recorded run dir
    diagnose_record(rec, cause)  -> Diagnosis                         the analyse step's: the History it loaded,
                                                                      the root cause it found already
    write(run_dir, d)            writes run_dir/diagnosis.json (never through a link planted there)
"""
from __future__ import annotations

import json
from pathlib import Path

from chaosbench import rundir

from .model import Diagnosis, Evidence, Finding, RootCause
from .record import RunRecord
from .rootcause import root_cause
from .rules import RULES

__all__ = ["Diagnosis", "Evidence", "Finding", "RootCause", "diagnose", "diagnose_record", "load", "write"]

_NOT_GIVEN = object()


def diagnose_record(rec: RunRecord, cause=_NOT_GIVEN) -> Diagnosis:
    """Every rule over one RunRecord; `cause` is the root cause when the caller found it already."""
    findings: list[Finding] = []
    for rule in RULES:
        try:
            findings += rule.check(rec)
        except Exception as e:   # one broken rule must not hide the others' findings; say it failed
            findings.append(Finding(rule=rule.__name__.rsplit(".", 1)[-1], title=f"rule could not run: "
                                    f"{type(e).__name__}: {e}", fix="report this as a chaosbench bug", effect="",
                                    severity="error"))
    findings.sort(key=lambda f: {"cause": 0, "warning": 1}.get(f.severity, 2))
    return Diagnosis(root_cause=root_cause(rec) if cause is _NOT_GIVEN else cause, findings=findings)


def diagnose(run_dir: str | Path) -> Diagnosis:
    return diagnose_record(RunRecord.load(run_dir))


def write(run_dir: str | Path, d: Diagnosis | None = None) -> Diagnosis:
    d = d if d is not None else diagnose(run_dir)
    rundir.write_text(Path(run_dir), "diagnosis.json", json.dumps(d.to_dict(), indent=1, default=str))
    return d


def load(run_dir: str | Path) -> dict | None:
    """diagnosis.json of a run as a dict, or None when it has none (an older run: call diagnose)."""
    text = rundir.read_text(Path(run_dir), "diagnosis.json")
    try:
        d = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return d if isinstance(d, dict) else None
