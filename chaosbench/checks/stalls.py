"""After each fault, did training go on, and how long did it stand still? Restart or not.

A fault that restarted workers has a recovery (recovery.py): training resumed at the round's first
step, total_s after the injection. A fault that restarted nothing (a pause, an outage, a slow disk)
may still stall every rank: its measure is the longest time without any step event from the
injection to the first step after it (faults injected together share that wait), then between
steps until the next fault (or the end of the history). A run that stopped without a normal
ending (stuck, timeout, every node gone) while no step came after the fault's last one did not
resume at all.
"""
from __future__ import annotations

from dataclasses import dataclass

from chaosbench.checks.ending import NORMAL, ending_of
from chaosbench.checks.history import History
from chaosbench.result import Recovery


@dataclass
class Resumption:
    fault_id: str
    seconds: float | None   # None: training did not resume after the fault
    how: str                # in words, for the check's reason


def resumptions(h: History, recs: list[Recovery]) -> list[Resumption]:
    by_id = {r.fault_id: r for r in recs}
    steps = sorted(e["ts"] for e in h.of("step"))
    ending = ending_of(h)
    stopped = h.harness.get("stopped_at")
    out: list[Resumption] = []
    if not steps:   # no progress seen at all: nothing to measure a stall against (the checks say so)
        return out
    for i, fw in enumerate(h.faults):
        t0 = fw.injected_at
        nxt = h.faults[i + 1] if i + 1 < len(h.faults) else None
        end = nxt.injected_at if nxt else float("inf")
        rec = by_id.get(fw.id)
        if rec is not None:
            if rec.first_step_at is None:
                out.append(Resumption(fw.id, None, "workers restarted but never completed a training step"))
            else:
                out.append(Resumption(fw.id, rec.total_s, f"restart round's first step {rec.total_s:.2f} s after it"))
            continue
        after = [t for t in steps if t >= t0]
        if not after:
            out.append(Resumption(fw.id, None, "no step after it"))
            continue
        # until the first step after it (faults injected together share that wait), then the longest
        # gap between steps until the next fault
        within = [t for t in after if t < end] or after[:1]
        worst = max(b - a for a, b in zip([t0] + within, within))
        # the run stopped abnormally with nothing after this fault's last step: it never resumed
        if nxt is None and ending is not None and ending not in NORMAL and isinstance(stopped, (int, float)) \
                and stopped - within[-1] > worst:
            out.append(Resumption(fw.id, None, f"training stopped {within[-1] - t0:.2f} s after it and did not "
                                               f"resume before the run ended {ending}"))
            continue
        out.append(Resumption(fw.id, round(worst, 3), f"no restart; longest time without a step after it "
                                                      f"{worst:.2f} s" + (f" (until {nxt.id})" if nxt else "")))
    return out
