"""`trains_after_settle`: the job trained N steps in one unbroken stretch after its last fault settled.

The settle stop rule (scenario/stop.py) ends a run as soon as it saw that; this check asks the
history the same question, so a run that stopped `settled` on a live view the events do not bear
out (steps of a round about to restart, the wrong world size, a fault still in place) fails here.
The history's stretches are cut as the live view cuts them (observer.progress.Stretch): a new
world size, a node's restart count changing, a step going back.
"""
from __future__ import annotations

from chaosbench.checks.base import NO_EVENTS, failed, not_evaluated, passed
from chaosbench.checks.history import History
from chaosbench.checks.observed import confirmed_steps
from chaosbench.checks.registry import check
from chaosbench.observer.progress import Stretch
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect


def stretches(steps: list[dict]) -> list[Stretch]:
    """The unbroken stretches of these step events, by their own timestamps."""
    out: list[Stretch] = []
    cur = Stretch()
    for ev in sorted(steps, key=lambda ev: ev["ts"]):
        nxt = cur.after(ev, float(ev["ts"]))
        if nxt is not cur and cur.marks:
            out.append(cur)
        cur = nxt
    return out + ([cur] if cur.marks else [])


@check("trains_after_settle", needs="events, a fault")
def trains_after_settle(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """N unbroken steps were trained after the last fault healed."""
    n = e.trains_after_settle
    if n is None:
        return None
    name, world = "trains_after_settle", e.final_world()
    expected = f"{n} steps" + (f" at world size {world}" if world is not None else "") + " after the last fault settled"
    if not h.events:
        return not_evaluated(name, expected, NO_EVENTS)
    unsettled = h.harness.get("faults_unfinished") or []
    if unsettled:
        return failed(name, expected, None, f"faults never done (fired and healed) before the run stopped: "
                                            f"{', '.join(unsettled)}, so nothing had settled")
    if h.unfired:   # a cooperative command the job never acted on: its moment, and so the settle point, is unknown
        return failed(name, expected, None, "faults delivered that the job never acted on: "
                                            + "; ".join(f"{fid}: {why}" for fid, why in sorted(h.unfired.items())))
    steps = confirmed_steps(h)
    if not steps:
        return not_evaluated(name, expected, "no step was seen (docs/byo-trainer.md: trainer.progress or "
                                             "chaosbench.instrument's step())")
    start = float(h.harness.get("training_started_at") or min(ev["ts"] for ev in h.events))
    since = max([start] + [t for w in h.faults for t in (w.injected_at, w.healed_at) if t is not None])
    best = 0
    for s in stretches(steps):
        if world is not None and s.world != world:
            continue
        got = s.steps_since(since)
        if got >= n:
            return passed(name, expected, f"{got} steps at world size {s.world}",
                          f"steps {s.top - got + 1}-{s.top} trained at world size {s.world} without a restart after "
                          f"the last fault settled ({since - start:.1f} s into training)")
        best = max(best, got)
    where = f"at world size {world}" if world is not None else "in one stretch"
    seen = f"at most {best} steps {where}" if best else f"no step {where}"
    return failed(name, expected, seen, f"after the last fault settled ({since - start:.1f} s into training) the "
                                        f"job trained {seen} without a restart; highest step {h.max_step()}"
                                        + (f" (run stopped: {h.harness['stop_reason']})" if h.harness.get("stop_reason") else ""))
