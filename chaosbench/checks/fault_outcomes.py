"""One verdict per planned fault: did it fire, and did it stay in place as long as planned?

A fault that never fired, or was healed early (the run stopped first and healed it best-effort),
tested nothing: a `no_restart` or `reaches_step` that passes around it would be a false pass. The
plan comes from harness.json (`faults_planned`, written by the runner), or, where harness.json
cannot say it (missing, empty), from scenario.yaml's `faults:` (always stored): a broken record never
makes a fault's check vanish. What happened comes from the fault log; without one, every planned
fault fails as having no evidence it was injected. These checks run whenever faults were planned,
whatever `expect` says. The time to resume is a timing: the clock-skew caveat applies (History.timed).

Each fault's verdict also says whether training went on after it (stalls.py), restart or not: a
fault after which training never resumed fails, and so does one after which it resumed later than
`max_recovery_seconds`. A scenario that expects an abnormal ending (`expect: {ends: stuck}`) expects
exactly that: then a fault the stop cut short, or after which training stood still, is its story.
"""
from __future__ import annotations

from chaosbench.checks.base import failed, passed
from chaosbench.checks.ending import NORMAL, ending_of
from chaosbench.checks.history import History
from chaosbench.checks.record import scenario_faults
from chaosbench.checks.registry import check
from chaosbench.checks.stalls import resumptions
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect

SLACK_S = 0.05   # clock rounding between the schedule and the fault log


@check("fault", always=True, needs="the fault log",
       help="each planned fault fired, stayed in place as planned, and training went on after it")
def fault_checks(h: History, e: Expect, recs: list[Recovery]) -> list[CheckResult]:
    """One `fault:<id>` result per planned fault, carrying that fault's id."""
    out = []
    for plan in planned(h):
        r = _fault_verdict(h, e, recs, plan)
        r.fault_id = str(plan["id"])
        out.append(r)
    return out


def planned(h: History) -> list[dict]:
    """harness.json's planned faults; scenario.yaml's when a loaded record's harness.json cannot say."""
    if "faults_planned" in h.harness or h.source is None:
        return [p for p in h.harness.get("faults_planned") or [] if isinstance(p, dict) and "id" in p]
    return scenario_faults(h.scenario)


def _no_log(h: History) -> str | None:
    """Why the fault log holds no evidence at all though the record needs one (checks/record.py), or None."""
    if any(p.part == "faults.jsonl" and p.problem.startswith("missing") for p in h.integrity):
        return "no evidence it was injected: faults.jsonl, the fault log, is missing"
    return None


def _fault_verdict(h: History, e: Expect, recs: list[Recovery], plan: dict) -> CheckResult:
    windows = {w.id: w for w in h.faults}
    restarted = {r.fault_id for r in recs}
    stop = h.harness.get("stop_reason")
    why = f" (run stopped: {stop})" if stop else ""
    resumed = {r.fault_id: r for r in resumptions(h, recs)}
    story = e.ends is not None and e.ends not in NORMAL and ending_of(h) == e.ends   # an expected abnormal end
    bound = e.max_recovery_seconds
    fid, kind = str(plan["id"]), plan.get("type", "?")
    name = f"fault:{fid}"
    dur = plan.get("heal_after_s")
    ended = h.harness.get("faults_ended") or {}   # fault id -> why its effect ended before dur (Fault.ended)
    expected = f"{kind} {plan.get('trigger', '')}".strip() + \
        (f", healed after {dur:g} s" if plan.get("healable") and dur is not None else "")
    w = windows.get(fid)
    if w is None:
        return failed(name, expected, "not injected", f"{fid} ({kind}): {_no_log(h)}" if _no_log(h)
                      else h.never_injected(fid, kind) + why)
    held = None if w.healed_at is None else round(w.healed_at - w.injected_at, 3)
    observed = "injected" + (f", healed after {held:g} s" if held is not None else "")
    effect = "caused a worker restart" if fid in restarted else "caused no worker restart"
    if plan.get("healable") and dur is not None:
        if held is None and story:
            observed += f", left in place until the run ended {e.ends} (expected)"
        elif held is None:
            return failed(name, expected, observed, f"{fid} ({kind}) was never healed, though planned "
                                                    f"to heal after {dur:g} s{why}")
        elif held + SLACK_S < dur and fid in ended:
            observed += f" (ended by itself: {ended[fid]})"
        elif held + SLACK_S < dur and story:
            observed += f" (cut short when the run ended {e.ends}, as expected)"
        elif held + SLACK_S < dur:
            return failed(name, expected, observed, f"{fid} ({kind}) was healed after {held:g} s of its "
                                                    f"planned {dur:g} s: cut short{why}")
    res = resumed.get(fid)
    what = f"{fid} ({kind}) {observed} on {w.target or 'its target'}; {effect}"
    if res is not None and res.seconds is None:
        if story:
            return passed(name, expected, observed, f"{what}; training did not resume after it "
                                                    f"({res.how}), as the expected ending {e.ends} says")
        return failed(name, expected, observed, f"{what}; training did not resume after it: {res.how}{why}")
    if res is not None and bound is not None and res.seconds > bound:
        return h.timed(failed(name, expected, observed, f"{what}; training resumed only after {res.seconds:g} s "
                                                        f"(max_recovery_seconds {bound:g}): {res.how}"), None)
    tail = f"; training resumed: {res.how}" if res is not None else ""
    if res is None or bound is None:
        return passed(name, expected, observed, what + tail)
    return h.timed(passed(name, expected, observed, what + tail), bound - res.seconds)
