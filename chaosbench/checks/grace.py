"""`expect.saved_within_grace`: a preempted node's work is saved in its notice period and restored.

Per preempt_node fault: the notice is the fault log's inject ts (the SIGTERM), the kill comes
`grace_s` later. It passes when a `checkpoint_saved` lies in [notice, notice + grace_s] (one by a
rank of the preempted node if any, else any rank's, and the reason says whose) and the first
restore after that save (`checkpoint_loaded`) loaded that step. A restore of a newer step that was
saved too passes (nothing was lost); an older one fails, and so does no save in the window (the
reason says when the last save before the notice, or the first after it, was) and no restore.
Not evaluated when no preempt_node fault was planned.
"""
from __future__ import annotations

from chaosbench.checks.base import NO_EVENTS, failed, not_evaluated, passed
from chaosbench.checks.detection import planned_faults
from chaosbench.checks.history import FaultWindow, History
from chaosbench.checks.registry import check
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect

NAME = "saved_within_grace"
EXPECTED = "a checkpoint saved between the notice and the kill, and restored"


@check(NAME, needs="events, a preempt_node fault")
def saved_within_grace(h: History, e: Expect, recs: list[Recovery]) -> list[CheckResult] | None:
    """Per preempt_node: a save between notice and kill, and the restore used it."""
    if not e.saved_within_grace:
        return None
    faults = [(fid, kind) for fid, kind in planned_faults(h, None) if kind == "preempt_node"]
    if not faults:
        return [not_evaluated(NAME, EXPECTED, "no preempt_node fault was planned")]
    out = []
    for fid, kind in faults:
        r = _verdict(h, fid, kind)
        r.name, r.fault_id = f"{NAME}:{fid}", fid
        out.append(r)
    return out


def _save(e: dict, t0: float) -> str:
    return f"step {e['step']} ({e.get('tier', '?')}) by {e.get('node')}/rank {e.get('rank')} at {e['ts'] - t0:+.2f} s"


def _verdict(h: History, fid: str, kind: str) -> CheckResult:
    fw = next((w for w in h.faults if w.id == fid), None)
    if fw is None:
        return failed(NAME, EXPECTED, "not injected", h.never_injected(fid, kind))
    if not h.events:
        return not_evaluated(NAME, EXPECTED, NO_EVENTS)
    notice, grace = fw.injected_at, float(fw.params.get("grace_s", 10.0))
    kill, node = notice + grace, fw.target
    head = f"{fid} (preempt_node) on {node}: notice at 0 s, kill at {grace:g} s"
    saves = sorted((e for e in h.of("checkpoint_saved") if "step" in e), key=lambda e: e["ts"])
    window = [e for e in saves if notice <= e["ts"] <= kill]
    if not window:
        before = [e for e in saves if e["ts"] < notice]
        after = [e for e in saves if e["ts"] > kill]
        said = (f"the last save before the notice was {_save(before[-1], notice)}" if before
                else "nothing was saved before the notice either")
        if after:
            said += f"; the first after it came after the kill: {_save(after[0], notice)}"
        return failed(NAME, EXPECTED, "no save in the grace period", f"{head}; no checkpoint was saved in "
                                                                      f"between: {said}")
    own = [x for x in window if x.get("node") == node]
    best = max(own or window, key=lambda x: (int(x["step"]), -x["ts"]))
    step = int(best["step"])
    whose = "the preempted node" if own else f"not the preempted {node}: no rank of it saved in the window"
    saved = f"saved {_save(best, notice)} ({whose})"
    loads = _first_restore(h, fw, best["ts"])
    if not loads:
        return failed(NAME, EXPECTED, f"saved step {step}, never restored", f"{head}; {saved}, but no "
                                                                              "checkpoint_loaded followed it")
    got = sorted({int(x["step"]) for x in loads if x.get("step") is not None})
    took = f"{min(x['ts'] for x in loads) - notice:+.2f} s"
    older = [k for k in got if k < step]
    if older or not got:
        return failed(NAME, EXPECTED, f"restored step {older[0] if older else '?'}",
                      f"{head}; {saved}, but the restore at {took} loaded step(s) {got or '?'}: "
                      f"{'an older step' if older else 'no step said'}, the notice save was not used")
    newer = [k for k in got if k > step]
    if newer and not any(int(s["step"]) == k for s in saves for k in newer):
        return failed(NAME, EXPECTED, f"restored step {newer[0]}", f"{head}; {saved}, but the restore at {took} "
                                                                   f"loaded step {newer[0]}, which no save recorded")
    tiers = "/".join(sorted({str(x.get("tier")) for x in loads}))
    how = (f"the restore at {took} loaded it ({tiers})" if not newer else
           f"the restore at {took} loaded step {newer[0]} ({tiers}), saved after it: nothing lost")
    return passed(NAME, EXPECTED, f"step {step} saved at {best['ts'] - notice:+.2f} s", f"{head}; {saved}; {how}")


def _first_restore(h: History, fw: FaultWindow, after: float) -> list[dict]:
    """The checkpoint_loaded events of the first restore round after `after` (before the next preemption)."""
    until = min((w.injected_at for w in h.faults if w.fault == "preempt_node" and w.injected_at > fw.injected_at),
                default=float("inf"))
    later = sorted((e for e in h.of("checkpoint_loaded") if after < e["ts"] < until), key=lambda e: e["ts"])
    if not later:
        return []
    keys, rounds = h._incarnation_keys(), h.rounds()
    first = rounds[keys[id(later[0])]]
    return [e for e in later if rounds[keys[id(e)]] == first]
