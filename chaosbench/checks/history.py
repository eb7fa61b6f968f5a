"""The recorded history of a run: what checks read (never live state).

Loaded from a run directory: events/ (the trainers' events), faults.jsonl (the fault log),
exits.json (process/container exits), logs/, checkpoints.json (inventory of checkpoint files taken
before teardown), inventories/<fault>.json (the same, taken right after each fault acted) and
harness.json (when training started, why the run stopped, the planned faults).
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from chaosbench.jsonl import read_jsonl
from chaosbench.observer.received import RECEIPTS, correct
from chaosbench.observer.tail import read_events

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

    # -- loading -----------------------------------------------------------------------------
    @classmethod
    def load(cls, run_dir: Path) -> "History":
        run_dir = Path(run_dir)
        rejected: list[str] = []
        h = cls(events=_without_duplicate_steps(read_events(run_dir / "events", rejected))
                if (run_dir / "events").is_dir() else [], rejected_lines=rejected)
        if (run_dir / RECEIPTS).is_file():   # order and time events by what the harness saw (clock skew)
            h.clock_skew = correct(h.events, run_dir / "events", run_dir / RECEIPTS)
        h.faults = fault_windows(read_jsonl(run_dir / "faults.jsonl"))
        h.resolve_cooperative()
        h.agent_events = sorted((e for p in sorted((run_dir / "events").glob("agent-*.jsonl"))
                                 for e in read_jsonl(p, require="ts")), key=lambda e: e["ts"])
        h.exits = _json(run_dir / "exits.json") or {}
        h.harness = _json(run_dir / "harness.json") or {}
        h.scenario = _yaml(run_dir / "scenario.yaml")
        inv = _json(run_dir / "checkpoints.json")
        h.inventory = inv if isinstance(inv, dict) else None
        for p in sorted((run_dir / "inventories").glob("*.json")) if (run_dir / "inventories").is_dir() else []:
            got = _json(p)
            if isinstance(got, dict):
                h.inventories[str(got.get("fault_id", p.stem))] = got
        if (run_dir / "logs").is_dir():
            h.logs = {p.name: p.read_text(errors="replace") for p in sorted((run_dir / "logs").rglob("*"))
                      if p.is_file()}
        return h

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


def _yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
