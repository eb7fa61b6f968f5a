"""Measured inputs of a forecast, read from the run directories `chaosbench run` wrote.

Per fault class: every measured recovery, phase by phase (the simulator samples whole rows, so a
slow rendezvous stays paired with its own restore); per tier: checkpoint stall, save time, bytes
and the interval the run used; the step time. Only result.json is read (docs/result.md).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaosbench.instrument.tiers import TIERS
from chaosbench.report.errors import ReportInputError
from chaosbench.report.load import load_result

from . import ForecastError

# Phases of one interruption, in order. `join` is the second restart a replacement node's arrival
# costs everyone when the survivors resumed without it (world size back up to its pre-fault value):
# the pause between the last step of the shrunk round and the first step of the full one, plus the
# steps that round redid, at the pre-fault rate. `degraded` is the rest of the time lost after the
# first step (slower steps while the newcomer boots): the step-rate deficit against the pre-fault
# rate over DEGRADED_WINDOW_S after training resumed (longer if the world is still below its old
# size then), less the join.
PHASES = ("detection", "rendezvous", "restore", "first_step", "join", "degraded")
DEGRADED_WINDOW_S = 20.0


def fault_class(fault: dict[str, Any]) -> str | None:
    """The forecast's fault class of a recorded fault (None: a fault that interrupts nothing)."""
    kind = fault.get("type")
    if kind in ("kill_node", "stop_node", "disconnect", "kill_raylet"):   # kill_raylet: the node as Ray sees it
        return "node_loss"
    if kind == "kill_worker":
        return "worker_crash"
    if kind in ("pause_node", "partition"):
        return "hung_rank"
    if kind == "kill_all":
        wipe = str((fault.get("params") or {}).get("wipe") or "")
        return "new_machines" if wipe in ("all", "nvme") else "full_restart"
    return None


@dataclass
class Row:
    """One measured recovery: seconds per phase, where it restored from, on how many nodes."""
    klass: str
    run_id: str
    nodes: int
    phases: dict[str, float]
    tier: str
    lost_steps: int | None

    @property
    def total_s(self) -> float:
        return sum(self.phases.values())


@dataclass
class Measured:
    rows: list[Row] = field(default_factory=list)
    stall_s: dict[str, list[float]] = field(default_factory=dict)     # per tier, one median per run
    save_s: dict[str, list[float]] = field(default_factory=dict)
    bytes: dict[str, list[int]] = field(default_factory=dict)
    interval_steps: dict[str, list[float]] = field(default_factory=dict)
    step_time_s: list[float] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)   # recoveries that could not be used, and why
    joins: int = 0     # recoveries followed by a replacement's join round (their `join` phase)

    def classes(self) -> dict[str, list[Row]]:
        out: dict[str, list[Row]] = {}
        for r in self.rows:
            out.setdefault(r.klass, []).append(r)
        return out

    def restore_tier(self, klass: str) -> str:
        """The tier the runs' recoveries of this class restored from (the most common one)."""
        tiers = [r.tier for r in self.rows if r.klass == klass]
        return max(sorted(set(tiers)), key=tiers.count)

    def median(self, what: str, tier: str) -> float | None:
        xs = getattr(self, what).get(tier) or []
        return statistics.median(xs) if xs else None

    @property
    def step_s(self) -> float:
        return statistics.median(self.step_time_s)

    def interval_s(self, tier: str) -> float | None:
        steps = self.median("interval_steps", tier)
        return steps * self.step_s if steps is not None and self.step_time_s else None


def _progress_fn(steps: list[dict]):
    """t -> highest step any rank completed by t (redone steps count once, as bench/goodput.py)."""
    pts = sorted((float(s["ts"]), int(s["step"])) for s in steps if s.get("ts") is not None and s.get("step") is not None)
    best, ts, hi = 0, [], []
    for t, s in pts:
        best = max(best, s)
        ts.append(t), hi.append(best)

    def at(t: float) -> int:
        import bisect
        i = bisect.bisect_right(ts, t)
        return hi[i - 1] if i else 0
    return at, (ts[-1] if ts else None)


def join_round(rec: dict, steps: list[dict], rate: float | None, next_fault_at: float | None) -> tuple[float, float] | None:
    """(cost in seconds, time the full world trained again) of the replacement's join after a recovery
    that resumed on fewer nodes, or None: no join before the next fault (or the replacement made the round)."""
    t_a, before, after = rec.get("first_step_at"), rec.get("world_size_before"), rec.get("world_size_after")
    if not rate or t_a is None or not (before and after and after < before):
        return None
    end = next_fault_at if next_fault_at is not None else float("inf")
    pts = sorted((float(s["ts"]), int(s["step"]), s.get("world_size") or 0) for s in steps
                 if s.get("ts") is not None and s.get("step") is not None and t_a <= s["ts"] < end)
    back = next((i for i, p in enumerate(pts) if p[2] >= before), None)
    if not back:    # never back at full size, or no shrunk step to measure the pause from
        return None
    t_back, first = pts[back][0], pts[back][1]
    t_last, hi = pts[back - 1][0], max(p[1] for p in pts[:back])
    # the pause beyond one ordinary step, and the steps the join round rolled back and redid
    return max(0.0, t_back - t_last - 1.0 / rate) + max(0, hi - (first - 1)) / rate, t_back


def degraded_s(rec: dict, steps: list[dict], rate: float | None, next_fault_at: float | None,
               join_s: float = 0.0) -> float:
    """Seconds of training lost after the first step of a recovery, against the pre-fault rate, less
    `join_s` (the join round inside the window, counted as its own phase)."""
    t_a = rec.get("first_step_at")
    if not rate or t_a is None or not steps:
        return 0.0
    # progress of this round only: steps redone after the rollback are the recomputation phase
    at, last = _progress_fn([s for s in steps if s.get("ts") is not None and s["ts"] >= t_a])
    t_b = t_a + DEGRADED_WINDOW_S
    before, after = rec.get("world_size_before"), rec.get("world_size_after")
    if before and after and after < before:   # still shrunk: the window lasts until the old size trains again
        back = [float(s["ts"]) for s in steps if s.get("ts", 0) > t_a and (s.get("world_size") or 0) >= before]
        if back:
            t_b = max(t_b, min(back))
    t_b = min(x for x in (t_b, next_fault_at, last) if x is not None)
    if t_b <= t_a:
        return 0.0
    return max(0.0, (t_b - t_a) - (at(t_b) - at(t_a)) / rate - join_s)


def _interval_steps(checkpoints: list[dict], tier: str) -> float | None:
    """Median step gap between one node's consecutive successful saves of a tier."""
    by_node: dict[str, list[int]] = {}
    for c in checkpoints:
        if c.get("tier") == tier and c.get("ok") and c.get("step") is not None:
            by_node.setdefault(str(c.get("node")), []).append(int(c["step"]))
    gaps = [b - a for steps in by_node.values() for a, b in zip(sorted(set(steps)), sorted(set(steps))[1:])]
    return statistics.median(gaps) if gaps else None


def add_result(m: Measured, result: dict, source: str) -> None:
    """Add one run's measurements (result.json as a dict) to `m`."""
    run_id = str(result.get("run_id") or source)
    nodes = int((result.get("cluster") or {}).get("nodes") or 0) or 1
    faults = {f.get("id"): f for f in result.get("faults") or []}
    timeline = result.get("timeline") or {}
    steps = timeline.get("steps") or []
    rate = (result.get("goodput") or {}).get("baseline_steps_per_s")
    if rate:
        m.step_time_s.append(1.0 / rate)
    inject_times = sorted(f["injected_at"] for f in faults.values() if f.get("injected_at") is not None)
    for rec in result.get("recoveries") or []:
        fault = faults.get(rec.get("fault_id")) or {}
        klass = fault_class(fault)
        if klass is None:
            continue
        total = rec.get("total_s")
        if total is None or rec.get("problems"):
            m.skipped.append(f"{source}: recovery of {rec.get('fault_id')} not used: "
                             + ("it never resumed training" if total is None else "; ".join(rec["problems"])))
            continue
        ph = {p: float(rec.get(f"{p}_s") or 0.0) for p in PHASES[:4]}
        ph["join"] = 0.0
        # a phase whose end was not seen is null; its time is in the next measured one: keep the total
        ph["rendezvous"] += max(0.0, float(total) - sum(ph.values()))
        nxt = min((t for t in inject_times if t > rec.get("injected_at", 0)), default=None)
        join = join_round(rec, steps, rate, nxt)
        if join is not None:
            ph["join"] = join[0]
            m.joins += 1
        ph["degraded"] = degraded_s(rec, steps, rate, nxt, ph["join"])
        m.rows.append(Row(klass, run_id, nodes, ph, str(rec.get("tier") or "none"), rec.get("lost_steps")))
    for tier in TIERS:
        st = (result.get("checkpoints") or {}).get(tier) or {}
        for what, key in (("stall_s", "stall_s_median"), ("save_s", "total_s_median"), ("bytes", "bytes_median")):
            if st.get(key) is not None:
                getattr(m, what).setdefault(tier, []).append(st[key])
        gap = _interval_steps(timeline.get("checkpoints") or [], tier)
        if gap is not None:
            m.interval_steps.setdefault(tier, []).append(gap)
    m.runs.append(run_id)


def load_runs(paths: list[str | Path]) -> Measured:
    """Every run directory's result.json; a directory without one, or with no recovery, is exit 2."""
    m = Measured()
    if not paths:
        raise ForecastError("no run directory given; pass reports/<run-id> directories written by `chaosbench run`")
    for p in paths:
        try:
            result = load_result(Path(p))
        except ReportInputError as e:
            raise ForecastError(str(e)) from None
        before = len(m.rows)
        try:
            add_result(m, result, str(p))
        except (TypeError, ValueError, KeyError, AttributeError) as e:   # a hand-edited or foreign result.json
            raise ForecastError(f"{p}/result.json: a recovery, checkpoint or step field has the wrong type or is "
                                f"missing ({type(e).__name__}: {e}); re-run the scenario (schema: docs/result.md)") from None
        if len(m.rows) == before:
            why = f" ({m.skipped[-1]})" if m.skipped else ""
            raise ForecastError(f"{p}: no recovery to learn from{why}; give the run directory of a scenario that "
                                "kills a node, a worker or every node (e.g. scenarios/node_loss.yaml)")
    if not m.step_time_s:
        raise ForecastError(f"{' '.join(map(str, paths))}: no step rate measured (goodput.baseline_steps_per_s is "
                            "null): the job must log steps before its first fault")
    return m
