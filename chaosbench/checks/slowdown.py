"""`expect.max_slowdown`: per fault, the job's step rate during it stays >= the rate before it / the bound.

Step completions are the distinct (restart_count, step) pairs of the step events (one per optimizer
step, however many ranks report it; a step replayed after a restart counts again), timed by the first
rank that reported it; the node watcher's lines that only look like progress are left out
(observed.confirmed_steps).
- before: the completions in the last PRE_WINDOW_S seconds before the injection (not reaching back
  into an earlier fault's window); rate = (k - 1) / (time of the k-th - time of the first). Where an
  earlier fault is still on at the injection (two toxics on one link, injected together), "before"
  is before the first of them: the rate without any fault. Fewer than MIN_PRE_STEPS completions
  there: not evaluated.
- during: from the injection to the heal, or to the run's stop if it never healed (or the last event
  of a history without a stop record); rate = completions / window length. A window shorter than
  MIN_WINDOW_S, or than MIN_INTERVALS steps at the pre-fault rate, cannot be measured: not
  evaluated. A window long enough with no step at all is rate 0: failed.
A planned fault that was never injected fails.
"""
from __future__ import annotations

from chaosbench.checks.base import NO_EVENTS, failed, not_evaluated, passed
from chaosbench.checks.detection import planned_faults, run_end
from chaosbench.checks.history import FaultWindow, History
from chaosbench.checks.observed import confirmed_steps
from chaosbench.checks.registry import check
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect

PRE_WINDOW_S = 10.0
MIN_PRE_STEPS = 5
MIN_WINDOW_S = 2.0
MIN_INTERVALS = 3


def completions(h: History) -> list[float]:
    first: dict[tuple, float] = {}
    for e in confirmed_steps(h):
        key = (int(e.get("restart_count", 0) or 0), int(e["step"]))
        first[key] = min(first.get(key, e["ts"]), e["ts"])
    return sorted(first.values())


@check("max_slowdown", needs="events, a fault")
def max_slowdown(h: History, e: Expect, recs: list[Recovery]) -> list[CheckResult] | None:
    """Per fault: steps/s during it >= steps/s before it / N."""
    if e.max_slowdown is None:
        return None
    faults = planned_faults(h, None)
    if not faults:
        return [not_evaluated("max_slowdown", f"x{e.max_slowdown:g}", "no fault was planned")]
    done = completions(h)
    out = []
    for fid, kind in faults:
        r = _verdict(h, e.max_slowdown, fid, kind, done)
        r.name, r.fault_id = f"max_slowdown:{fid}", fid
        out.append(r)
    return out


def fault_free_until(h: History, t0: float) -> float:
    """The start of the stretch of overlapping faults that is on at t0: the rate before it is fault-free."""
    ref = t0
    while True:
        on = [w.injected_at for w in h.faults
              if w.injected_at < ref and (w.healed_at is None or w.healed_at > ref)]
        if not on:
            return ref
        ref = min(on)


def _window_end(h: History, fw: FaultWindow) -> float | None:
    ends = [t for t in (fw.healed_at, h.harness.get("stopped_at")) if isinstance(t, (int, float))]
    return min(ends) if ends else run_end(h)


def _verdict(h: History, bound: float, fid: str, kind: str, done: list[float]) -> CheckResult:
    name, expected = "max_slowdown", f"step rate during the fault >= rate before it / {bound:g}"
    fw = next((w for w in h.faults if w.id == fid), None)
    if fw is None:
        stop = h.harness.get("stop_reason")
        return failed(name, expected, "not injected", h.never_injected(fid, kind)
                                                      + (f" (run stopped: {stop})" if stop else ""))
    if not done:
        return not_evaluated(name, expected, NO_EVENTS if not h.events else "no step was seen")
    t0 = fw.injected_at
    ref = fault_free_until(h, t0)
    earlier = [w.healed_at or w.injected_at for w in h.faults if w.injected_at < ref]
    lo = max([ref - PRE_WINDOW_S] + earlier)
    pre = [t for t in done if lo <= t <= ref]   # a step done at the injection instant was done before it
    since = "" if ref == t0 else f", before the fault(s) on at its injection ({t0 - ref:.1f} s earlier)"
    if len(pre) < MIN_PRE_STEPS or pre[-1] <= pre[0]:
        return not_evaluated(name, expected, f"{fid} ({kind}): {len(pre)} step(s) in the {ref - lo:.1f} s before "
                                             f"it{since}; the pre-fault rate needs {MIN_PRE_STEPS}")
    before = (len(pre) - 1) / (pre[-1] - pre[0])
    end = _window_end(h, fw)
    window = 0.0 if end is None else end - t0
    need = max(MIN_WINDOW_S, MIN_INTERVALS / before)
    if window < need:
        return not_evaluated(name, expected, f"{fid} ({kind}): its window lasted {window:.2f} s, too short to "
                                             f"measure a rate (needs {need:.2f} s: {MIN_INTERVALS} steps at "
                                             f"{before:.2f} steps/s, at least {MIN_WINDOW_S:g} s)")
    during = sum(1 for t in done if t0 < t <= end) / window
    factor = before / during if during > 0 else float("inf")
    observed = round(factor, 2) if during > 0 else "no step"
    how = "healed" if fw.healed_at is not None and fw.healed_at <= end else "run stopped"
    detail = (f"{fid} ({kind}) on {fw.target or 'its target'}: {during:.2f} steps/s over its {window:.1f} s "
              f"(injection to {how}) vs {before:.2f} steps/s over the {pre[-1] - pre[0]:.1f} s before it{since}: "
              + (f"x{factor:.2f} slower" if during > 0 else "no step at all"))
    ok = during > 0 and factor <= bound
    # the clock-skew caveat (History.timed): a skew moves steps across the window's edges; the margin is
    # how long the window could lose steps, at the faster of the two rates, before the bound is crossed
    margin = (during - before / bound) * window / max(before, during) if during > 0 else None
    return h.timed((passed if ok else failed)(name, expected, observed, f"{detail} (bound x{bound:g})"), margin)
