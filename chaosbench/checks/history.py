"""The recorded history of a run: what checks read (never live state).

Loaded from a run directory: events/ (the trainers' events), faults.jsonl (the fault log),
exits.json (process/container exits), logs/, checkpoints.json (inventory of checkpoint files taken
before teardown), inventories/<fault>.json (the same, taken right after each fault acted) and
harness.json (when training started, why the run stopped, the planned faults). What is missing or
broken in the record is recorded in `integrity` (checks/record.py), never dropped silently.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaosbench import rundir
from chaosbench.checks import record
from chaosbench.checks.record import IntegrityProblem
from chaosbench.jsonl import read_numbered
from chaosbench.observer.received import RECEIPTS, SkewState, correct, skew_state
from chaosbench.observer.tail import read_events
from chaosbench.result import CheckResult

CAVEAT_S = 0.5   # a measured skew uncertainty above this is said in timing checks' reasons (two polls)
Incarnation = tuple[str, int, int, int]   # (node, local_rank, pid, generation): one worker process lifetime


@dataclass
class FaultWindow:
    id: str
    fault: str
    target: str
    params: dict[str, Any]
    injected_at: float
    healed_at: float | None = None


@dataclass
class History:
    events: list[dict] = field(default_factory=list)
    faults: list[FaultWindow] = field(default_factory=list)
    exits: dict[str, Any] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    agent_events: list[dict] = field(default_factory=list)   # node watcher: torchrun agents (agent-*.jsonl)
    inventory: dict | None = None   # checkpoints.json; None: no inventory was taken
    inventories: dict[str, dict] = field(default_factory=dict)   # fault id -> inventory at its injection
    harness: dict[str, Any] = field(default_factory=dict)
    rejected_lines: list[str] = field(default_factory=list)   # event lines with wrong-typed fields
    scenario: dict[str, Any] = field(default_factory=dict)   # scenario.yaml as run (raw); {}: none stored
    # cooperative faults (faults/inprocess.py) delivered but never carried out: id -> why
    unfired: dict[str, str] = field(default_factory=dict)
    # node -> its clock skew as the harness measured it (observer/received.py); events of a node beyond
    # the threshold carry the corrected `ts` (their own stamp in `ts_node`)
    clock_skew: dict[str, dict] = field(default_factory=dict)
    # the record's standing (checks/record.py): what is missing or broken in it, never dropped
    integrity: list[IntegrityProblem] = field(default_factory=list)
    unjudged: list[str] = field(default_factory=list)   # rules a record older than them cannot be held to
    schema_version: int = 0   # harness.json's; 0: written before records carried one
    skew: SkewState = field(default_factory=SkewState)
    run_id: str | None = None
    source: Path | None = None   # the run directory it was loaded from; None: built in memory (tests)
    origin: dict[int, str] = field(default_factory=dict, repr=False)
    links: list[str] = field(default_factory=list)   # symlinks found in the run directory (never read)   # id(event) -> "events file:line"

    # -- loading -----------------------------------------------------------------------------
    @classmethod
    def load(cls, run_dir: Path, outputs: frozenset[str] | set[str] = frozenset()) -> "History":
        """The record of a run directory, every problem with it in `integrity` (checks/record.py).
        `outputs`: the files the analyse step writes over (a link there is replaced, not read)."""
        run_dir = Path(run_dir)
        h = cls(source=run_dir)
        # a symlink is a part the record cannot vouch for (a downloaded artifact can point it anywhere):
        # record_integrity fails naming it, and nothing below reads through it (rundir.py)
        h.links = [part for part in rundir.links(run_dir) if part not in outputs and not part.endswith(".tmp")]
        h.integrity += [IntegrityProblem(part, "a symlink: not the run's own file; not read", rundir.FIX)
                        for part in h.links]
        h.harness = record.load_harness(run_dir, h.integrity)
        h.schema_version = record.schema_version(h.harness)
        h.scenario = record.load_scenario(run_dir, h.integrity)
        broke = h.harness.get("ending") == "error"   # a broken harness may have stopped before writing more
        result = record.load_json(run_dir, "result.json", None, "")
        result = result if isinstance(result, dict) else {}
        h.run_id = str(h.harness.get("run_id") or result.get("run_id") or "") or None
        h._load_events(run_dir, required=not broke)
        h._load_faults(run_dir, required=not broke)
        h.exits = record.load_json(run_dir, "exits.json", None if broke else h.integrity,
                                   "the backend records every node's exits when the evidence is collected")
        if h.exits is None:
            h.exits = {}
        elif not isinstance(h.exits, dict):
            h.integrity.append(record.IntegrityProblem("exits.json", "not a JSON object", "rerun; exits.json maps "
                                                       "each node to its exits"))
            h.exits = {}
        # a link planted in the run directory fails record_integrity and is never read (rundir.py)
        inv = record.load_json(run_dir, "checkpoints.json", None, "")
        h.inventory = inv if isinstance(inv, dict) else None
        for name in rundir.files(run_dir, "inventories", ".json"):
            got = record.load_json(run_dir, f"inventories/{name}", None, "")
            if isinstance(got, dict):
                h.inventories[str(got.get("fault_id", Path(name).stem))] = got
        if (run_dir / "logs").is_dir() and rundir.is_link_free(run_dir, "logs"):
            # keyed by the path under logs/: every node's Ray logs/raylet.out is its own
            h.logs = {p.relative_to(run_dir / "logs").as_posix(): text for p in sorted((run_dir / "logs").rglob("*"))
                      if (text := rundir.read_text(run_dir, p.relative_to(run_dir))) is not None}
        h._judge_events(result)
        return h

    def _load_events(self, run_dir: Path, required: bool) -> None:
        events_dir, garbled, origin = run_dir / "events", [], {}
        if not rundir.is_link_free(run_dir, "events") or not any(
                not p.is_symlink() for p in events_dir.glob("events-*.jsonl")):
            if required:
                self.integrity.append(record.IntegrityProblem(
                    "events/", "missing" if not events_dir.is_dir() else "no events-*.jsonl file",
                    "every run's job (or the node watcher around it) writes events-<node>-local<N>.jsonl; "
                    "see logs/ for why none was written"))
            return
        self.events = _without_duplicate_steps(read_events(events_dir, self.rejected_lines, garbled, origin))
        self.agent_events = read_events(events_dir, None, garbled, origin, pattern="agent-*.jsonl")
        record.garbled("events", self.integrity, garbled)
        self.origin = origin
        measured = None
        if (run_dir / RECEIPTS).is_file() and rundir.is_link_free(run_dir, RECEIPTS):   # order and time events by what the harness saw (clock skew)
            measured = self.clock_skew = correct(self.events, events_dir, run_dir / RECEIPTS)
        elif self.schema_version >= 1 and required and self.events:
            self.integrity.append(record.IntegrityProblem(
                RECEIPTS, "missing: no node's clock skew can be measured",
                "the live tail writes it in the run directory on every poll that reads an event line"))
        elif self.events:
            self.unjudged.append(f"{RECEIPTS} (the record may predate it: clock skew not measured)")
        cluster = self.scenario.get("cluster") if isinstance(self.scenario.get("cluster"), dict) else {}
        kinds = {p.get("type") for p in self.harness.get("faults_planned") or [] if isinstance(p, dict)}
        kinds |= {p["type"] for p in record.scenario_faults(self.scenario)}
        self.skew = skew_state(measured, sorted({str(e.get("node")) for e in self.events + self.agent_events}),
                               cluster.get("backend"), "clock_skew" in kinds)

    def _load_faults(self, run_dir: Path, required: bool) -> None:
        path = run_dir / "faults.jsonl"
        need = record.faults_log_required(self.harness, self.scenario) if required else None
        if not path.is_file():
            if need:
                self.integrity.append(record.IntegrityProblem(
                    "faults.jsonl", f"missing, though {need}",
                    "the runner logs every injection and heal there; without it no fault has evidence"))
            return
        garbled, bad = [], []
        lines = []
        for n, rec in read_numbered(path, None, bad, garbled):
            if {"ts", "id", "action"} - set(rec):
                garbled.append((n, f"no {', '.join(sorted({'ts', 'id', 'action'} - set(rec)))}: {json.dumps(rec)[:80]}"))
            else:
                lines.append(rec)
        garbled += [(int(b.split()[1].rstrip(":")), b.split(": ", 1)[1]) for b in bad]
        record.garbled("", self.integrity, [(f"faults.jsonl:{n}", text) for n, text in sorted(garbled)])
        self.faults = fault_windows(lines)
        self.resolve_cooperative()

    def _judge_events(self, result: dict) -> None:
        """Events of another run, and events stamped after the record was collected."""
        evs = self.events + self.agent_events
        self.integrity += record.foreign_ids(evs, self.origin, self.run_id)
        if not self.run_id:
            self.unjudged.append("the run's own id (harness.json `run_id`, result.json); the events' ids were "
                                 "held to each other only")
        limit, since = self.harness.get("collected_at"), "the evidence was collected"
        if not isinstance(limit, (int, float)):
            limit, since = result.get("finished_at"), "the run finished (result.json; the record predates collected_at)"
        if isinstance(limit, (int, float)) and limit > 0:
            self.integrity += record.late_events(evs, self.origin, float(limit), self.skew.bound_s, since)
        elif evs:
            self.unjudged.append("events after the stop (no `collected_at` in harness.json, no result.json)")
        unbounded = sorted(n for n, b in self.skew.bound_s.items() if b is None)
        if unbounded and isinstance(limit, (int, float)):
            self.unjudged.append(f"events after the stop on {', '.join(unbounded)} (clock skew unknown)")

    # -- the record's standing -----------------------------------------------------------------
    def timing_caveat(self) -> str | None:
        """What a timing check (recovery, detection, slowdown) must add to its reason about the clocks, or None."""
        if not self.skew.known:
            return f"clock skew unknown: {self.skew.why}"
        worst = self.skew.worst_s or 0.0
        if worst > CAVEAT_S:
            node = max(self.skew.bound_s, key=lambda n: self.skew.bound_s[n] or 0.0)
            return (f"{node}'s clock may be off the harness's by up to {worst:.2f} s (measured in received.jsonl, "
                    f"too little to tell from a read delay)")
        return None

    def timed(self, r: CheckResult, margin_s: float | None) -> CheckResult:
        """A timing check's result with the caveat added; a pass by less than the clock-skew uncertainty
        (`margin_s`: how far the measured time is inside its bound) is not evaluated: it may not hold."""
        caveat = self.timing_caveat()
        if caveat:
            r.reason = f"{r.reason} ({caveat})"
        worst = self.skew.worst_s
        if r.status == "passed" and margin_s is not None and (worst is None or margin_s < worst):
            r.status, r.observed = "not_evaluated", None
            within = "an unbounded" if worst is None else f"its {worst:.2f} s"
            r.reason = f"inside the bound by {margin_s:.2f} s only, within {within} clock-skew uncertainty: {r.reason}"
        return r

    def resolve_cooperative(self) -> None:
        """A cooperative fault's inject record is the command's delivery; the fault happened when the
        job said `fault_fired` (matched by fault_id), and that is its injected_at. Without it the
        fault never happened: it leaves `faults` (every check sees it as not injected) for `unfired`."""
        from chaosbench.faults.inprocess import is_cooperative
        kept = []
        for w in self.faults:
            if not is_cooperative(w.fault):
                kept.append(w)
                continue
            fired = self.fired(w.id)
            if fired is not None and fired.get("event") == "fault_fired":
                w.injected_at = float(fired["ts"])
                kept.append(w)
            elif fired is not None:
                self.unfired[w.id] = (f"the job refused it at step {fired.get('step', '?')} on rank "
                                      f"{fired.get('rank', '?')}: {fired.get('reason') or 'no reason given'}")
            else:
                rank = str(w.target).removeprefix("rank ") or "?"
                at = w.params.get("step")
                where = f"at step >= {at} on rank {rank}" if at is not None else \
                    f"on rank {rank} after the command was delivered"
                self.unfired[w.id] = f"the job never reached the fault point (no cb.step/cb.fault_point {where})"
        self.faults = kept

    def fired(self, fault_id: str) -> dict | None:
        """The job's first `fault_fired` or `fault_refused` event for this fault, or None."""
        return next((e for e in sorted(self.of("fault_fired", "fault_refused"), key=lambda e: e.get("ts", 0.0))
                     if str(e.get("fault_id")) == fault_id), None)

    def never_injected(self, fid: str, kind: str) -> str:
        """Why a planned fault has no window: never injected, or delivered to a job that never acted."""
        if fid in self.unfired:
            return f"{fid} ({kind}) was delivered to the job but never fired: {self.unfired[fid]}"
        return f"{fid} ({kind}) was planned but never injected"

    # -- queries -----------------------------------------------------------------------------
    def of(self, *names: str) -> list[dict]:
        return [e for e in self.events if e.get("event") in names]

    def _incarnation_keys(self) -> dict[int, Incarnation]:
        """id(event) -> its worker process. (node, local_rank, pid) alone is not enough: a restarted
        container gets a fresh PID namespace and its new worker the same pid as the dead one. So a
        process's first line on a key already seen opens a new incarnation: the node watcher's
        `worker_start`, or the trainer's `phase: config` unless only the watcher spoke of this process
        so far (its worker_start comes first); a restart_count that goes down does too."""
        gen: dict[tuple, int] = {}
        last_rc: dict[tuple, int] = {}
        trainer_spoke: dict[tuple, bool] = {}
        keys: dict[int, Incarnation] = {}
        for ev in sorted(self.events, key=lambda e: e.get("ts", 0.0)):
            base = (str(ev.get("node")), int(ev.get("local_rank", 0)), int(ev.get("pid", 0)))
            rc = int(ev.get("restart_count", 0) or 0)
            name = ev.get("event")
            if base in gen and (name == "worker_start" or rc < last_rc[base]
                                or (name == "phase" and ev.get("phase") == "config" and trainer_spoke[base])):
                gen[base] += 1
                trainer_spoke[base] = False
            gen.setdefault(base, 0)
            trainer_spoke[base] = trainer_spoke.get(base, False) or not ev.get("observed")
            last_rc[base] = rc
            keys[id(ev)] = (*base, gen[base])
        return keys

    def incarnation(self, ev: dict) -> Incarnation:
        return self._incarnation_keys()[id(ev)]

    def incarnation_starts(self) -> dict[Incarnation, float]:
        keys, starts = self._incarnation_keys(), {}
        for ev in self.events:
            starts.setdefault(keys[id(ev)], ev["ts"])
        return starts

    def by_incarnation(self) -> dict[Incarnation, list[dict]]:
        keys, out = self._incarnation_keys(), defaultdict(list)
        for ev in self.events:
            out[keys[id(ev)]].append(ev)
        return out

    def rounds(self) -> dict[Incarnation, int]:
        """Each worker process's rendezvous round (0, 1, ...): the processes that trained together,
        as the run's lineage defines them (checks/lineage.py)."""
        from chaosbench.checks.lineage import lineage
        return {i.key: i.round for i in lineage(self).incarnations}

    @property
    def observed_only(self) -> bool:
        """Every event came from the node watcher: the trainer itself wrote none."""
        return bool(self.events) and all(e.get("observed") for e in self.events)

    def max_step(self) -> int | None:
        steps = [int(e["step"]) for e in self.of("step") if "step" in e]
        return max(steps) if steps else None


def _without_duplicate_steps(events: list[dict]) -> list[dict]:
    """A process that reports its own steps needs no steps read off its output by the node watcher."""
    own = {(e.get("node"), e.get("local_rank"), e.get("pid")) for e in events
           if e.get("event") == "step" and not e.get("observed")}
    return [e for e in events if not (e.get("observed") and e.get("event") == "step"
                                      and (e.get("node"), e.get("local_rank"), e.get("pid")) in own)]


def fault_windows(lines: list[dict]) -> list[FaultWindow]:
    windows: dict[str, FaultWindow] = {}
    for rec in lines:
        fid = str(rec.get("id"))
        if rec.get("action") == "inject":
            windows[fid] = FaultWindow(fid, rec.get("fault", "?"), rec.get("target", ""),
                                       rec.get("params") or {}, rec["ts"])
        elif rec.get("action") == "heal" and fid in windows:
            windows[fid].healed_at = rec["ts"]
    return sorted(windows.values(), key=lambda w: w.injected_at)
