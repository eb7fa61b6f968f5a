"""Per-fault recovery breakdown: detection -> rendezvous -> restore -> first step.

A recovery is the first restart round that trained again after a fault: the worker incarnations
(new processes) that started after the injection, before the next fault, and no later than the
round's first completed step (a step needs every rank of the world, so the ranks of that round had
all started by then). Incarnations that start after it (a healed node rejoining, which is another
restart round) belong to no fault's breakdown. Definitions, all read from the history:
- detected_at: first sign of the failure (health_check_failed, fatal, or an old incarnation
  entering shutdown) after the injection. The fault log records an injection once the action
  returned (`docker kill` has taken effect), so survivors can see a node fault before it is
  recorded: for a fault on named nodes, signs from other nodes after the target's last event count
  too, and detected_at then precedes injected_at;
- rendezvous_done_at: the first event of the round (workers start only once the agents'
  rendezvous completed);
- restored_at: the last checkpoint_loaded / checkpoint_fresh_start of the round (all ranks
  restored);
- first_step_at: the round's first completed step.

The phases split total_s = first_step_at - injected_at: detection_s + rendezvous_s + restore_s +
first_step_s == total_s. A phase whose start or end was not seen, or was seen out of order
(detection before the injection record or after the round started; a restore after the first step,
clocks of different hosts), is None and the phase after it starts at the last measured point:
without detection, rendezvous_s counts from the injection; without a restore, restore_s and
first_step_s are both None.
"""
from __future__ import annotations

from chaosbench.checks.history import FaultWindow, History, Incarnation
from chaosbench.result import Recovery

DETECTION_EVENTS = ("health_check_failed", "fatal")


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def recoveries(h: History) -> list[Recovery]:
    starts = h.incarnation_starts()
    groups = h.by_incarnation()
    out: list[Recovery] = []
    floor = float("-inf")   # nothing before the previous fault (or its recovery) belongs to this one
    for i, fw in enumerate(h.faults):
        end = h.faults[i + 1].injected_at if i + 1 < len(h.faults) else float("inf")
        rec = _recovery(h, fw, end, floor, starts, groups)
        if rec is not None:
            out.append(rec)
        floor = max(fw.injected_at, (rec.first_step_at if rec is not None else None) or fw.injected_at)
    return out


def _is_sign(e: dict) -> bool:
    return e.get("event") in DETECTION_EVENTS or (e.get("event") == "phase" and e.get("phase") == "shutdown")


def _target_nodes(h: History, fw: FaultWindow) -> set[str]:
    """The nodes a fault acted on, when its target names nodes ('node-2', 'node-0,node-1')."""
    names = {str(e.get("node")) for e in h.events}
    nodes = {t.strip() for t in str(fw.target).split(",") if t.strip()}
    return nodes if nodes and nodes <= names else set()


def _detected_at(h: History, fw: FaultWindow, floor: float, old: list[Incarnation], groups) -> float | None:
    t0 = fw.injected_at
    signs = [e["ts"] for inc in old for e in groups[inc] if e["ts"] >= t0 and _is_sign(e)]
    targets = _target_nodes(h, fw)
    if targets:
        # The action (a kill) took effect at the earliest right after the target's last event.
        last = [e["ts"] for e in h.events if str(e.get("node")) in targets and floor < e["ts"] < t0]
        if last:
            acted_after = max(last)
            signs += [e["ts"] for inc in old if inc[0] not in targets for e in groups[inc]
                      if acted_after < e["ts"] < t0 and _is_sign(e)]
    return min(signs) if signs else None


def _ms(a: float, b: float) -> int:
    return round((b - a) * 1000)


def _recovery(h: History, fw: FaultWindow, end: float, floor: float, starts, groups) -> Recovery | None:
    t0 = fw.injected_at
    new = [inc for inc, ts in starts.items() if t0 <= ts < end]
    if not new:
        return None
    old = [inc for inc, ts in starts.items() if ts < t0]
    old_steps = [e for inc in old for e in groups[inc] if e.get("event") == "step"]
    step_before = max((int(e["step"]) for e in old_steps), default=None)
    last_old = max(old_steps, key=lambda e: e["ts"], default=None)
    rec = Recovery(fault_id=fw.id, injected_at=t0, step_before_fault=step_before,
                   world_size_before=last_old.get("world_size") if last_old else None,
                   detected_at=_detected_at(h, fw, floor, old, groups))
    first_step = {inc: min((e for e in groups[inc] if e.get("event") == "step"), key=lambda e: e["ts"])
                  for inc in new if any(e.get("event") == "step" for e in groups[inc])}
    if not first_step:
        rec.failed_restarts = len(new)
        return rec   # restarted but never trained again: every later field stays unknown (null)
    first = min(first_step.values(), key=lambda e: e["ts"])
    # The round: every incarnation that trained and had started by the first step. Later ones are
    # the next restart round (a healed node rejoining), not this recovery.
    round_ = [inc for inc in first_step if starts[inc] <= first["ts"]]
    rec.failed_restarts = sum(1 for inc in new if inc not in first_step and starts[inc] <= first["ts"])
    ev_round = sorted((e for inc in round_ for e in groups[inc]), key=lambda e: e["ts"])
    rec.rendezvous_done_at = min(starts[inc] for inc in round_)
    loads = [e for e in ev_round if e.get("event") in ("checkpoint_loaded", "checkpoint_fresh_start")]
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
    _phases(rec)
    return rec


def _phases(rec: Recovery) -> None:
    """Split total_s over the measured points, in whole milliseconds so the phases add up exactly."""
    t0 = rec.injected_at
    total = _ms(t0, rec.first_step_at)
    rec.total_s = total / 1000
    det, rdzv = rec.detected_at, rec.rendezvous_done_at
    base = 0
    if det is not None and t0 <= det <= rdzv:
        base = _ms(t0, det)
        rec.detection_s = base / 1000
    rec.rendezvous_s = (_ms(t0, rdzv) - base) / 1000
    if rec.restored_at is not None and rdzv <= rec.restored_at <= rec.first_step_at:
        restored = _ms(t0, rec.restored_at)
        rec.restore_s = (restored - _ms(t0, rdzv)) / 1000
        rec.first_step_s = (total - restored) / 1000
