"""The recorded history of a run: what checks read (never live state).

Loaded from a run directory: events/ (the trainers' events), faults.jsonl (the fault log),
exits.json (process/container exits), logs/, checkpoints.json (inventory of checkpoint files taken
before teardown) and harness.json (when training started, why the run stopped).
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaosbench.jsonl import read_jsonl
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
    inventory: dict | None = None   # checkpoints.json; None: no inventory was taken
    harness: dict[str, Any] = field(default_factory=dict)

    # -- loading -----------------------------------------------------------------------------
    @classmethod
    def load(cls, run_dir: Path) -> "History":
        run_dir = Path(run_dir)
        h = cls(events=read_events(run_dir / "events") if (run_dir / "events").is_dir() else [])
        h.faults = fault_windows(read_jsonl(run_dir / "faults.jsonl"))
        h.exits = _json(run_dir / "exits.json") or {}
        h.harness = _json(run_dir / "harness.json") or {}
        inv = _json(run_dir / "checkpoints.json")
        h.inventory = inv if isinstance(inv, dict) else None
        if (run_dir / "logs").is_dir():
            h.logs = {p.name: p.read_text(errors="replace") for p in sorted((run_dir / "logs").rglob("*"))
                      if p.is_file()}
        return h

    # -- queries -----------------------------------------------------------------------------
    def of(self, *names: str) -> list[dict]:
        return [e for e in self.events if e.get("event") in names]

    def _incarnation_keys(self) -> dict[int, Incarnation]:
        """id(event) -> its worker process. (node, local_rank, pid) alone is not enough: a restarted
        container gets a fresh PID namespace and its new worker the same pid as the dead one. So a
        `phase: config` line (a process's first) on a key already seen, or a restart_count that goes
        down, opens a new incarnation."""
        gen: dict[tuple, int] = {}
        last_rc: dict[tuple, int] = {}
        keys: dict[int, Incarnation] = {}
        for ev in sorted(self.events, key=lambda e: e.get("ts", 0.0)):
            base = (str(ev.get("node")), int(ev.get("local_rank", 0)), int(ev.get("pid", 0)))
            rc = int(ev.get("restart_count", 0) or 0)
            if base in gen and ((ev.get("event") == "phase" and ev.get("phase") == "config")
                                or rc < last_rc[base]):
                gen[base] += 1
            gen.setdefault(base, 0)
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

    def max_step(self) -> int | None:
        steps = [int(e["step"]) for e in self.of("step") if "step" in e]
        return max(steps) if steps else None


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


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
