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
  too, and detected_at then precedes injected_at. A torchft survivor's group seeing the lost group
  leave its quorum (quorum.py quorum_shrinks) is a sign too: its processes never restart; so is
  Ray Train's controller judging the worker group failed (or deciding to resize it), read from its
  own log with its own clock (observer/ray_controller.py): a loop without events gets it too;
- group_restart_at: the launcher starting the worker group that trained (Ray Train's controller:
  its last `rendezvous_start` between the detection and the round's first event); a point inside
  the rendezvous phase, not a phase: detection -> group_restart_at is the launcher's wait and the
  starts that failed, group_restart_at -> rendezvous_done_at the start of the group that trained;
- rendezvous_done_at: the first event of the round (workers start only once the agents'
  rendezvous completed);
- restored_at: the last checkpoint_loaded / checkpoint_fresh_start of the round (all ranks
  restored);
- first_step_at: the round's first completed step;
- step_before_fault: the world's step when the round took its state up (lineage.world_step_at at
  lineage.resume_point: its first restore or heal, else its first step). Where every process
  restarts that is the world's last step before the fault; where survivors train on (torchft),
  the step they had reached by the heal, so a group that heals from a live peer loses nothing.
  lost_steps = step_before_fault - restored_step.

The phases split total_s = first_step_at - injected_at: detection_s + rendezvous_s + restore_s +
first_step_s == total_s. A phase whose start or end was not seen, or was seen out of order
(detection before the injection record or after the round started; a restore after the first step,
clocks of different hosts), is None and the phase after it starts at the last measured point:
without detection, rendezvous_s counts from the injection; without a restore, restore_s and
first_step_s are both None.
"""
from __future__ import annotations

from chaosbench.checks.history import FaultWindow, History, Incarnation
from chaosbench.checks.lineage import recovery_round, resume_point, world_step_at
from chaosbench.checks.quorum import quorum_run, quorum_shrinks
from chaosbench.observer.ray_controller import controller_events, is_controller_log
from chaosbench.result import Recovery

DETECTION_EVENTS = ("health_check_failed", "fatal")
RESTORE_EVENTS = ("checkpoint_loaded", "checkpoint_fresh_start")


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


def _controller(h: History) -> list[dict]:
    """Ray Train's controller's events (observer/ray_controller.py), parsed once per History: every
    fault's detection and breakdown, and the detection checks, read them (parsed again when the
    controller logs or the run id were replaced)."""
    stamp = (id(h.logs), h.run_id, tuple((k, len(v)) for k, v in h.logs.items() if is_controller_log(k)))
    got = h.__dict__.get("_controller_events")
    if got is None or got[0] != stamp:
        got = h.__dict__["_controller_events"] = (stamp, controller_events(h.logs, h.run_id))
    return got[1]


def launcher_events(h: History) -> list[dict]:
    """The agent events of the run: the node watcher's (agent-*.jsonl) and Ray Train's controller's,
    read from its log under logs/ (observer/ray_controller.py), by time."""
    return sorted(h.agent_events + _controller(h), key=lambda a: a["ts"])


def _controller_signs(h: History) -> list[dict]:
    """Ray Train's controller noticing a change: a failed group, or its decision to resize the group."""
    return [a for a in _controller(h)
            if a["event"] == "worker_group_failed" or (a["event"] == "worker_group_restart" and "from" in a)]


def _is_sign(e: dict) -> bool:
    return e.get("event") in DETECTION_EVENTS or (e.get("event") == "phase" and e.get("phase") == "shutdown")


def _target_nodes(h: History, fw: FaultWindow) -> set[str]:
    """The nodes a fault acted on, when its target names nodes ('node-2', 'node-0,node-1')."""
    names = {str(e.get("node")) for e in h.events}
    nodes = {t.strip() for t in str(fw.target).split(",") if t.strip()}
    return nodes if nodes and nodes <= names else set()


def _detected_at(h: History, fw: FaultWindow, floor: float, end: float, old: list[Incarnation],
                 groups) -> float | None:
    t0 = fw.injected_at
    signs = [e["ts"] for inc in old for e in groups[inc] if e["ts"] >= t0 and _is_sign(e)]
    controller = [a["ts"] for a in _controller_signs(h) if a["ts"] < end]
    signs += [ts for ts in controller if ts >= t0]
    targets = _target_nodes(h, fw)
    if targets:
        # The action (a kill) took effect at the earliest right after the target's last event.
        last = [e["ts"] for e in h.events if str(e.get("node")) in targets and floor < e["ts"] < t0]
        if last:
            acted_after = max(last)
            signs += [e["ts"] for inc in old if inc[0] not in targets for e in groups[inc]
                      if acted_after < e["ts"] < t0 and _is_sign(e)]
            signs += [ts for ts in controller if acted_after < ts < t0]
    # torchft: a survivor's group sees the lost group leave its quorum (the fault's own nodes see only their return)
    signs += [ts for ts, node, _ in quorum_shrinks(h) if t0 <= ts and node not in targets]
    return min(signs) if signs else None


def _ms(a: float, b: float) -> int:
    return round((b - a) * 1000)


def _recovery(h: History, fw: FaultWindow, end: float, floor: float, starts, groups) -> Recovery | None:
    t0 = fw.injected_at
    started, members, dead = recovery_round(h, t0, end)
    new = [i.key for i in started]
    if not new:
        return None
    old = [inc for inc, ts in starts.items() if ts < t0]
    old_steps = [e for inc in old for e in groups[inc] if e.get("event") == "step"]
    # lost work is counted against the world's step when the round took its state up (lineage.world_step_at): where
    # every process restarts that is the last step before the fault; where survivors train on (torchft), the
    # step they had reached by the heal, so a survivor that never restarts loses nothing
    cut = resume_point(h, members) if members else max(i.start for i in started)
    step_before = world_step_at(h, cut, quorum_run(h))
    last_old = max(old_steps, key=lambda e: e["ts"], default=None)
    rec = Recovery(fault_id=fw.id, injected_at=t0, step_before_fault=step_before,
                   world_size_before=last_old.get("world_size") if last_old else None,
                   detected_at=_detected_at(h, fw, floor, end, old, groups))
    if not members:
        rec.failed_restarts = len(new)
        return rec   # restarted but never trained again: every later field stays unknown (null)
    # The round (lineage.recovery_round): the first round that trained after the fault. Later ones
    # are the next restart round (a healed node rejoining), not this recovery.
    first_step = {i.key: i.steps[0] for i in members}
    first = min(first_step.values(), key=lambda e: e["ts"])
    round_ = list(first_step)
    rec.failed_restarts = len(dead)
    rec.rendezvous_done_at = min(starts[inc] for inc in round_)
    rec.group_restart_at = _group_restart(h, rec)
    rec.first_step_at = first["ts"]
    rec.world_size_after = first.get("world_size")
    rec.ranks_after = len(round_)
    sizes = {inc: e.get("world_size") for inc, e in first_step.items() if inc in round_}
    if len(set(sizes.values())) > 1:
        rec.problems.append("ranks of the round report different world sizes: " + ", ".join(
            f"{inc[0]}/local{inc[1]}: {ws}" for inc, ws in sorted(sizes.items(), key=lambda kv: str(kv[0]))))
    _restore_round(rec, {inc: groups[inc] for inc in round_}, first_step)
    split_phases(rec)
    return rec


def _group_restart(h: History, rec: Recovery) -> float | None:
    """Ray Train's controller starting the group that trained: its last `rendezvous_start` after the
    detection (else the injection) and no later than the round's first event."""
    since = min(rec.injected_at, rec.detected_at) if rec.detected_at is not None else rec.injected_at
    starts = [a["ts"] for a in _controller(h)
              if a["event"] == "rendezvous_start" and since <= a["ts"] <= rec.rendezvous_done_at]
    return max(starts) if starts else None


def _label(inc: Incarnation) -> str:
    return f"{inc[0]}/local{inc[1]} (pid {inc[2]})"


def _restore_round(rec: Recovery, round_: dict[Incarnation, list[dict]], first_step: dict) -> None:
    """What the round restored, judged per rank: every rank of the round must report the same
    restore (a load of one tier and step, or a fresh start on all), before the step after it.
    Anything else is listed in rec.problems; lost work counts from the lowest restored step."""
    restore: dict[Incarnation, dict] = {}
    late: list[str] = []   # one process, one clock: a restore logged after the rank trained is no restore of it
    for inc, evs in round_.items():
        got = [e for e in evs if e.get("event") in RESTORE_EVENTS]
        first = first_step.get(inc)
        before = [e for e in got if first is None or e["ts"] <= first["ts"]]
        if before:
            restore[inc] = before[-1]
        elif got:
            restore[inc] = got[-1]
            late.append(f"{_label(inc)} logged its restore {got[-1]['ts'] - first['ts']:.3f} s after its first "
                        f"step (step {first.get('step')})")
    if not restore:
        return   # nothing to judge: the checks say which event was missing
    rec.restored_at = max(e["ts"] for e in restore.values())
    problems = rec.problems
    if late:
        problems.append("restore after training had begun: " + "; ".join(late))
    silent = [inc for inc in round_ if inc not in restore and not _only_observed(round_[inc])]
    if silent:
        problems.append("no checkpoint_loaded or checkpoint_fresh_start from " + ", ".join(map(_label, silent)))
    loaded = {inc: e for inc, e in restore.items() if e.get("event") == "checkpoint_loaded"}
    fresh = [inc for inc in restore if inc not in loaded]
    if loaded and fresh:
        problems.append("fresh start on " + ", ".join(map(_label, fresh)) + " beside checkpoint loads on "
                        + ", ".join(map(_label, loaded)))
    unverified = [inc for inc, e in loaded.items() if e.get("checksum_ok") is False]
    if unverified:   # the trainer itself says the bytes it went on with did not match their checksum
        problems.append("checkpoint_loaded with checksum_ok=false on " + ", ".join(map(_label, unverified)))
    tiers = {str(e.get("tier")) if e.get("tier") is not None else None for e in loaded.values()}
    if None in tiers and len(tiers) > 1:
        problems.append("checkpoint_loaded without 'tier' on "
                        + ", ".join(_label(i) for i, e in loaded.items() if e.get("tier") is None))
    named = sorted(t for t in tiers if t is not None) + (["none"] if fresh else [])
    rec.tier = ",".join(named) if named else None     # 'memory,nvme' if ranks disagree
    if len(named) > 1:
        problems.append("ranks restored from different tiers: " + _per_rank(restore, "tier"))
    steps = {inc: (0 if inc in fresh else int(e["step"]) if e.get("step") is not None else None)
             for inc, e in restore.items()}
    known = [s for s in steps.values() if s is not None]
    if len(set(known)) > 1:
        problems.append("ranks restored different steps: " + _per_rank(restore, "step"))
    rec.restored_step = min(known) if known else None
    if rec.restored_step is not None and rec.step_before_fault is not None:
        rec.lost_steps = rec.step_before_fault - rec.restored_step
        if rec.lost_steps < 0:
            problems.append(f"restored step {max(known)} is above the last step before the fault "
                            f"({rec.step_before_fault}): no such checkpoint can exist")
    jumps = [f"{_label(inc)} restored {steps[inc]} but first trained step {first_step[inc]['step']}"
             for inc in restore if inc in first_step and steps[inc] is not None
             and first_step[inc].get("step") is not None and int(first_step[inc]["step"]) != steps[inc] + 1]
    if jumps:
        problems.append("training did not resume at the step after the restore: " + "; ".join(jumps))
    sources = sorted({str(e["source"]) for e in loaded.values() if e.get("source")})
    rec.source = ",".join(sources) or None
    sizes = [int(e["bytes"]) for e in loaded.values() if e.get("bytes") is not None]
    rec.bytes = max(sizes) if sizes else None
    durs = [float(e["duration_s"]) for e in loaded.values() if e.get("duration_s") is not None]
    rec.restore_duration_s = _r(max(durs)) if durs else None
    rec.claims = [{"node": inc[0], "local_rank": inc[1], "tier": e.get("tier"), "step": e.get("step"),
                   "source": e.get("source"), "live": e.get("live"), "ts": e["ts"]} for inc, e in loaded.items()]


def _only_observed(evs: list[dict]) -> bool:
    """Lines the harness observed itself (a trainer without events): they never carry a restore."""
    return all(e.get("observed") for e in evs)


def _per_rank(restore: dict[Incarnation, dict], key: str) -> str:
    def val(e):
        return "fresh start" if e.get("event") == "checkpoint_fresh_start" else str(e.get(key, "?"))
    return ", ".join(f"{inc[0]}/local{inc[1]}: {val(e)}" for inc, e in sorted(restore.items()))


def split_phases(rec: Recovery) -> None:
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
