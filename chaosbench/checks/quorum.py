"""Recovery without restarts (torchft): replica groups keep a quorum through a Lighthouse; a lost group drops out,
the survivors train on in the same processes, and a group that comes back heals from a live peer.

Judged from the record alone: worker incarnations (every event's node/local_rank/pid), the agent events the
torchft log adapter writes (`quorum_change` with `replicas`, `heal_start`, `heal_done`: launchers/torchft.py)
and the fault log. A run without quorum events is not evaluated, never passed.
"""
from __future__ import annotations

from chaosbench.checks.base import NO_EVENTS, failed, not_evaluated, passed
from chaosbench.checks.history import History
from chaosbench.checks.lineage import WorldStep
from chaosbench.checks.registry import check
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect


COMES_BACK = ("kill_worker",)   # faults without a heal whose group returns anyway (its torchrun restarts it)


def fault_nodes(h: History) -> set[str]:
    """The nodes a fault acted on (their restarts are the fault's; any other node is a survivor)."""
    return {str(f.params.get("node") or f.target) for f in h.faults}


def quorum_run(h: History) -> bool:
    """The job keeps a quorum of replica groups (torchft): each node's group numbers its own ranks from 0, and a
    lost group leaves the others training in the same round (there is no world-wide restart)."""
    launcher = ((h.scenario or {}).get("trainer") or {}).get("launcher")
    return launcher == "torchft" or any(e.get("event") == "quorum_change" for e in h.agent_events)


def silenced_by_fault(h: History, node: str, last_ts: float, tol_s: float = 2.0) -> str | None:
    """The fault that silenced a node's group (it acted on that node no later than tol_s after its last report)."""
    for f in h.faults:
        if str(f.params.get("node") or f.target) == node and f.injected_at <= last_ts + tol_s:
            if f.healed_at is None or f.healed_at >= last_ts - tol_s:
                return f.id
    return None


def quorum_track(h: History, lin) -> list:
    """The world steps of a quorum run as one track: each time the highest step any group reported goes up. Read
    from every group's step events, not from lin.world: a round's world step needs every member's report, so once
    a group is lost for good its round has none, and the survivors' steps after the fault would go unseen."""
    out, top = [], None
    for e in sorted(h.of("step"), key=lambda e: e["ts"]):
        if top is None or int(e["step"]) > top:
            top = int(e["step"])
            out.append(WorldStep(lin.round_of(e, h), top, e.get("world_size"), float(e["ts"]), ()))
    return out


def quorum_gap(h: History, stride: int) -> tuple[int | None, float | None, str | None]:
    """(top, when, gap) of the world's highest step over every group's step events, as Lineage.contiguous_top
    says it: a step beyond top + stride that no group trained before is a gap (a heal to a peer's step is not)."""
    top, at = None, None
    for x in sorted(h.of("step"), key=lambda x: x["ts"]):
        s = int(x["step"])
        if top is not None and s > top + stride:
            return top, at, f"step {top} -> {s} at {x['ts']:.3f} without a group training the steps between"
        if top is None or s > top:
            top, at = s, float(x["ts"])
    return top, at, None


def survivor_restarts(h: History) -> dict[str, int]:
    """node/localN -> extra incarnations, for workers on nodes no fault touched."""
    hit, slots = fault_nodes(h), {}
    for node, lr, pid, gen in h.incarnation_starts():
        if node not in hit:
            slots.setdefault(f"{node}/local{lr}", set()).add((pid, gen))
    return {k: len(v) - 1 for k, v in slots.items() if len(v) > 1}


def quorum_path(h: History, node: str | None = None) -> list[tuple[float, int, frozenset | None]]:
    """(ts, replica groups, their ids or None) at each quorum change, as one node's groups saw them (default: all,
    by time). A group restarted within the heartbeat timeout comes back under a new id in a quorum of the same size."""
    evs = [e for e in h.agent_events if e.get("event") == "quorum_change" and (node is None or e.get("node") == node)]
    return [(float(e["ts"]), int(e.get("replicas", 0)), frozenset(e["ids"]) if e.get("ids") else None)
            for e in sorted(evs, key=lambda e: e["ts"])]


def quorum_shrinks(h: History) -> list[tuple[float, str, str]]:
    """(ts, node, what) of every quorum change by which a node's group saw a group leave: fewer groups than in the
    quorum it saw before, or as many under other ids (a group restarted within the heartbeat timeout, replaced
    before the Lighthouse dropped it). Growing back is no shrink."""
    out = []
    for node in sorted({str(a.get("node")) for a in h.agent_events if a.get("event") == "quorum_change"}):
        prev = None
        for ts, n, ids in quorum_path(h, node):
            if prev is not None and (n < prev[0] or (n == prev[0] and ids and prev[1] and ids != prev[1])):
                out.append((ts, node, f"torchft quorum {prev[0]} -> {n}" + (" (a group replaced)" if n == prev[0]
                                                                          else "") + f" on {node}"))
            prev = (n, ids)
    return sorted(out)


def heals(h: History, after: float) -> list[tuple[str, float, float | None, int | None, float | None]]:
    """(node, heal_start ts, heal_done ts or None, step healed to, the peer fetch's own seconds) of every heal
    begun after `after`."""
    out, open_ = [], {}
    for e in sorted(h.agent_events, key=lambda e: e["ts"]):
        if e["ts"] < after or e.get("event") not in ("heal_start", "heal_done"):
            continue
        node = str(e.get("node"))
        if e["event"] == "heal_start":
            open_[node] = len(out)
            out.append((node, float(e["ts"]), None, e.get("step"), None))
        elif node in open_:
            i = open_.pop(node)
            out[i] = (out[i][0], out[i][1], float(e["ts"]), out[i][3], e.get("fetch_s"))
    return out


@check("quorum_recovery", "quorum_recovery", "max_heal_seconds", needs="events, torchft quorum events")
def quorum_recovery(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """Survivors never restart; the quorum shrinks at the fault and grows back; the returning group heals from a peer,
    taking up the world's step (recovery.py counts lost work on the world's step at the heal: none may be lost)."""
    if not e.quorum_recovery and e.max_heal_seconds is None:
        return None
    name = "quorum_recovery"
    expected = "no survivor restarts; quorum shrinks then grows back; the returning group heals from a live peer" + (
        f" within {e.max_heal_seconds:g} s of the fault" if e.max_heal_seconds is not None else "")
    if not h.events:
        return not_evaluated(name, expected, NO_EVENTS)
    if not h.faults:
        return not_evaluated(name, expected, "no fault was injected: there is no recovery to judge")
    path = quorum_path(h)
    if not path:
        return not_evaluated(name, expected, "no quorum_change agent events (agent-*.jsonl): the torchft log adapter "
                                             "saw no quorum; run the job under trainer.launcher torchft with torchft's "
                                             "INFO logging on")
    restarts = survivor_restarts(h)
    if restarts:
        return failed(name, expected, sum(restarts.values()), "survivors restarted: " + ", ".join(
            f"{k} x{v}" for k, v in sorted(restarts.items())))
    full = max(n for _, n, _ in path)
    lines = []
    for f in h.faults:
        before = [(n, ids) for ts, n, ids in path if ts < f.injected_at]
        was_n, was_ids = before[-1] if before else (full, None)
        after = [(ts, n, ids) for ts, n, ids in path if ts >= f.injected_at]
        # the fault's group left the quorum: fewer groups, or (restarted within the heartbeat timeout) a new id
        shrink = next(((ts, n) for ts, n, ids in after if n < was_n or (ids and was_ids and ids != was_ids)), None)
        if shrink is None:
            return failed(name, expected, "no shrink", f"{f.id}: the quorum never lost a group after the fault "
                          f"({[n for _, n, _ in after] or 'no quorum change'})")
        grow = next(((ts, n) for ts, n, _ in after if ts >= shrink[0] and n == full), None)
        if grow is None and f.healed_at is None and f.fault not in COMES_BACK:   # lost for good: shrinking is all
            lines.append(f"{f.id}: quorum {was_n} -> {shrink[1]} after {shrink[0] - f.injected_at:.2f} s; the group "
                         f"was lost for good (the fault never heals), the others trained on")
            continue
        if grow is None:
            return failed(name, expected, f"{shrink[1]} of {full}", f"{f.id}: the quorum shrank to {shrink[1]} "
                          f"{shrink[0] - f.injected_at:.2f} s after the fault and never grew back to {full}")
        healed = [x for x in heals(h, f.injected_at) if x[1] <= grow[0] + 1.0]
        if not healed or healed[0][2] is None:
            return failed(name, expected, "no heal", f"{f.id}: the quorum grew back to {full} without a completed "
                          f"heal from a live peer (heal_start/heal_done)")
        node, _, done, step, fetch_s = healed[0]
        rec = next((r for r in recs if r.fault_id == f.id), None)
        if rec is not None and rec.lost_steps is not None and rec.lost_steps > 0:   # a live peer's state is its step
            return failed(name, expected, f"{rec.lost_steps} steps lost", f"{f.id}: {node} resumed at step "
                          f"{rec.restored_step + 1} while the world had reached step {rec.step_before_fault}: it did "
                          f"not take up a live peer's state ({rec.lost_steps} steps lost)")
        took = done - f.injected_at
        if e.max_heal_seconds is not None and took > e.max_heal_seconds:
            return failed(name, expected, round(took, 2), f"{f.id}: {node} healed {took:.2f} s after the fault, over "
                          f"{e.max_heal_seconds:g} s")
        change = (f"quorum {full} -> {shrink[1]} after {shrink[0] - f.injected_at:.2f} s, back to {full} after "
                  f"{grow[0] - f.injected_at:.2f} s" if shrink[1] < full else
                  f"the group rejoined under a new id {shrink[0] - f.injected_at:.2f} s after the fault, before "
                  f"the Lighthouse dropped it (quorum stayed {full})")
        lines.append(f"{f.id}: {change}; {node} healed to step {step} from a peer"
                     + (f" (state fetched in {fetch_s:.3f} s)" if fetch_s is not None else "")
                     + f", {took:.2f} s after the fault")
    return passed(name, expected, "; ".join(lines), "no survivor restarted; " + "; ".join(lines))
