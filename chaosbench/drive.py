"""The scenario's faults as live objects during a run: prepared once training starts, injected and
healed as the schedule says, each action kept in its FaultRecord (result.json's `faults`) and in the
schedule, and what was planned written to the harness record for the checks (checks/fault_outcomes.py).

The runner (chaosbench/runner.py) decides *when*; this module carries out one action and records it.
"""
from __future__ import annotations

import random
import time
import threading
from pathlib import Path
from typing import Callable

from chaosbench.checks.history import History
from chaosbench.cluster.errors import ClusterError
from chaosbench.evidence.collect import inventory_at
from chaosbench.faults import FaultContext, FaultLog, get_fault
from chaosbench.faults.base import Fault
from chaosbench.faults.inprocess import is_cooperative
from chaosbench.result import FaultRecord
from chaosbench.scenario.schedule import Schedule


class FaultDriver:
    def __init__(self, cluster, sched: Schedule, run_dir: Path, seed: int, harness: dict,
                 records: dict[str, FaultRecord], walking: list[threading.Thread], say: Callable[[str], None]):
        self.cluster, self.sched, self.run_dir, self.seed = cluster, sched, run_dir, seed
        self.harness, self.records, self.walking, self.say = harness, records, walking, say
        self.faults: dict[str, Fault] = {}

    def prepare(self) -> None:
        """Build and prepare every planned fault (add_node's standby boots here); a fault that cannot
        be prepared is a harness error before any fault fires."""
        log = FaultLog(self.run_dir / "faults.jsonl")
        for p in self.sched.plans:
            cls = get_fault(p.entry.kind)
            ctx = FaultContext(cluster=self.cluster, log=log, rng=random.Random(f"{self.seed}:{p.fault_id}:target"))
            fault = self.faults[p.fault_id] = cls(p.fault_id, cls.Params.model_validate(p.entry.params), ctx)
            try:
                fault.prepare()
            except Exception as e:
                raise ClusterError(f"fault {p.fault_id} ({p.entry.kind}) could not be prepared: {e}") from e
            self.records[p.fault_id] = FaultRecord(id=p.fault_id, type=p.entry.kind, trigger=p.entry.at.describe(),
                                                   params=p.entry.params)
        # what was planned, so the checks can judge each fault against it (checks/fault_outcomes.py)
        self.harness["faults_planned"] = [{"id": p.fault_id, "type": p.entry.kind, "trigger": p.entry.at.describe(),
                                           "healable": p.healable, "heal_after_s": p.heal_after_s}
                                          for p in self.sched.plans]

    def act(self, kind: str, p, t0: float) -> None:
        """One action the schedule says is due: 'inject' or 'heal'."""
        (self.heal if kind == "heal" else self.inject)(p, t0)

    def inject(self, p, t0: float) -> None:
        self.say(f"injecting {p.fault_id}: {p.entry.kind} ({p.entry.at.describe()})")
        rec, fault = self.records[p.fault_id], self.faults[p.fault_id]
        try:
            ts = fault.inject()
        except Exception as e:
            rec.error = f"inject failed: {type(e).__name__}: {e}"
            raise ClusterError(f"fault {p.fault_id} ({p.entry.kind}) could not be injected: {e}") from e
        rec.injected_at, rec.target = ts, fault.target
        self.sched.mark_injected(p, ts - t0)
        # what the storage held at this moment, walked in the background (evidence/collect.py)
        self.walking.append(inventory_at(self.cluster, self.run_dir, p.fault_id))

    def heal_ended(self, t0: float) -> None:
        """Heal now a fault in place whose effect ended by itself (Fault.ended); the fault check reads
        `faults_ended` to tell that early heal from a cut-short one."""
        for p in self.sched.plans:
            fault = self.faults[p.fault_id]
            if p.state != "injected" or type(fault).ended is Fault.ended:
                continue
            try:
                why = fault.ended()
            except (ClusterError, ValueError, OSError):   # a node gone, a read refused or cut: it lasts its duration
                why = None
            if why:
                self.harness.setdefault("faults_ended", {})[p.fault_id] = why
                self.say(f"{p.fault_id} ended by itself: {why}")
                self.heal(p, t0)

    def heal(self, p, t0: float, best_effort: bool = False) -> None:
        self.say(f"healing {p.fault_id}: {p.entry.kind}")
        try:
            ts = self.faults[p.fault_id].heal()
        except Exception as e:
            self.records[p.fault_id].error = f"heal failed: {type(e).__name__}: {e}"
            if best_effort:
                return
            raise ClusterError(f"fault {p.fault_id} ({p.entry.kind}) could not be healed: {e}") from e
        self.records[p.fault_id].healed_at = ts
        self.sched.mark_healed(p, (ts if ts is not None else time.time()) - t0)

    def heal_unhealed(self, t0: float) -> None:
        """At the stop: a fault whose duration_s the stop cut short is healed now, before collecting; a
        healable fault without duration_s stays in place until teardown (docs/scenarios.md)."""
        for p in self.sched.unhealed():
            self.heal(p, t0, best_effort=True)


def cooperative_times(records: dict[str, FaultRecord], h: History) -> None:
    """A cooperative fault happened when the job fired it (fault_fired), not when it was delivered."""
    for fid, rec in records.items():
        if not is_cooperative(rec.type):
            continue
        fired = next((w for w in h.faults if w.id == fid), None)
        if fired is not None:
            rec.injected_at = fired.injected_at
        elif fid in h.unfired:
            rec.injected_at, rec.error = None, h.never_injected(fid, rec.type)
