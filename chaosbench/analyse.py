"""The one analyse step of a recorded run, shared by `chaosbench run` (runner._finish) and
`chaosbench recheck`: load the History once, find the root cause once, evaluate the checks, derive
recoveries, timeline, goodput and the lineage, diagnose, and write result.json, diagnosis.json,
junit.xml and report.html once each (docs/result.md, "What the analyse step writes").

The run directory's events are parsed here, once, by History.load (chaosbench/checks/history.py);
diagnosis reads the same History (diagnosis/record.py), and the report reads only what this step
wrote. Every file it writes goes through chaosbench/rundir.py, never through a link planted there.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from chaosbench import rundir
from chaosbench.checks import evaluate
from chaosbench.checks.history import History
from chaosbench.checks.lineage import lineage_summary
from chaosbench.checks.summary import checkpoint_stats, goodput, timeline
from chaosbench.diagnosis import Diagnosis, diagnose_record, write as write_diagnosis
from chaosbench.diagnosis.record import RunRecord
from chaosbench.diagnosis.rootcause import root_cause
from chaosbench.result import CheckResult, FaultRecord, RunResult
from chaosbench.scenario.model import Expect

Say = Callable[[str], None]
# endings whose stop reason names the root cause across nodes (a crash loop may outlast the run)
EXPLAINED = ("every node exited", "stuck", "timeout")
# what this step writes: a link planted at one of these names is replaced, never read or followed
OUTPUTS = {"report.html", "junit.xml", "diagnosis.json", "result.previous.json"}


@dataclass
class Analysis:
    history: History
    result: RunResult
    diagnosis: Diagnosis


def verdict_of(checks: list[CheckResult], error: str | None) -> str:
    """`error` when the harness broke, else `failed` if any blocking check did not pass."""
    if error:
        return "error"
    return "failed" if any(c.blocking for c in checks) else "passed"


def apply_fault_verdicts(faults: dict[str, FaultRecord], checks: list[CheckResult]) -> None:
    """Each fault's own check verdict goes on its record too (not evaluated counts as failed)."""
    for c in checks:
        if c.fault_id is not None and c.fault_id in faults:
            rec = faults[c.fault_id]
            rec.verdict, rec.reason = c.status if c.status != "not_evaluated" else "failed", c.reason


def explain_stop(harness: dict, rec: RunRecord, cause) -> bool:
    """A run that stopped with every node gone, stuck or timed out names its root cause across nodes
    in harness['stop_reason'] (the first failure in time and its error; a peer's connection error that
    followed is a consequence, not the cause); without a failure in the logs, the last exception line
    of the first log that has one. Once: a stop reason that names one already is left as it is.
    True when it changed the harness record."""
    stop = harness.get("stop_reason") or ""
    if not stop.startswith(EXPLAINED) or "root_cause" in harness or "; last exception in " in stop:
        return False
    if cause is not None:
        harness["stop_reason"] = f"{stop}; root cause: {cause.summary}"
        harness["root_cause"] = {"node": cause.node, "error": cause.error, "repeats": cause.repeats,
                                 "first_failure_at": cause.first_failure_at}
        return True
    for node in sorted(rec.logs):
        errors = rec.errors(node)
        if errors:
            harness["stop_reason"] = f"{stop}; last exception in {node}'s log: {errors[-1].text.strip()[:300]}"
            return True
    return False


def shown_skew(h: History) -> dict[str, dict]:
    """Per node, the skew the harness measured, where any node went beyond the threshold; {} otherwise
    (a run without skew shows no table in the report)."""
    return dict(sorted(h.clock_skew.items())) if any(s.get("corrected") for s in h.clock_skew.values()) else {}


def lineage_of(h: History, say: Say) -> dict | None:
    """result.json's `lineage`: the per-rank step track (chaosbench/checks/lineage.py)."""
    try:
        return lineage_summary(h)
    except Exception as e:   # the verdict stands without the track (the invariants judge the lineage
        say(f"lineage not summarised: {type(e).__name__}: {e}")   # itself); the report shows none
        return None


def analyse(run_dir: str | Path, expect: Expect, base: Callable[[History], RunResult], *, say: Say,
            record_stop: bool = False, write: bool = True) -> Analysis:
    """Judge the run recorded in run_dir and write its files. `base(history)` gives the result to fill
    (the runner's new one, recheck's stored one); `record_stop`: the run itself writes the root cause
    into harness.json (a recheck leaves the harness record as the run left it); `write=False` writes
    nothing (`chaosbench recheck --dry-run`)."""
    run_dir = Path(run_dir)
    h = History.load(run_dir, outputs=OUTPUTS)
    rec = RunRecord.of(run_dir, h, result={})
    try:
        cause = root_cause(rec)
    except Exception as e:   # the verdict stands without it; say why the cause is missing
        cause = None
        say(f"root cause not found: {type(e).__name__}: {e}")
    if explain_stop(h.harness, rec, cause) and record_stop and write:
        rundir.write_text(run_dir, "harness.json", json.dumps(h.harness, indent=1))
    first = base(h)
    recs, checks = evaluate(h, expect)
    faults = {f.id: f.model_copy() for f in first.faults}
    apply_fault_verdicts(faults, checks)
    result = first.model_copy(update={
        "checks": checks, "recoveries": recs, "faults": list(faults.values()),
        "verdict": verdict_of(checks, first.error), "stop_reason": h.harness.get("stop_reason", first.stop_reason),
        "checkpoints": checkpoint_stats(h), "timeline": timeline(h), "goodput": goodput(h),
        "lineage": lineage_of(h, say), "clock_skew": shown_skew(h), "links": h.links})
    rec.result = result.model_dump(mode="json")
    diagnosis = diagnose_record(rec, cause)
    if write:
        write_files(run_dir, result, diagnosis, say)
    return Analysis(h, result, diagnosis)


def write_files(run_dir: Path, result: RunResult, diagnosis: Diagnosis, say: Say) -> None:
    """result.json, diagnosis.json, junit.xml and the HTML report (which stands or falls on its own):
    the one writer of a run's files, for `chaosbench run` and `chaosbench recheck`."""
    from chaosbench.report import render_run, write_junit   # here: the checks import result.py, not the templates
    result.write(run_dir)
    data = result.model_dump(mode="json")
    write_junit(data, run_dir / "junit.xml")
    write_diagnosis(run_dir, diagnosis)
    try:
        render_run(run_dir, result=data, diagnosis=json.loads(json.dumps(diagnosis.to_dict(), default=str)))
    except Exception as e:   # the run record stands without its HTML view
        say(f"report rendering failed: {type(e).__name__}: {e}")
