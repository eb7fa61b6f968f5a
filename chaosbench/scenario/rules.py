"""Scenarios that parse but could never test what they say: refused at load (docs/scenarios.md,
"Refused up front"). Each rule calls `add(loc, message)`; the message says what is wrong and the fix.
"""
from __future__ import annotations

from chaosbench.scenario.model import Scenario

# faults after which a node's processes are gone (kill_all: every node's)
ENDS_NODE = ("kill_node", "stop_node", "preempt_node", "kill_all")
# expectations about recovering from a fault: with no fault there is nothing to judge
NEEDS_A_FAULT = ("recovered_from", "resumed_at_step", "max_lost_steps", "max_recovery_seconds", "world_size_after",
                 "loss_continuity", "max_detection_seconds", "max_slowdown")
NEEDS_KIND = {"saved_within_grace": "preempt_node", "evicts_straggler_within_s": "throttle_node"}


def check(s: Scenario, add) -> None:
    _triggers(s, add)
    _same_instant(s, add)
    _world_sizes(s, add)
    _fault_to_judge(s, add)


def _triggers(s: Scenario, add) -> None:
    """Triggers that can never fire: a time past the run's timeout, a circle of after_fault."""
    limit = s.run.timeout_s
    for i, f in enumerate(s.faults):
        if f.at.seconds is None:
            continue
        last = f.at.seconds + f.at.delay_s + (f.repeat.times - 1) * f.repeat.every_s if f.repeat else \
            f.at.seconds + f.at.delay_s
        if last >= limit:
            what = "its last repetition fires" if f.repeat and f.repeat.times > 1 else "it fires"
            add(("faults", i, "at", "seconds"), f"{what} {last:g} s after training starts, but run.timeout_s ({limit:g}) "
                                                f"ends the run before that: it would never fire; fire earlier or "
                                                f"raise run.timeout_s")
    after = {f.id: f.at.after_fault for f in s.faults}
    for i, f in enumerate(s.faults):
        chain, cur = [f.id], after.get(f.id)
        while cur is not None and cur not in chain:
            chain.append(cur)
            cur = after.get(cur)
        if cur == f.id and f.id == min(chain, key=[g.id for g in s.faults].index):   # each circle once
            add(("faults", i, "at", "after_fault"), f"faults {' -> '.join(chain + [f.id])} each wait for the other to "
                                                    f"heal, so none ever fires; start the chain with a step, seconds "
                                                    f"or event trigger")


def _targets(s: Scenario, f) -> set[str]:
    if f.kind == "kill_all":
        return set(s.node_names())
    out = set()
    for key in ("node", "nodes"):
        v = f.params.get(key)
        out |= {v} if isinstance(v, str) else set(v or [])
    return out - {"random"}   # a random pick may or may not be the same node: not contradictory for sure


def _same_instant(s: Scenario, add) -> None:
    """Two faults fired by the same trigger on one node contradict each other when one of them ends the
    node (kill, stop, preempt: the other then acts on a node that is gone, or is undone by the restart,
    depending only on which the schedule happens to fire first). Two faults that both leave the node
    up (a pause and a packet fault) compose, and are accepted."""
    def when(f):
        return (f.at.model_dump_json(), f.repeat.model_dump_json() if f.repeat else None)
    for j, g in enumerate(s.faults):
        for i, f in enumerate(s.faults[:j]):
            if when(f) != when(g) or f.kind == "add_node" or g.kind == "add_node":
                continue
            shared = sorted(_targets(s, f) & _targets(s, g))
            if not shared:
                continue
            if f.kind in ENDS_NODE or g.kind in ENDS_NODE:
                add(("faults", j, "at"), f"{g.kind} ({g.id}) and {f.kind} ({f.id}) fire at the same instant "
                                         f"({g.at.describe()}) on {', '.join(shared)}, and one of them ends the "
                                         f"node, so what the other does depends on which fires first; give one of them a later trigger (e.g. delay_s: 5) or another node")


def _world_sizes(s: Scenario, add) -> None:
    c, e = s.cluster, s.expect
    ppn, lo, hi = c.procs_per_node, c.elastic.min_nodes * c.procs_per_node, c.elastic.max_nodes * c.procs_per_node
    fix = (f"a world has between cluster.elastic.min_nodes x procs_per_node and max_nodes x procs_per_node "
           f"ranks ({c.elastic.min_nodes} x {ppn} = {lo} to {c.elastic.max_nodes} x {ppn} = {hi}), "
           f"a multiple of {ppn}")
    if e.world_size_after is not None and (e.world_size_after < lo or e.world_size_after % ppn):
        add(("expect", "world_size_after"), f"{e.world_size_after} can never be seen: {fix}; lower "
                                            f"cluster.elastic.min_nodes or expect a world size in that range")
    for k, size in enumerate(e.world_sizes or []):
        if not lo <= size <= hi or size % ppn:
            add(("expect", "world_sizes", k), f"{size} can never be seen: {fix}")
        elif k and size == e.world_sizes[k - 1]:
            add(("expect", "world_sizes", k), f"{size} twice in a row: world_sizes lists each change of the world "
                                              f"size, so a repeat can never be seen; drop one")


def _fault_to_judge(s: Scenario, add) -> None:
    e = s.expect
    kinds = {f.kind for f in s.faults}
    for field in NEEDS_A_FAULT:
        if not s.faults and getattr(e, field) not in (None, False):
            add(("expect", field), f"{field} judges the recovery from a fault, and this scenario injects none; "
                                   f"add a fault under faults: or drop {field}")
    for field, kind in NEEDS_KIND.items():
        if getattr(e, field) not in (None, False) and kind not in kinds:
            add(("expect", field), f"{field} judges {kind} faults, and this scenario has none; add a {kind} "
                                   f"fault or drop {field}")
