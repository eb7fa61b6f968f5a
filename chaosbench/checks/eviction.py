"""`expect.evicts_straggler_within_s`: the job drops a slow node and trains on without it.

The inverse of max_slowdown, for a job meant to evict stragglers: per throttle_node fault, a
rendezvous round that started after the injection, none of whose worker processes ran on the
throttled node, must report a step within the bound. Rounds come from the worker processes' lives
(History.rounds); which node a process ran on is every event's `node` field, so a round's members
are known whether or not each rank reports steps. Rounds after the next fault's injection, or after
the harness stopped the run, belong to neither. No such round: failed once the run went on for the
bound after the fault, else not evaluated. A planned fault never injected fails.
"""
from __future__ import annotations

from collections import defaultdict

from chaosbench.checks.base import NO_EVENTS, failed, not_evaluated, passed
from chaosbench.checks.detection import planned_faults, run_end
from chaosbench.checks.history import History
from chaosbench.checks.observed import confirmed_steps
from chaosbench.checks.registry import check
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect

NAME = "evicts_straggler_within_s"


@check(NAME, needs="events, a throttle_node fault")
def evicts_straggler_within_s(h: History, e: Expect, recs: list[Recovery]) -> list[CheckResult] | None:
    """Per throttle_node: the job trains on without the slow node within N s."""
    if e.evicts_straggler_within_s is None:
        return None
    bound = e.evicts_straggler_within_s
    faults = [(fid, kind) for fid, kind in planned_faults(h, None) if kind == "throttle_node"]
    if not faults:
        return [not_evaluated(NAME, f"<= {bound:g} s", "no throttle_node fault was planned")]
    out = []
    for fid, kind in faults:
        r = _verdict(h, bound, fid, kind)
        r.name, r.fault_id = f"{NAME}:{fid}", fid
        out.append(r)
    return out


def _verdict(h: History, bound: float, fid: str, kind: str) -> CheckResult:
    expected = f"trains without the throttled node within {bound:g} s"
    fw = next((w for w in h.faults if w.id == fid), None)
    if fw is None:
        return failed(NAME, expected, "not injected", h.never_injected(fid, kind))
    if not h.events:
        return not_evaluated(NAME, expected, NO_EVENTS)
    t0, node = fw.injected_at, fw.target
    stopped = h.harness.get("stopped_at")
    until = min([w.injected_at for w in h.faults if w.injected_at > t0]
                + ([float(stopped)] if isinstance(stopped, (int, float)) else []), default=float("inf"))
    keys, rounds = h._incarnation_keys(), h.rounds()
    starts = h.incarnation_starts()
    members: dict[int, set[str]] = defaultdict(set)
    began: dict[int, float] = {}
    for inc, n in rounds.items():
        members[n].add(inc[0])
        began[n] = min(began.get(n, float("inf")), starts[inc])
    steps: dict[int, list[dict]] = defaultdict(list)
    for ev in confirmed_steps(h):
        steps[rounds[keys[id(ev)]]].append(ev)
    later = sorted(n for n in members if t0 < began[n] < until)
    head = f"{fid} (throttle_node) on {node}"
    for n in later:
        if node in members[n]:
            continue
        done = sorted((ev for ev in steps[n] if ev["ts"] < until), key=lambda ev: ev["ts"])
        if not done:
            continue
        took = round(done[0]["ts"] - t0, 3)
        what = (f"{head}: a round of {', '.join(sorted(members[n]))} (world size {done[0].get('world_size', '?')}) "
                f"started {began[n] - t0:.1f} s after the throttle and trained step {done[0]['step']} "
                f"{took:g} s after it")
        return (passed if took <= bound else failed)(NAME, expected, took, what)
    if any(node not in members[n] for n in later):
        why = f"{node} left at {min(began[n] for n in later if node not in members[n]) - t0:.1f} s but no round " \
              f"without it reported a step"
    elif later:
        why = f"each of the {len(later)} round(s) after it included {node}"
    else:
        why = f"no new rendezvous round after it: {node} stayed in the job"
    end = run_end(h)
    lasted = None if end is None else round(min(end, until) - t0, 1)
    if lasted is None or lasted < bound:
        return not_evaluated(NAME, expected, f"{head}: {why}, but the run stopped {lasted if lasted is not None else '?'} "
                                             f"s after it, before the {bound:g} s bound could be judged")
    return failed(NAME, expected, None, f"{head}: {why} in the {lasted:g} s after it")
