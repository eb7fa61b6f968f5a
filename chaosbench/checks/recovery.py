"""Per-fault recovery breakdown: detection -> rendezvous -> restore -> first step.

A recovery is the set of worker incarnations (new processes) that started after a fault and
before the next one. Definitions, all read from the history:
- detected_at: first sign of the failure from a surviving worker (health_check_failed, fatal,
  or an old incarnation entering shutdown) after the injection;
- rendezvous_done_at: the first event of a new incarnation that went on to train (workers start
  only once the agents' rendezvous completed);
- restored_at: the last checkpoint_loaded / checkpoint_fresh_start of those incarnations (all
  ranks restored);
- first_step_at: the first step they completed.
"""
from __future__ import annotations

from chaosbench.checks.history import FaultWindow, History
from chaosbench.result import Recovery

DETECTION_EVENTS = ("health_check_failed", "fatal")


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def recoveries(h: History) -> list[Recovery]:
    starts = h.incarnation_starts()
    groups = h.by_incarnation()
    out = []
    for i, fw in enumerate(h.faults):
        end = h.faults[i + 1].injected_at if i + 1 < len(h.faults) else float("inf")
        rec = _recovery(h, fw, end, starts, groups)
        if rec is not None:
            out.append(rec)
    return out


def _recovery(h: History, fw: FaultWindow, end: float, starts, groups) -> Recovery | None:
    t0 = fw.injected_at
    new = [inc for inc, ts in starts.items() if t0 <= ts < end]
    trained = [inc for inc in new if any(e.get("event") == "step" for e in groups[inc])]
    if not new:
        return None
    old = [inc for inc, ts in starts.items() if ts < t0]
    old_steps = [e for inc in old for e in groups[inc] if e.get("event") == "step"]
    step_before = max((int(e["step"]) for e in old_steps), default=None)
    last_old = max(old_steps, key=lambda e: e["ts"], default=None)
    detected = [e["ts"] for inc in old for e in groups[inc]
                if e["ts"] >= t0 and (e.get("event") in DETECTION_EVENTS
                                      or (e.get("event") == "phase" and e.get("phase") == "shutdown"))]
    rec = Recovery(fault_id=fw.id, injected_at=t0, step_before_fault=step_before,
                   world_size_before=last_old.get("world_size") if last_old else None,
                   detected_at=min(detected) if detected else None)
    rec.failed_restarts = len(new) - len(trained)
    if not trained:
        return rec   # restarted but never trained again: every later field stays unknown (null)
    ev_new = sorted((e for inc in trained for e in groups[inc]), key=lambda e: e["ts"])
    rec.rendezvous_done_at = min(starts[inc] for inc in trained)
    loads = [e for e in ev_new if e.get("event") in ("checkpoint_loaded", "checkpoint_fresh_start")]
    steps = [e for e in ev_new if e.get("event") == "step"]
    first = steps[0]
    rec.first_step_at = first["ts"]
    rec.world_size_after = first.get("world_size")
    if loads:
        rec.restored_at = max(e["ts"] for e in loads)
        loaded = [e for e in loads if e.get("event") == "checkpoint_loaded"]
        if loaded:
            tiers = {str(e["tier"]) for e in loaded if e.get("tier") is not None}
            rec.tier = ",".join(sorted(tiers)) if tiers else None   # 'memory,nvme' if ranks disagree
            rec.restored_step = max(int(e["step"]) for e in loaded if e.get("step") is not None) \
                if any(e.get("step") is not None for e in loaded) else None
            sources = sorted({str(e["source"]) for e in loaded if e.get("source")})
            rec.source = ",".join(sources) or None
            sizes = [int(e["bytes"]) for e in loaded if e.get("bytes") is not None]
            rec.bytes = max(sizes) if sizes else None
            durs = [float(e["duration_s"]) for e in loaded if e.get("duration_s") is not None]
            rec.restore_duration_s = _r(max(durs)) if durs else None
        else:
            rec.tier, rec.restored_step = "none", 0   # fresh start: everything was lost
    if step_before is not None and rec.restored_step is not None:
        rec.lost_steps = max(0, step_before - rec.restored_step)
    base = rec.detected_at if rec.detected_at is not None else t0
    rec.detection_s = _r(rec.detected_at - t0) if rec.detected_at is not None else None
    rec.rendezvous_s = _r(rec.rendezvous_done_at - base)
    if rec.restored_at is not None:
        rec.restore_s = _r(rec.restored_at - rec.rendezvous_done_at)
        rec.first_step_s = _r(rec.first_step_at - rec.restored_at)
    rec.total_s = _r(rec.first_step_at - t0)
    return rec
