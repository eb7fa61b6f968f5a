"""`chaosbench recheck reports/<run-id>`: judge a stored run again with today's checks.

A run directory holds the whole recorded history (events, logs, fault log, harness record,
inventories) and the scenario as it was run, so the checks -- pure functions over that history --
can be evaluated again without a cluster, as Jepsen's `analyze` does. Used after a checks change
(did any stored verdict move?) and to confirm that a verdict follows from the evidence alone.

The run and this command share one analyse step (chaosbench/analyse.py): the previous result is kept
as `result.previous.json`, and result.json, diagnosis.json, junit.xml and the HTML report are
written again, never through a link planted in the run directory. Exit codes as `chaosbench run`: 0 passed,
1 failed, 2 bad input (no run record, a scenario today's schema refuses), 3 a run whose harness broke.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from chaosbench import rundir
from chaosbench.analyse import analyse
from chaosbench.result import CheckResult, RunResult
from chaosbench.scenario import ScenarioError
from chaosbench.scenario.loader import parse_scenario

EXIT = {"passed": 0, "failed": 1, "error": 3}
REQUIRED = ("result.json", "scenario.yaml", "harness.json")


class RecheckInputError(Exception):
    """The directory is not a run record this version can judge (exit 2)."""


@dataclass
class Recheck:
    run_dir: Path
    old_verdict: str
    new_verdict: str
    changed: list[tuple[str, str | None, str | None]] = field(default_factory=list)   # check, old, new

    @property
    def exit_code(self) -> int:
        return EXIT[self.new_verdict]

    def as_dict(self) -> dict:
        return {"run_dir": str(self.run_dir), "old_verdict": self.old_verdict, "new_verdict": self.new_verdict,
                "changed": [{"check": n, "old": o, "new": v} for n, o, v in self.changed]}


def recheck(run_dir: str | Path, write: bool = True) -> Recheck:
    """Judge a stored run again; with write=False nothing in the run directory changes (--dry-run)."""
    run_dir = Path(run_dir)
    for name in REQUIRED:
        if not rundir.is_link_free(run_dir, name):
            raise RecheckInputError(f"{run_dir / name}: a symlink; a run record's parts are plain files "
                                    f"({rundir.FIX})")
        if not (run_dir / name).is_file():
            raise RecheckInputError(f"{run_dir}: no {name} here (give a reports/<run-id> directory written by "
                                    f"`chaosbench run`)")
    try:
        old = RunResult.read(run_dir)
    except ValueError as e:
        raise RecheckInputError(f"{run_dir / 'result.json'}: not a run record this version reads: {e}") from e
    source = str(run_dir / "scenario.yaml")
    try:
        data = yaml.safe_load(rundir.read_text(run_dir, "scenario.yaml") or "")
        if isinstance(data, dict) and isinstance(data.get("cluster"), dict):
            data["cluster"]["backend"] = "auto"   # the checks do not depend on it; result.json keeps it
        scenario = parse_scenario(data, source=source)
    except (ScenarioError, yaml.YAMLError) as e:
        raise RecheckInputError(f"the stored scenario no longer validates: {e}") from e
    say = lambda msg: print(msg, file=sys.stderr)   # noqa: E731
    if write:
        rundir.write_text(run_dir, "result.previous.json", rundir.read_text(run_dir, "result.json") or "")
    new = analyse(run_dir, scenario.expect, lambda h: old, say=say, write=write).result
    return Recheck(run_dir, old.verdict, new.verdict, _diff(old.checks, new.checks))


def _diff(old: list[CheckResult], new: list[CheckResult]) -> list[tuple[str, str | None, str | None]]:
    was = {c.name: c.status for c in old}
    now = {c.name: c.status for c in new}
    return [(n, was.get(n), now.get(n)) for n in sorted(set(was) | set(now)) if was.get(n) != now.get(n)]


def main(run_dirs: list[str], as_json: bool = False, write: bool = True, echo=print) -> int:
    codes, rows = [], []
    for d in run_dirs:
        try:
            r = recheck(d, write=write)
        except RecheckInputError as e:
            echo(f"error: {e}")
            codes.append(2)
            continue
        codes.append(r.exit_code)
        rows.append(r.as_dict())
        if not as_json:
            moved = "unchanged" if r.old_verdict == r.new_verdict else "CHANGED"
            echo(f"{d}: {r.old_verdict} -> {r.new_verdict} ({moved})")
            for name, o, v in r.changed:
                echo(f"  {name}: {o or 'absent'} -> {v or 'absent'}")
    if as_json:
        echo(json.dumps(rows, indent=1))
    return max(codes) if codes else 2
