"""`expect.max_detection_seconds`: per fault, how long the job took to notice it.

detection_s = the first sign that the job noticed, minus the injection. Signs, read from the history:
`health_check_failed`, `fatal`, a worker entering `phase: shutdown` with a `reason` (a signal; the
clean shutdown at the end of training carries none), a worker process that started after the
injection (a restart), the torchrun agents' `worker_group_failed` / `rendezvous_start`
(agent-*.jsonl) and Ray Train's controller's failed group, restart or resize decision and group
start, read from its own log with its own clock (observer/ray_controller.py), a torchft quorum that
lost a group (quorum.py quorum_shrinks: the survivors never restart, the Lighthouse dropping the
group is how they notice), a pre-fault worker that exited (seen
by the node watcher) other than the fault's own victim, and the recovery's detected_at (which may
precede the injection record: recovery.py). What the heal itself started (the target node's new
workers and agent after `healed_at`) is no sign. Signs after the next fault's injection belong to it.

Which faults: every planned fault, or those `expect.detect_faults` names (an id covers its
repetitions `<id>#N`). A fault the job is meant to ride through without noticing (`throttle_node`)
is left out by naming the others. A fault never injected fails. A fault no sign followed fails once
the run went on for the bound after it ("hung N s after the fault; it would wait for <timeout>",
timeouts.py); a run that stopped sooner is not evaluated: it never passes.
"""
from __future__ import annotations

from chaosbench.checks.base import NO_EVENTS, failed, not_evaluated, passed
from chaosbench.checks.ending import ending_of
from chaosbench.checks.history import FaultWindow, History
from chaosbench.checks.quorum import quorum_shrinks
from chaosbench.checks.recovery import launcher_events
from chaosbench.checks.registry import check
from chaosbench.checks.timeouts import timeout_in_force
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect

SIGN_EVENTS = ("health_check_failed", "fatal")
# hang_detected: a launcher's own hang detection (ft_launcher's rank monitor timing out a rank's heartbeats);
# worker_group_restart: its decision to restart or resize the group (Ray Train's controller logs it first on a join)
AGENT_SIGNS = ("worker_group_failed", "worker_group_restart", "rendezvous_start", "hang_detected")


def planned_faults(h: History, only: list[str] | None) -> list[tuple[str, str]]:
    """(id, type) of every fault the run planned (harness.json), else of every injected one; `only`
    keeps the ids it names and their repetitions."""
    plan = [(str(p["id"]), str(p.get("type", "?"))) for p in h.harness.get("faults_planned") or []]
    plan = plan or [(w.id, w.fault) for w in h.faults]
    return [(fid, kind) for fid, kind in plan if only is None or fid.split("#")[0] in only]


def run_end(h: History) -> float | None:
    stopped = h.harness.get("stopped_at")
    if isinstance(stopped, (int, float)):
        return float(stopped)
    seen = [e["ts"] for e in h.events + launcher_events(h)]
    return max(seen) if seen else None


def _next_injection(h: History, fw: FaultWindow) -> float:
    return min((w.injected_at for w in h.faults if w.injected_at > fw.injected_at), default=float("inf"))


def first_sign(h: History, fw: FaultWindow, rec: Recovery | None) -> tuple[float, str] | None:
    """(time, what) of the first sign that the job noticed `fw`, or None."""
    # what happens once the harness stopped the run (its teardown ends the workers) is not the job noticing
    stopped = h.harness.get("stopped_at")
    t0, until = fw.injected_at, min(_next_injection(h, fw), stopped if isinstance(stopped, (int, float)) else float("inf"))
    targets = {t.strip() for t in str(fw.target).split(",") if t.strip()}
    victim_rank = fw.params.get("local_rank")
    healed = fw.healed_at if fw.healed_at is not None else float("inf")

    def by_heal(node) -> bool:   # the heal restarted it, the job noticed nothing
        return str(node) in targets
    signs: list[tuple[float, str]] = []
    groups = h.by_incarnation()
    for inc, evs in groups.items():
        for e in evs:
            name = e.get("event")
            if name in SIGN_EVENTS or (name == "phase" and e.get("phase") == "shutdown" and e.get("reason")):
                signs.append((e["ts"], f"{name if name != 'phase' else 'shutdown'} on {inc[0]}/local{inc[1]}"))
            elif name == "worker_exit" and e.get("observed") and not (
                    inc[0] in targets and victim_rank in (None, inc[1])):
                signs.append((e["ts"], f"worker exit on {inc[0]}/local{inc[1]}"))
    for (node, lr, _, _), start in h.incarnation_starts().items():
        if not (by_heal(node) and start >= healed):
            signs.append((start, f"new worker on {node}/local{lr}"))
    for a in launcher_events(h):
        if a.get("event") in AGENT_SIGNS and not (by_heal(a.get("node")) and a["ts"] >= healed):
            who = "Ray Train controller" if a.get("launcher") == "ray" else f"{a.get('launcher', 'torchrun')} agent"
            signs.append((a["ts"], f"{who} {a['event']} on {a.get('node')}"))
    # torchft: a group saw another leave its quorum (the Lighthouse dropped it, or it came back under a new id)
    signs += [(ts, what) for ts, node, what in quorum_shrinks(h) if not (by_heal(node) and ts >= healed)]
    signs = [s for s in signs if t0 <= s[0] < until]
    if rec is not None and rec.detected_at is not None and rec.detected_at < until:
        signs.append((rec.detected_at, "recovery's first sign"))
    return min(signs) if signs else None


@check("max_detection_seconds", "max_detection_seconds", needs="events, a fault")
def max_detection_seconds(h: History, e: Expect, recs: list[Recovery]) -> list[CheckResult] | None:
    """Per fault: injection -> first sign the job noticed it, within N s."""
    if e.max_detection_seconds is None:
        return None
    bound = e.max_detection_seconds
    faults = planned_faults(h, e.detect_faults)
    if not faults:
        named = f" among detect_faults {e.detect_faults}" if e.detect_faults else ""
        return [not_evaluated("max_detection_seconds", f"<= {bound:g} s", f"no fault was planned{named}")]
    out = []
    for fid, kind in faults:
        r = _verdict(h, bound, fid, kind, recs)
        r.name, r.fault_id = f"max_detection_seconds:{fid}", fid
        out.append(r)
    return out


def _verdict(h: History, bound: float, fid: str, kind: str, recs: list[Recovery]) -> CheckResult:
    name, expected = "max_detection_seconds", f"<= {bound:g} s"
    stop = h.harness.get("stop_reason")
    why = f" (run stopped: {stop})" if stop else ""
    fw = next((w for w in h.faults if w.id == fid), None)
    if fw is None:
        return failed(name, expected, "not injected", h.never_injected(fid, kind) + why)
    if not h.events and not launcher_events(h):
        return not_evaluated(name, expected, NO_EVENTS)
    sign = first_sign(h, fw, next((r for r in recs if r.fault_id == fid), None))
    if sign is not None:
        took = round(max(0.0, sign[0] - fw.injected_at), 3)
        ok = took <= bound
        return h.timed((passed if ok else failed)(name, expected, took, f"{fid} ({kind}) on {fw.target or 'its target'}: "
                                                                        f"noticed after {took:g} s ({sign[1]})"),
                       bound - took)   # the clock-skew caveat (History.timed)
    end = run_end(h)
    lasted = None if end is None else round(end - fw.injected_at, 1)
    if lasted is None or lasted < bound:
        return not_evaluated(name, expected, f"{fid} ({kind}): no sign the job noticed it, but the run stopped "
                                             f"{lasted if lasted is not None else '?'} s after it, before the "
                                             f"{bound:g} s bound could be judged (ending {ending_of(h)}){why}")
    # training went on only if it stepped past the bound: the ranks still in flight when a peer hung
    # finish the step they were in before they block, and that is no sign of life
    stepped = any(ev["ts"] > fw.injected_at + bound for ev in h.of("step"))
    wait = timeout_in_force(h)
    if stepped:
        return failed(name, expected, None, f"{fid} ({kind}): no sign the job noticed it in the {lasted:g} s the run "
                                            f"went on after it (training went on); timeout in force: {wait}{why}")
    return failed(name, expected, None, f"hung {lasted:g} s after the fault {fid} ({kind}) without noticing it; "
                                        f"it would wait for {wait}{why}")
