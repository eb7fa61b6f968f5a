"""A preemption (SIGTERM with a grace window: stop_node, preempt) that the job let pass without a
save: the work since the last periodic checkpoint is lost though there was time to keep it.
Evidence needs the job's own checkpoint_saved events (a plain job's saves are not visible in time):
without them this rule says nothing."""
from __future__ import annotations

from ..model import Evidence, Finding
from ..record import RunRecord

PREEMPTIONS = ("stop_node", "preempt", "preempt_node")


def check(rec: RunRecord) -> list[Finding]:
    saves = [e for e in rec.events if e.get("event") == "checkpoint_saved" and isinstance(e.get("ts"), (int, float))]
    if not saves:
        return []
    out = []
    for f in rec.faults:
        t0, target = f.get("injected_at"), f.get("target")
        if f.get("type") not in PREEMPTIONS or not isinstance(t0, (int, float)):
            continue
        rec_ = next((r for r in rec.recoveries if r.get("fault_id") == f.get("id")), None)
        if not rec_ or not isinstance(rec_.get("lost_steps"), int) or rec_["lost_steps"] <= 0:
            continue
        end = rec_.get("detected_at") or rec_.get("rendezvous_done_at") or t0 + 30
        in_window = [e for e in saves if t0 <= e["ts"] <= end and (e.get("node") == target or target is None)]
        if in_window:
            continue
        last = max((e for e in saves if e["ts"] < t0 and e.get("node") == target), key=lambda e: e["ts"], default=None)
        unsaved = Evidence(text=f"{f.get('type')} on {target} at {t0:.1f}; no checkpoint_saved from {target} until "
                                f"{end:.1f}" + (f"; its last save was step {last.get('step')}" if last else ""),
                           source="faults.jsonl, events/", ts=t0)
        out.append(Finding(
            rule="no_save_on_preemption",
            title=f"{target} was preempted by {f.get('id')} ({f.get('type')}: SIGTERM, then a grace window) and saved "
                  f"nothing before it exited: {rec_['lost_steps']} steps lost.",
            fix="handle SIGTERM in the job: set a flag in the handler and save a checkpoint at the next step "
                "boundary, before the grace window ends (torchrun forwards SIGTERM to the workers)",
            effect="a preemption loses no steps",
            evidence=[unsaved],
            severity="warning"))
    return out
