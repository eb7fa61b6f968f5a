"""Run-level invariants: what every run is held to over its whole lineage, asked for or not.

Each is one result, `invariant:<name>` (docs/result.md "Run-level invariants"): progress, liveness,
completeness here; numerics, consistency, evidence in invariant_records.py. A scenario relaxes one
only by name with a reason (`expect.relax`): the result then says `relaxed: <reason>` with what it
found, and does not block. An invariant the history cannot show (a job without events has no loss,
and often no ranks) is `not_evaluated` with why; it does not block either: the scenario never asked
for it, and the checks it does ask for say what they need.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from chaosbench.checks.base import NO_EVENTS, failed, not_evaluated, passed
from chaosbench.checks.history import History
from chaosbench.checks.lineage import Lineage, Round, lineage, resume_point
from chaosbench.checks.quorum import quorum_gap, quorum_run, quorum_track, silenced_by_fault
from chaosbench.checks.registry import check
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.check_names import INVARIANTS as NAMES   # the names expect.relax may give
from chaosbench.scenario.model import Expect

TOL_S = 2.0          # clocks of different hosts (the skew the harness corrects beyond: observer/received.py)
STALL_K = 50         # the stall bound: STALL_K x the median time between world steps ...
STALL_FLOOR_S = 20.0  # ... but never under this (docs/result.md says why these)
SILENT_SLACK = 2     # steps a rank's peers may report past its last one (the step in flight when it died)


@dataclass
class Cause:
    what: str                 # in words: "f1 (kill_node) injected", "f1 healed", "the expected ending"
    at: float | None = None   # when it acted
    fault_id: str | None = None


def explain(h: History, e: Expect, lin: Lineage) -> dict[int, Cause | None]:
    """Every round after the first, by the cause of its restart (None: unexplained). A fault action
    (injection, heal) explains one trained round starting after it, within the life of the round
    before; a fault with a heal also explains every round starting while it is in place (the same
    recovery going round again); a round that never trained belongs to the cause pending for it."""
    tokens = sorted([(f.injected_at, Cause(f"{f.id} ({f.fault}) injected", f.injected_at, f.id)) for f in h.faults]
                    + [(f.healed_at, Cause(f"{f.id} ({f.fault}) healed", f.healed_at, f.id))
                       for f in h.faults if f.healed_at is not None], key=lambda t: t[0])
    out: dict[int, Cause | None] = {}
    prev_trained: Round | None = None
    for r in lin.rounds:
        if r.index == 0:
            prev_trained = r if r.world else None
            continue
        floor = (prev_trained.start if prev_trained else float("-inf")) - TOL_S
        pending = [(t, c) for t, c in tokens if floor <= t <= r.start + TOL_S]
        active = [f for f in h.faults if f.healed_at is not None and f.injected_at - TOL_S <= r.start <= f.healed_at + TOL_S]
        if pending:
            out[r.index] = pending[0][1]
            if r.world:
                tokens.remove(pending[0])
        elif active:
            out[r.index] = Cause(f"{active[0].id} ({active[0].fault}) still in place", active[0].injected_at, active[0].id)
        elif joined := _joined(lin.rounds[r.index - 1], r):
            # elastic scale-up: a node that came late (a slow start, a replacement) re-forms the group
            # around every earlier member; torchrun restarts the workers to admit it
            out[r.index] = Cause(f"{', '.join(joined)} joined the job (an elastic scale-up)", r.start)
        elif e.ends is not None:
            out[r.index] = Cause(f"the expected ending ({e.ends})")
        else:
            out[r.index] = None
        if r.world:
            prev_trained = r
    return out


def _joined(before: Round, r: Round) -> list[str]:
    """The nodes a round adds when it keeps every node of the round before it (else [])."""
    was, now = {m.node for m in before.members}, {m.node for m in r.members}
    return sorted(now - was) if was < now else []


def _who(r: Round) -> str:
    return ", ".join(f"{m.node}/local{m.local_rank}" for m in r.members)


def _rel(h: History, lin: Lineage, t: float) -> str:
    start = h.harness.get("training_started_at") or (lin.incarnations[0].start if lin.incarnations else t)
    return f"{t - float(start):.1f} s into the run"


def progress(h: History, e: Expect) -> CheckResult:
    name, expected = "invariant:progress", ("steps advance by the stride within each process; the step counter goes "
                                            "back only by a restore at a restart, and every restart is explained")
    lin = lineage(h)
    if not lin.world and not any(i.steps for i in lin.incarnations):
        return not_evaluated(name, expected, NO_EVENTS if not h.events else "no step was seen")
    stride = lin.stride or 1
    bad: list[str] = []
    for inc in lin.incarnations:
        seq = [int(x["step"]) for x in inc.steps]
        for a, b in zip(seq, seq[1:]):
            if b < a or (b == a and not inc.observed):
                bad.append(f"{inc.label} went from step {a} back to {b} without a restart (steps replayed)")
                break
            if lin.stride is not None and b - a > stride:
                bad.append(f"{inc.label} skipped steps {a + stride}..{b - stride} (no restore between)")
                break
    quorum = quorum_run(h)
    # torchft: the groups' steps side by side are the world's (a rank-0 per group); its track is their highest step
    _, _, gap = quorum_gap(h, stride) if quorum else lin.contiguous_top()
    if gap:
        bad.append(f"the world track has a gap: {gap}")
    causes = explain(h, e, lin)
    top, restarts = None, []
    for r in lin.rounds:
        if r.index > 0:
            cause = causes.get(r.index)
            first = r.first_step
            if quorum and r.first_step_at is not None:   # the quorum trained on: lost work is counted at the heal
                # (the restore); a survivor's report of the step both then train together is not lost work
                at = resume_point(h, r.members, TOL_S) or r.first_step_at
                top = max((int(x["step"]) for x in h.of("step") if x["ts"] < at), default=top)
            lost = None if first is None or top is None else top - (first - stride)
            what = f"round {r.index} ({_who(r)}) at {_rel(h, lin, r.start)}" + (
                f", resumed at step {first} after step {top} ({lost} step(s) lost)" if lost is not None else "")
            if cause is None:
                bad.append(f"unexplained restart: {what}, with no fault behind it")
            else:
                restarts.append(f"{what}: {cause.what}")
            if lost is not None and e.max_lost_steps is not None and lost > e.max_lost_steps and cause is not None:
                bad.append(f"restart lost {lost} steps (> max_lost_steps {e.max_lost_steps}): {what}")
            if first is not None and top is not None and first > top + stride:
                bad.append(f"{what}: resumed beyond the highest step trained before it")
        top = max([top or 0] + [w.step for w in r.world]) if r.world else top
    observed = f"{len(lin.rounds) - 1} restart(s)"
    detail = "; ".join(restarts) or "no restart"
    if bad:
        return failed(name, expected, observed, "; ".join(bad[:6]) + (f" (and {len(bad) - 6} more)" if len(bad) > 6
                                                                       else "") + f" | restarts: {detail}")
    return passed(name, expected, observed, f"steps 1..{top} in order at stride {stride}; {detail}")


def stall_bound(e: Expect, lin: Lineage) -> tuple[float, str]:
    """The longest a world may stand still away from a fault: expect.max_stall_seconds, else
    max(STALL_K x the median time between consecutive world steps of one round, STALL_FLOOR_S)."""
    if e.max_stall_seconds is not None:
        return e.max_stall_seconds, "expect.max_stall_seconds"
    gaps = [b.ts - a.ts for a, b in zip(lin.world, lin.world[1:]) if a.round == b.round]
    med = statistics.median(gaps) if gaps else 0.0
    bound = max(STALL_K * med, STALL_FLOOR_S)
    return round(bound, 3), f"max({STALL_K} x median step {med:.3f} s, {STALL_FLOOR_S:g} s)"


def _fault_bound(h: History, e: Expect) -> tuple[float, str]:
    if e.max_recovery_seconds is not None:
        return e.max_recovery_seconds, "max_recovery_seconds"
    stuck = (h.scenario.get("run") or {}).get("stuck_after_s", 120.0) if isinstance(h.scenario, dict) else 120.0
    return float(stuck), "run.stuck_after_s"


def liveness(h: History, e: Expect) -> CheckResult:
    name = "invariant:liveness"
    lin = lineage(h)
    stall, how = stall_bound(e, lin)
    fbound, fhow = _fault_bound(h, e)
    expected = f"world steps never further apart than {stall:g} s ({how}), {fbound:g} s at a fault ({fhow})"
    if len(lin.world) < 2:
        return not_evaluated(name, expected, NO_EVENTS if not h.events else "fewer than two world steps were seen "
                             "(a step every rank of its round reported)")
    causes = explain(h, e, lin)
    worst, bad = (0.0, ""), []
    # torchft: groups train side by side (a healed group joins, nobody restarts), so the world's progress is
    # the highest step any group reached: its advances are the world steps, one track whatever the rounds
    track = quorum_track(h, lin) if quorum_run(h) else lin.world
    for a, b in zip(track, track[1:]):
        start, end, bound, why = a.ts, b.ts, stall, "away from any fault"
        r = lin.rounds[b.round]
        if b.round != a.round and r.first_step_at is not None and track is lin.world:   # a restart: until the round's first step
            end = r.first_step_at
            cause = causes.get(b.round)
            if cause is not None and cause.at is not None:
                start, bound, why = max(a.ts, cause.at), fbound, f"restart after {cause.what}"
        else:
            hit = [f for f in h.faults if a.ts < (f.healed_at or f.injected_at) and b.ts > f.injected_at]
            if hit:
                start, bound, why = max(a.ts, hit[0].injected_at), fbound, f"during {hit[0].id} ({hit[0].fault})"
        gap = end - start
        if gap > worst[0]:
            worst = (gap, f"{gap:.2f} s after step {a.step} ({why})")
        if gap > bound:
            bad.append(f"no world step for {gap:.2f} s after step {a.step} at {_rel(h, lin, a.ts)} "
                       f"(next: step {b.step}; {why}; bound {bound:g} s)")
    if bad:
        return failed(name, expected, round(worst[0], 3), "; ".join(bad[:5]) + _caveat(h))
    return passed(name, expected, round(worst[0], 3), f"longest: {worst[1]}")


def _caveat(h: History) -> str:
    """What the record says about clock skew, for a timing judgement (History.timing_caveat)."""
    caveat = getattr(h, "timing_caveat", None)
    got = caveat() if callable(caveat) else None
    return f"; {got}" if got else ""


def completeness(h: History, e: Expect) -> CheckResult:
    name, expected = "invariant:completeness", ("in each round every rank 0..world_size-1 reports, each once, until "
                                                "the round ends")
    lin = lineage(h)
    trained = [r for r in lin.rounds if r.trained]
    if not trained:
        return not_evaluated(name, expected, NO_EVENTS if not h.events else "no step was seen")
    stopped = h.harness.get("stopped_at")
    horizon = float(stopped) if isinstance(stopped, (int, float)) else float("inf")
    stride = lin.stride or 1
    bad, unseen = [], []
    # torchft: each node's replica group numbers its ranks from 0; a group a fault took leaves the others training
    group = (lambda m: m.node) if quorum_run(h) else (lambda m: "")
    for r in lin.rounds:
        ranked = [m for m in r.members if m.rank is not None]
        seen: dict[tuple, list] = {}
        for m in ranked:
            seen.setdefault((group(m), m.rank), []).append(m)
            if m.world_size is not None and not 0 <= m.rank < m.world_size:
                bad.append(f"round {r.index}: {m.label} claims rank {m.rank} of world size {m.world_size}")
        bad += [f"round {r.index}: rank {k[1]} claimed by {' and '.join(m.label for m in ms)}"
                for k, ms in seen.items() if len(ms) > 1]
        if not r.trained or (r.first_step_at or 0) > horizon:
            continue
        if lin.observed and len(r.trained) < len(r.members):
            unseen.append(f"round {r.index}: {len(r.trained)} of {len(r.members)} processes print progress")
            reporters = {(group(m), m.rank) for m in r.members}
        else:
            reporters = {(group(m), m.rank) for m in r.trained}
        for ws in sorted(r.sizes or ({r.world_size} - {None})):
            for g in sorted({k[0] for k in reporters}) or [""]:
                ranks = {k[1] for k in reporters if k[0] == g}
                if ranks != set(range(ws)):
                    bad.append(f"round {r.index} claims world size {ws}, but rank(s) {sorted(x for x in ranks if x is not None)} "
                               "reported" + (f" in {g}'s replica group" if g else ""))
        if lin.observed and len(r.trained) < len(r.members):
            continue
        for m in r.trained:
            if group(m) and m.steps and silenced_by_fault(h, m.node, float(m.steps[-1]["ts"])):
                continue   # its group was lost to a fault; the quorum trained on without it
            later = [(p, x) for p in r.trained if p is not m for x in p.steps
                     if int(x["step"]) > m.last_step + SILENT_SLACK * stride and x["ts"] <= horizon]
            if later:
                p, x = later[-1]
                bad.append(f"round {r.index}: {m.label} fell silent after step {m.last_step} while {p.label} went on "
                           f"to step {x['step']}")
    note = ("; not evaluated: " + "; ".join(unseen)) if unseen else ""
    if bad:
        return failed(name, expected, len(bad), "; ".join(bad[:5]) + note)
    return passed(name, expected, f"{len(trained)} round(s)", f"every rank of {len(trained)} round(s) that trained "
                                                               f"reported, each once{note}")


@check("invariants", always=True,
       help="the run-level invariants every run is held to (docs/result.md)",
       needs="events, inventory")
def invariants(h: History, e: Expect, recs: list[Recovery]) -> list[CheckResult]:
    """Every invariant, each its own result; a relaxed one (expect.relax) says why and does not block."""
    from chaosbench.checks.invariant_records import consistency, evidence, numerics
    fns = {"progress": progress, "liveness": liveness, "completeness": completeness, "numerics": numerics,
           "consistency": consistency, "evidence": evidence}
    out = []
    for key in NAMES:
        r = fns[key](h, e)
        why = (e.relax or {}).get(key)
        if why:
            found = "nothing against it" if r.status == "passed" else f"{r.status}: {r.reason}"
            r = r.model_copy(update={"status": "passed" if r.status == "passed" else "not_evaluated",
                                     "reason": f"relaxed: {why} (found {found})"})
        r.optional = bool(why) or r.status == "not_evaluated"
        out.append(r)
    return out
