"""Lost work over the scenario's max_lost_steps because checkpoints are too far apart: the interval the
job saved at (from its checkpoint_saved events, else the step numbers of the files the harness saw)
and the interval that would meet the bound."""
from __future__ import annotations

from functools import reduce
from math import gcd

from ..model import Evidence, Finding
from ..record import RunRecord
from ._ckpt import file_step, held


def saved_steps(rec: RunRecord) -> tuple[list[int], str]:
    ev = sorted({e["step"] for e in rec.events if e.get("event") == "checkpoint_saved" and isinstance(e.get("step"), int)})
    if len(ev) >= 2:
        return ev, "checkpoint_saved events"
    steps = set()
    for inv in [*rec.inventories.values(), rec.checkpoints]:
        for fs in held(inv or {}).values():
            steps |= {s for f in fs if (s := file_step(f.get("path", ""))) is not None and s > 0}
    return sorted(steps), "checkpoint files in the harness's inventories"


def interval(steps: list[int]) -> int | None:
    """Every save step is a multiple of the interval, and rotated files hide most of them: the greatest
    common divisor of the steps seen (at least two, else it is not known)."""
    steps = sorted({s for s in steps if s > 0})
    return reduce(gcd, steps) if len(steps) >= 2 else None


def check(rec: RunRecord) -> list[Finding]:
    bound = rec.expect.get("max_lost_steps")
    c = rec.check("max_lost_steps")
    if not isinstance(bound, int) or not c or c.get("status") != "failed":
        return []
    # losses the interval explains: a restore of a real checkpoint (not a fresh or divergent start, which
    # the checkpoint_on_some_nodes rule speaks for) and fewer lost steps than the interval plus a few in flight
    lost = [r for r in rec.recoveries if isinstance(r.get("lost_steps"), int) and r["lost_steps"] > bound
            and isinstance(r.get("restored_step"), int) and r["restored_step"] > 0 and not r.get("problems")
            and r.get("tier") != "none"]
    steps, where = saved_steps(rec)
    steps = sorted(set(steps) | {r["restored_step"] for r in lost})
    every = interval(steps)
    lost = [r for r in lost if every and r["lost_steps"] <= every + 3]
    if not lost or every is None or every <= bound:
        return []            # the interval is unknown, or it meets the bound: the loss came from elsewhere
    worst = max(lost, key=lambda r: r["lost_steps"])
    return [Finding(
        rule="checkpoint_interval",
        title=f"{worst['lost_steps']} steps were lost at {worst.get('fault_id')} (max_lost_steps: {bound}) because the "
              f"job checkpoints every {every} steps: a failure just before a save loses up to {every - 1}.",
        fix=f"checkpoint every {bound} steps or fewer (a node-local snapshot is cheap: save it every {bound} steps "
            "and upload to slower tiers less often)",
        effect=f"at most {bound} steps lost per failure instead of up to {every - 1}",
        evidence=[Evidence(text=f"restored step {worst.get('restored_step')}, step before the fault "
                                f"{worst.get('step_before_fault')}: {worst['lost_steps']} lost",
                           source="result.json: recoveries", ts=worst.get("injected_at")),
                  Evidence(text=f"saved at steps {', '.join(map(str, steps[:8]))}{' ...' if len(steps) > 8 else ''}",
                           source=where)],
        severity="cause")]
