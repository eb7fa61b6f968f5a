"""What a run record must hold, and the problems History.load finds in it (docs/result.md, "Record
integrity"). A problem is recorded, never dropped: the `record_integrity` check (integrity.py) fails on
any, and the checks that read a broken part fail naming it instead of vanishing.

Which parts a record must have follows from what the runner always writes: harness.json and
scenario.yaml for every run; for a run that did not break (ending other than `error`) also events/
with the job's (or the node watcher's) events files, exits.json (the backend's collect) and, once a
planned fault was done, faults.jsonl. A record written before a rule existed (harness.json's
`schema_version` below the rule's) is not held to it: what it cannot show is listed in `unjudged`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from chaosbench import rundir

SCHEMA_VERSION = 1   # harness.json's: 1 = schema_version, run_id and collected_at recorded; 0 = before that
LATE_ALLOWANCE_S = 1.0   # events stamped this long after the collection still count as before it (see docs)


@dataclass
class IntegrityProblem:
    part: str      # the file, or "file:line", relative to the run directory
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.part}: {self.problem} ({self.fix})"


def load_json(run_dir: Path, name: str, problems: list[IntegrityProblem] | None, fix: str) -> Any:
    """A JSON part; None when missing or unparsable (and, when `problems` is given, that is a problem)."""
    if not rundir.is_link_free(run_dir, name):   # never read through a planted link (rundir.py)
        if problems is not None:
            problems.append(IntegrityProblem(name, "a symlink, not read", fix))
        return None
    text = rundir.read_text(run_dir, name) if (Path(run_dir) / name).is_file() else None
    if text is None:
        if problems is not None:
            problems.append(IntegrityProblem(name, "missing", fix))
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        if problems is not None:
            what = "empty" if not text.strip() else f"not JSON ({e.msg} at line {e.lineno})"
            problems.append(IntegrityProblem(name, what, fix))
        return None


def load_harness(run_dir: Path, problems: list[IntegrityProblem]) -> dict:
    """harness.json, the runner's record of the run; {} when it cannot be read (a problem then)."""
    fix = "the runner writes harness.json at the end of every run; judge a complete run directory"
    got = load_json(run_dir, "harness.json", problems, fix)
    if got is None:
        return {}
    if not isinstance(got, dict):
        problems.append(IntegrityProblem("harness.json", f"not a JSON object ({type(got).__name__})", fix))
        return {}
    if not got:
        problems.append(IntegrityProblem("harness.json", "an empty object: no stop reason, ending or planned faults", fix))
        return got
    broke = got.get("ending") == "error"   # a harness that broke may have stopped before any stop rule
    need = ["stop_reason"] if not broke else []
    if schema_version(got) >= 1:
        need += ["ending", "run_id"]
    for key in need:
        if key not in got:
            problems.append(IntegrityProblem("harness.json", f"no `{key}`", fix))
    return got


def schema_version(harness: dict) -> int:
    v = harness.get("schema_version", 0)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def load_scenario(run_dir: Path, problems: list[IntegrityProblem]) -> dict:
    """scenario.yaml as run; {} when missing or unreadable (a problem then)."""
    path, fix = Path(run_dir) / "scenario.yaml", "the runner stores the scenario as run before the cluster starts"
    if not path.is_file():
        problems.append(IntegrityProblem("scenario.yaml", "missing", fix))
        return {}
    try:
        data = yaml.safe_load(path.read_text(errors="replace"))
    except yaml.YAMLError as e:
        problems.append(IntegrityProblem("scenario.yaml", f"not YAML: {str(e).splitlines()[0]}", fix))
        return {}
    if not isinstance(data, dict):
        problems.append(IntegrityProblem("scenario.yaml", "not a mapping", fix))
        return {}
    return data


def scenario_faults(scenario: dict) -> list[dict]:
    """The faults scenario.yaml plans, as harness.json's `faults_planned` lists them (id, type, trigger),
    repetitions included: the plan when harness.json cannot say it."""
    out = []
    for i, f in enumerate(scenario.get("faults") or []):
        if not isinstance(f, dict):
            continue
        kinds = [k for k in f if k not in ("id", "at", "duration_s", "repeat", "kind", "params")]
        kind = str(f.get("kind") or (kinds[0] if kinds else "?"))
        fid = str(f.get("id") or f"f{i + 1}")
        times = (f.get("repeat") or {}).get("times", 1) if isinstance(f.get("repeat"), dict) else 1
        times = times if isinstance(times, int) and not isinstance(times, bool) and times > 0 else 1
        for rep in range(times):
            out.append({"id": fid if rep == 0 else f"{fid}#{rep + 1}", "type": kind, "trigger": "as scenario.yaml plans"})
    return out


def faults_log_required(harness: dict, scenario: dict) -> str | None:
    """Why faults.jsonl must exist (None: it need not): a planned fault the run finished (injected)."""
    planned = [str(p.get("id")) for p in harness.get("faults_planned") or [] if isinstance(p, dict)]
    if not harness:
        planned = [p["id"] for p in scenario_faults(scenario)]
        return f"scenario.yaml plans fault(s) {', '.join(planned)}" if planned else None
    unfinished = harness.get("faults_unfinished")
    if isinstance(unfinished, list):
        done = [f for f in planned if f not in {str(u) for u in unfinished}]
    else:   # an old record: a normal ending needs every fault done
        done = planned if harness.get("ending") in ("reached_step", "settled", "completed") else []
    return f"harness.json says fault(s) {', '.join(done)} were planned and done" if done else None


def garbled(part: str, problems: list[IntegrityProblem], lines: list[tuple[str, str]]) -> None:
    for where, text in lines:
        problems.append(IntegrityProblem(f"{part}/{where}" if part else where, f"a line that does not parse, "
                                         f"not the file's torn last line: {text}",
                                         "a writer appends whole lines; find what wrote or edited this one"))


def foreign_ids(events: list[dict], origin: dict[int, str], run_id: str | None) -> list[IntegrityProblem]:
    """Events that carry another run's id. Without the run's own id (an old record without result.json),
    the ids the events carry must agree with each other: the most common one is taken for the run's."""
    ids = [str(e["run_id"]) for e in events if e.get("run_id")]
    if not ids:
        return []
    own = run_id or max(set(ids), key=ids.count)
    basis = "the run's id" if run_id else "the id most of its events carry"
    out, seen = [], 0
    for e in events:
        rid = e.get("run_id")
        if rid and str(rid) != own:
            seen += 1
            if seen <= 20:   # the first ones name the files; the count says the rest
                out.append(IntegrityProblem(f"events/{origin.get(id(e), '?')}",
                                            f"an event of another run ({rid!r}; {basis} is {own!r})",
                                            "a run's events directory holds only its own events; "
                                            "do not reuse or copy events directories between runs"))
    if seen > 20:
        out.append(IntegrityProblem("events/", f"{seen - 20} more event(s) of another run ({basis} is {own!r})",
                                    "as above"))
    return out


def late_events(events: list[dict], origin: dict[int, str], limit: float, bound: dict[str, float | None],
                since: str) -> list[IntegrityProblem]:
    """Events stamped after the record was collected (beyond the allowance and the node's skew bound)."""
    out = []
    for e in events:
        skew = bound.get(str(e.get("node")), 0.0)
        if skew is None:
            continue
        if float(e["ts"]) > limit + LATE_ALLOWANCE_S + skew:
            out.append(IntegrityProblem(f"events/{origin.get(id(e), '?')}",
                                        f"`{e.get('event')}` stamped {float(e['ts']) - limit:.2f} s after {since}",
                                        "what a node writes after the evidence was collected is not the job's; "
                                        "it belongs in after-collection/, never in events/"))
    return out[:20] + ([IntegrityProblem("events/", f"{len(out) - 20} more event(s) after {since}", "as above")]
                       if len(out) > 20 else [])
