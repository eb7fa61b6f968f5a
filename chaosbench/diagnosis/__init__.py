"""From verdict to diagnosis: what broke in a run, on which node, because of which setting or code
pattern, and what to change (docs/diagnosis.md).

    diagnose(run_dir) -> Diagnosis(root_cause, findings)     a pure function of the recorded run dir
    write(run_dir)    -> Diagnosis                           also writes run_dir/diagnosis.json
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .model import Diagnosis, Evidence, Finding, RootCause
from .record import RunRecord
from .rootcause import root_cause
from .rules import RULES

__all__ = ["Diagnosis", "Evidence", "Finding", "RootCause", "diagnose", "load", "write"]


def diagnose(run_dir: str | Path) -> Diagnosis:
    rec = RunRecord.load(run_dir)
    findings: list[Finding] = []
    for rule in RULES:
        try:
            findings += rule.check(rec)
        except Exception as e:   # one broken rule must not hide the others' findings; say it failed
            findings.append(Finding(rule=rule.__name__.rsplit(".", 1)[-1], title=f"rule could not run: "
                                    f"{type(e).__name__}: {e}", fix="report this as a chaosbench bug", effect="",
                                    severity="error"))
    findings.sort(key=lambda f: {"cause": 0, "warning": 1}.get(f.severity, 2))
    return Diagnosis(root_cause=root_cause(rec), findings=findings)


def write(run_dir: str | Path) -> Diagnosis:
    d = diagnose(run_dir)
    path = Path(run_dir) / "diagnosis.json"
    tmp = path.with_name(".diagnosis.json.tmp")
    tmp.write_text(json.dumps(d.to_dict(), indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)
    return d


def load(run_dir: str | Path) -> dict | None:
    """diagnosis.json of a run as a dict, or None when it has none (an older run: call diagnose)."""
    try:
        d = json.loads((Path(run_dir) / "diagnosis.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None
