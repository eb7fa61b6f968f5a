"""When faults fire and heal: a pure state machine over (time, progress, trainer events).

The runner feeds it what the observer saw and asks what is due; nothing here touches a cluster,
so trigger logic is unit-tested with synthetic clocks and events. Randomness (repeat jitter) comes
from one RNG per fault seeded by the run's seed, so a run is replayable.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

from chaosbench.scenario.model import FaultEntry


@dataclass
class Planned:
    entry: FaultEntry
    rep: int                       # 0-based repetition
    fault_id: str                  # 'f1', or 'f1#2' for the second repetition
    healable: bool
    heal_after_s: float | None     # None: never healed by the schedule (one-shot, or left in place until teardown)
    state: Literal["waiting", "injected", "done"] = "waiting"
    fire_at: float | None = None   # seconds since training start
    injected_at: float | None = None
    heal_at: float | None = None


@dataclass
class Action:
    kind: Literal["inject", "heal"]
    planned: Planned


@dataclass
class Schedule:
    faults: list[FaultEntry]
    seed: int = 0
    plans: list[Planned] = field(default_factory=list)
    _matches: dict[str, int] = field(default_factory=dict)
    _rngs: dict[str, random.Random] = field(default_factory=dict)

    def __post_init__(self):
        from chaosbench.faults.registry import get_fault
        for entry in self.faults:
            cls = get_fault(entry.kind)
            duration = entry.duration_s if entry.duration_s is not None else cls.default_duration_s
            times = entry.repeat.times if entry.repeat else 1
            self._rngs[entry.id] = random.Random(f"{self.seed}:{entry.id}:schedule")
            for rep in range(times):
                fid = entry.id if rep == 0 else f"{entry.id}#{rep + 1}"
                self.plans.append(Planned(entry, rep, fid, cls.healable, duration if cls.healable else None))

    # -- inputs -------------------------------------------------------------------------------
    def observe_event(self, ev: dict, now: float) -> None:
        """Count trainer events that match an event trigger; arm it on the Nth match."""
        for p in self.plans:
            t = p.entry.at
            if p.rep or p.state != "waiting" or p.fire_at is not None or t.event is None:
                continue
            if ev.get("event") != t.event or any(str(ev.get(k)) != str(v) for k, v in t.where.items()):
                continue
            n = self._matches[p.fault_id] = self._matches.get(p.fault_id, 0) + 1
            if n >= t.occurrence:
                p.fire_at = now + t.delay_s

    def due(self, now: float, max_step: int) -> list[Action]:
        """Actions whose time has come, heals first (a heal can arm an after_fault trigger)."""
        out = [Action("heal", p) for p in self.plans if p.state == "injected" and p.heal_at is not None
               and now >= p.heal_at]
        for p in self.plans:
            if p.state == "waiting" and p.fire_at is None:
                self._arm(p, now, max_step)
            if p.state == "waiting" and p.fire_at is not None and now >= p.fire_at:
                out.append(Action("inject", p))
        return out

    def _arm(self, p: Planned, now: float, max_step: int) -> None:
        t = p.entry.at
        if p.rep:
            first = self._plan(p.entry.id, p.rep - 1)
            if first.injected_at is not None:
                r = p.entry.repeat
                jitter = self._rngs[p.entry.id].uniform(0, r.jitter_s) if r.jitter_s else 0.0
                p.fire_at = first.injected_at + r.every_s + jitter
        elif t.seconds is not None:
            p.fire_at = t.seconds + t.delay_s
        elif t.step is not None and max_step >= t.step:
            p.fire_at = now + t.delay_s
        elif t.after_fault is not None:
            done = self._done_at(t.after_fault)
            if done is not None:
                p.fire_at = done + t.delay_s

    def _plan(self, entry_id: str, rep: int) -> Planned:
        return next(p for p in self.plans if p.entry.id == entry_id and p.rep == rep)

    def _done_at(self, entry_id: str) -> float | None:
        """When every repetition of a fault was healed (or injected, for one-shot faults)."""
        reps = [p for p in self.plans if p.entry.id == entry_id]
        if any(p.state != "done" for p in reps):
            return None
        return max(p.heal_at if p.healable and p.heal_at is not None else p.injected_at for p in reps)

    # -- outcomes the runner reports back -----------------------------------------------------
    def mark_injected(self, p: Planned, now: float) -> None:
        p.injected_at = now
        if p.heal_after_s is None:
            p.state = "done"          # one-shot, or healable without a duration: left in place until teardown
        else:
            p.state = "injected"
            p.heal_at = now + p.heal_after_s

    def mark_healed(self, p: Planned, now: float) -> None:
        p.heal_at = now
        p.state = "done"

    def unhealed(self) -> list[Planned]:
        """Injected faults whose duration has not run out yet: the runner heals them best-effort when the
        run stops, before collecting. A healable fault without a duration is not among them: it stays in
        place through collection and goes with the cluster at teardown (docs/scenarios.md)."""
        return [p for p in self.plans if p.healable and p.injected_at is not None and p.state == "injected"]

    @property
    def pending(self) -> int:
        return sum(p.state == "waiting" for p in self.plans)

    @property
    def finished(self) -> bool:
        return all(p.state == "done" for p in self.plans)
