"""One verdict per planned fault: did it fire, and did it stay in place as long as planned?

A fault that never fired, or was healed early (the run stopped first and healed it best-effort),
tested nothing: a `no_restart` or `reaches_step` that passes around it would be a false pass. The
plan comes from harness.json (`faults_planned`, written by the runner); what happened, from the
fault log. These checks run whenever faults were planned, whatever `expect` says.
"""
from __future__ import annotations

from chaosbench.checks.base import failed, passed
from chaosbench.checks.history import History
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect

SLACK_S = 0.05   # clock rounding between the schedule and the fault log


def fault_checks(h: History, e: Expect, recs: list[Recovery]) -> list[CheckResult]:
    windows = {w.id: w for w in h.faults}
    restarted = {r.fault_id for r in recs}
    stop = h.harness.get("stop_reason")
    why = f" (run stopped: {stop})" if stop else ""
    out = []
    for plan in h.harness.get("faults_planned") or []:
        fid, kind = str(plan["id"]), plan.get("type", "?")
        name = f"fault:{fid}"
        dur = plan.get("heal_after_s")
        expected = f"{kind} {plan.get('trigger', '')}".strip() + \
            (f", healed after {dur:g} s" if plan.get("healable") and dur is not None else "")
        w = windows.get(fid)
        if w is None:
            out.append(failed(name, expected, "not injected", f"{fid} ({kind}) was planned but never injected{why}"))
            continue
        held = None if w.healed_at is None else round(w.healed_at - w.injected_at, 3)
        observed = "injected" + (f", healed after {held:g} s" if held is not None else "")
        effect = "caused a worker restart" if fid in restarted else "caused no worker restart"
        if plan.get("healable") and dur is not None:
            if held is None:
                out.append(failed(name, expected, observed, f"{fid} ({kind}) was never healed, though planned "
                                                            f"to heal after {dur:g} s{why}"))
                continue
            if held + SLACK_S < dur:
                out.append(failed(name, expected, observed, f"{fid} ({kind}) was healed after {held:g} s of its "
                                                            f"planned {dur:g} s: cut short{why}"))
                continue
        out.append(passed(name, expected, observed, f"{fid} ({kind}) {observed} on {w.target or 'its target'}; "
                                                    f"{effect}"))
    return out
