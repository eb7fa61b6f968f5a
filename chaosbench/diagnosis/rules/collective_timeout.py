"""A hang (a frozen node or rank) with the collective timeout at torch's default: the survivors wait in
their collective for 30 min (gloo) or 10 min (NCCL) instead of failing and recovering without it."""
from __future__ import annotations

from ..figures import measured
from ..model import Evidence, Finding
from ..record import RunRecord
from ..rootcause import failures

HANGS = ("pause_node", "freeze_worker", "freeze_rank", "hang_rank", "hang_collective", "gil_hang")
MIN_WAIT_S = 20.0          # a survivor blocked this long without an error: no short timeout was set


def check(rec: RunRecord) -> list[Finding]:
    out = []
    fails = failures(rec)
    stopped = rec.harness.get("stopped_at") or rec.result.get("finished_at")
    for f in rec.faults:
        t0 = f.get("injected_at")
        if f.get("type") not in HANGS or not isinstance(t0, (int, float)):
            continue
        end = f.get("healed_at") if isinstance(f.get("healed_at"), (int, float)) else stopped
        if not isinstance(end, (int, float)) or end - t0 < MIN_WAIT_S:
            continue                                  # the hang was too short to tell
        target = f.get("target")
        survivors = [n for n in rec.logs if n != target]
        reacted = [x for x in fails if x.node in survivors and x.ts is not None and t0 <= x.ts <= end]
        exits = [e for e in rec.events if e.get("event") == "worker_exit" and e.get("node") in survivors
                 and isinstance(e.get("ts"), (int, float)) and t0 <= e["ts"] <= end]
        steps = [e for e in rec.events if e.get("event") == "step" and e.get("node") in survivors
                 and isinstance(e.get("ts"), (int, float)) and t0 + 5 <= e["ts"] <= end]
        if reacted or exits or steps or not survivors:
            continue                                  # they failed over (or trained on): a timeout worked
        waited = end - t0
        fig = measured("silent node", rec.result.get("backend"))
        out.append(Finding(
            rule="collective_timeout_default",
            title=f"While {target} was frozen by {f.get('id')} ({f.get('type')}), {', '.join(survivors)} waited "
                  f"{waited:.0f} s in a collective without an error or a step: the job's collective timeout is "
                  "longer than the hang (torch's default: 30 min on gloo, 10 min on NCCL).",
            fix="pass a short timeout to init_process_group, e.g. `dist.init_process_group(backend, "
                "timeout=datetime.timedelta(seconds=60))` (NCCL: with TORCH_NCCL_ASYNC_ERROR_HANDLING=1), so a "
                "silent peer fails the collective and torchrun restarts the group without it",
            effect=(f"a silent node recovered in {fig}" if fig else
                    "the survivors fail over after the timeout instead of after 30 min"),
            evidence=[Evidence(text=f"{f.get('type')} on {target} at {t0:.1f}; until {end:.1f} no worker of "
                                    f"{', '.join(survivors)} exited, failed or logged a step",
                               source="faults.jsonl, events/", ts=t0)],
            severity="cause" if str(rec.harness.get("stop_reason") or "").startswith("stuck") else "warning",
            measured="docs/recovery.md" if fig else None))
    return out
