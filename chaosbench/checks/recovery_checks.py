"""Checks on how training recovered from each fault (tier, lost work, time, world size)."""
from __future__ import annotations

from chaosbench.checks.base import NO_EVENTS, failed, not_evaluated, passed
from chaosbench.checks.restore_evidence import contradictions
from chaosbench.checks.history import History
from chaosbench.checks.registry import check
from chaosbench.checks.observed import NOT_INFERRED
from chaosbench.checks.stalls import resumptions
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect


NO_RESTORE = ("not evaluated: no restore tier seen; emit checkpoint_loaded (with tier and step) or "
              "checkpoint_fresh_start from every rank after a restart (docs/events.md; for your own job, "
              "chaosbench.instrument does it in one line: docs/byo-trainer.md)")


def preconditions(name: str, expected, h: History, recs: list[Recovery],
                   restore: bool = False) -> CheckResult | None:
    """Common reasons a recovery check cannot pass. restore: the check judges what was restored,
    so every recovery must have a coherent restore round."""
    if not h.events:
        return not_evaluated(name, expected, NO_EVENTS)
    if not h.faults:
        return not_evaluated(name, expected, "no fault was injected, so there was nothing to recover from")
    if not recs:
        ids = ", ".join(f.id for f in h.faults)
        return failed(name, expected, None, f"no worker restarted after fault(s) {ids}: no recovery happened")
    broken = [r.fault_id for r in recs if r.first_step_at is None]
    if broken:
        return failed(name, expected, None, f"after fault(s) {', '.join(broken)} workers restarted "
                                            "but never completed a training step")
    if restore:
        unseen = [r for r in recs if r.restored_step is None and not r.problems]
        if unseen:   # observation that could not tell the restore says why (observed.py)
            why = [f"after {r.fault_id}: restore {r.source}" for r in unseen
                   if (r.source or "").startswith(NOT_INFERRED)]
            return not_evaluated(name, expected, "; ".join(why) if why else
                                 f"after {', '.join(r.fault_id for r in unseen)}: {NO_RESTORE}")
        observed = ", ".join(f"{r.tier}@{r.restored_step}" for r in recs)
        bad = [f"after {r.fault_id}: {'; '.join(r.problems)}" for r in recs if r.problems]
        if bad:
            return failed(name, expected, observed, "inconsistent restore: " + " | ".join(bad) + unrestarted(h, recs))
        checked = [contradictions(h, r) for r in recs]
        if any(p for p, _ in checked):
            return failed(name, expected, observed, "restore not backed by the harness's evidence: "
                          + " | ".join(x for p, _ in checked for x in p))
        if any(u for _, u in checked):
            return not_evaluated(name, expected, "restore claims could not be checked: "
                                 + " | ".join(x for _, u in checked for x in u))
    return None


def unrestarted(h: History, recs: list[Recovery]) -> str:
    """'; fault(s) x caused no worker restart ...' so a fault left out of the checks is said, not hidden."""
    seen = {r.fault_id for r in recs}
    rest = [f"{f.id} ({f.fault})" for f in h.faults if f.id not in seen]
    return f"; fault(s) {', '.join(rest)} caused no worker restart: not part of this check" if rest else ""


@check("recovered_from", "recovered_from", "resumed_at_step", needs="events, a fault, inventory")
def recovered_from(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """Each restore after a fault loaded the named tier (resumed_at_step: that step), backed by the inventory."""
    if e.recovered_from is None and e.resumed_at_step is None:
        return None
    name = "recovered_from"
    expected = e.recovered_from if e.resumed_at_step is None else f"{e.recovered_from or 'any tier'} @ step {e.resumed_at_step}"
    if (pre := preconditions(name, expected, h, recs, restore=True)) is not None:
        return pre
    if any(r.tier is None for r in recs):
        return not_evaluated(name, expected, NO_RESTORE)
    observed = ", ".join(f"{r.tier}@{r.restored_step}" for r in recs)
    wrong = [r for r in recs if e.recovered_from is not None and r.tier != e.recovered_from]
    wrong += [r for r in recs if e.resumed_at_step is not None and r.restored_step != e.resumed_at_step
              and r not in wrong]
    detail = "; ".join(f"after {r.fault_id}: restored step {r.restored_step} from {r.tier}"
                       + (f" ({r.source})" if r.source else "") for r in recs) + unrestarted(h, recs)
    if wrong:
        return failed(name, expected, observed, f"expected {expected}, but {detail}")
    return passed(name, expected, observed, detail)


@check("max_lost_steps", needs="events, a fault")
def max_lost_steps(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """Each restore after a fault redid at most N steps."""
    if e.max_lost_steps is None:
        return None
    name, expected = "max_lost_steps", f"<= {e.max_lost_steps}"
    if (pre := preconditions(name, expected, h, recs, restore=True)) is not None:
        return pre
    unknown = [r.fault_id for r in recs if r.lost_steps is None]
    if unknown:
        return not_evaluated(name, expected, f"restored step or last step before the fault unknown for "
                                             f"{', '.join(unknown)}")
    worst = max(recs, key=lambda r: r.lost_steps)
    detail = "; ".join(f"{r.fault_id}: last step {r.step_before_fault}, resumed at {r.restored_step} "
                       f"-> {r.lost_steps} lost" for r in recs) + unrestarted(h, recs)
    ok = worst.lost_steps <= e.max_lost_steps
    return (passed if ok else failed)(name, expected, worst.lost_steps, detail)


def _breakdown(r: Recovery) -> str:
    def f(x):
        return "?" if x is None else f"{x:.2f}s"
    failed = f" ({r.failed_restarts} worker start(s) failed before training resumed)" if r.failed_restarts else ""
    # without a measured detection, rendezvous_s counts from the injection (see recovery.py)
    since = " (from injection)" if r.detection_s is None and r.rendezvous_s is not None else ""
    return (f"{r.fault_id}: total {f(r.total_s)} = detection {f(r.detection_s)} + rendezvous {f(r.rendezvous_s)}"
            f"{since} + restore {f(r.restore_s)} + first step {f(r.first_step_s)}{failed}")


@check("max_recovery_seconds", needs="events, a fault")
def max_recovery_seconds(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """After each fault, training resumed within N s (fault -> first step)."""
    if e.max_recovery_seconds is None:
        return None
    name, expected = "max_recovery_seconds", f"<= {e.max_recovery_seconds:g}"
    # every fault counts, restart or not: a pause that stalls training for a minute without restarting
    # anything is as slow a recovery as a restart that takes one (stalls.py)
    if recs and (pre := preconditions(name, expected, h, recs)) is not None:
        return pre
    if not h.events:
        return not_evaluated(name, expected, NO_EVENTS)
    if not h.faults:
        return not_evaluated(name, expected, "no fault was injected, so there was nothing to recover from")
    res = resumptions(h, recs)
    if not res:
        return not_evaluated(name, expected, "no step was seen, so no time to resume can be measured")
    by_rec = {r.fault_id: r for r in recs}
    detail = "; ".join(_breakdown(by_rec[x.fault_id]) if x.fault_id in by_rec else f"{x.fault_id}: {x.how}"
                       for x in res)
    stalled = [x for x in res if x.seconds is None]
    if stalled:
        return failed(name, expected, None, "training did not resume after "
                      + ", ".join(x.fault_id for x in stalled) + f": {detail}")
    worst = max(res, key=lambda x: x.seconds)
    ok = worst.seconds <= e.max_recovery_seconds
    return h.timed((passed if ok else failed)(name, expected, worst.seconds, detail),   # clock skew caveat
                   e.max_recovery_seconds - worst.seconds)


@check("world_size_after", needs="events, a fault")
def world_size_after(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """The world size after the faults is N."""
    if e.world_size_after is None:
        return None
    name, expected = "world_size_after", e.world_size_after
    if (pre := preconditions(name, expected, h, recs)) is not None:
        return pre
    last = recs[-1]
    detail = f"after {last.fault_id}: world size {last.world_size_before} -> {last.world_size_after}"
    if last.ranks_after is not None and last.world_size_after is not None and last.ranks_after != last.world_size_after:
        return failed(name, expected, last.world_size_after, f"{detail}, but {last.ranks_after} rank(s) trained in "
                                                             "that round")
    sizes = [p for p in last.problems if "world sizes" in p]
    if sizes:
        return failed(name, expected, last.world_size_after, f"{detail}; {sizes[0]}")
    ok = last.world_size_after == e.world_size_after
    return (passed if ok else failed)(name, expected, last.world_size_after, detail)


def world_size_sequence(h: History) -> list[int]:
    seq: list[int] = []
    for ev in h.of("step"):
        ws = ev.get("world_size")
        if ws is not None and (not seq or seq[-1] != ws):
            seq.append(int(ws))
    return seq


@check("world_sizes", needs="events")
def world_sizes(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """The world size went through exactly these sizes, in order."""
    if e.world_sizes is None:
        return None
    name, expected = "world_sizes", e.world_sizes
    if not h.of("step"):
        return not_evaluated(name, expected, NO_EVENTS if not h.events else "no step events were recorded")
    seq = world_size_sequence(h)
    short = _short_segments(h)
    if short:
        return failed(name, expected, seq, f"world size over the run (steps): {seq}, but " + "; ".join(short))
    ok = seq == e.world_sizes
    return (passed if ok else failed)(name, expected, seq, f"world size over the run (steps): {seq}")


def _short_segments(h: History) -> list[str]:
    """A world size is a claim: in each stretch of steps at size N, N distinct ranks must have trained.
    Steps only the node watcher saw (a job without events) carry the size torchrun gave the worker,
    and a job often prints from rank 0 only: there the worker processes the watcher saw running at
    that size during the stretch count as its ranks."""
    segs: list[list] = []   # [world size, ranks, first ts, last ts, all observed]
    for ev in h.of("step"):
        size = ev.get("world_size")
        if size is None:
            continue
        if not segs or segs[-1][0] != size:
            segs.append([size, set(), ev["ts"], ev["ts"], True])
        seg = segs[-1]
        seg[1].add((ev.get("node"), ev.get("local_rank")))
        seg[3], seg[4] = ev["ts"], seg[4] and bool(ev.get("observed"))
    spans = _worker_spans(h) if any(s[4] for s in segs) else []
    out = []
    for ws, ranks, t_first, t_last, observed in segs:
        if observed:
            ranks = ranks | {who for size, who, start, end in spans if size == ws and start <= t_last and end >= t_first}
        if len(ranks) < int(ws):
            out.append(f"world size {ws} claimed while {len(ranks)} rank(s) trained")
    return out


def _worker_spans(h: History) -> list[tuple]:
    """(world size, (node, local_rank), start, end) of each worker process the node watcher saw."""
    out = []
    for evs in h.by_incarnation().values():
        start = [e for e in evs if e.get("event") == "worker_start" and e.get("observed")]
        if start and start[0].get("world_size") is not None:
            ends = [e["ts"] for e in evs if e.get("event") == "worker_exit"]
            out.append((start[0]["world_size"], (start[0].get("node"), start[0].get("local_rank")), start[0]["ts"],
                        min(ends) if ends else float("inf")))
    return out
