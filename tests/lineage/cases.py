"""The histories of issue 44's "Why" list (Progress, Liveness, Ranks, Numerics, Evidence), built from
a synthetic node_loss run: each was judged passed before the lineage and its invariants existed.
Each builder returns (history, expect keys, the results that must now block)."""
from __future__ import annotations

import math

from tests.checks.synth import T0, ev, node_loss


def _round1(h):
    return [e for e in h.events if e.get("restart_count") == 1]


def fresh_restart_without_fault():
    """After recovering, both survivors restart again with no fault behind it, fresh-start from 0, train 1..25."""
    h = node_loss()
    for r, n in enumerate(["node-0", "node-1"]):
        h.events += [ev(14.0, "phase", n, r, 2, restart=2, phase="config"),
                     ev(14.5, "checkpoint_fresh_start", n, r, 2, restart=2, reason="nothing found")]
        h.events += [ev(15.0 + 0.1 * i, "step", n, r, 2, restart=2, step=1 + i, loss=3.0) for i in range(25)]
    h.events.sort(key=lambda e: e["ts"])
    h.harness.update(stop_reason="trained 20 steps", ending="settled")
    return h, {"trains_after_settle": 20}, {"invariant:progress"}


def steps_missing_everywhere():
    """Steps 46-59 missing from every rank."""
    h = node_loss()
    h.events = [e for e in h.events if not (e["event"] == "step" and e.get("restart_count") == 1 and 46 <= e["step"] <= 59)]
    return h, {"reaches_step": 100}, {"invariant:progress"}


def steps_replayed_without_restart():
    h = node_loss()
    for r, n in enumerate(["node-0", "node-1"]):
        h.events += [ev(13.0 + 0.1 * i, "step", n, r, 2, restart=1, step=90 + i, loss=2.5) for i in range(5)]
    h.events.sort(key=lambda e: e["ts"])
    return h, {"reaches_step": 100}, {"invariant:progress"}


def lone_step_after_stop():
    """Training stopped at 60; one `step 100` line after it."""
    h = node_loss(steps_after=20)
    h.events.append(ev(12.0, "step", "node-0", 0, 2, restart=1, step=100, loss=2.5))
    return h, {"reaches_step": 100}, {"reaches_step", "invariant:progress"}


def stall_after_first_step():
    """The restart round trains one step, then stands still for 60 s."""
    h = node_loss()
    for e in _round1(h):
        if e["event"] == "step" and e["step"] > 41:
            e["ts"] += 60.0
    return h, {"max_recovery_seconds": 10}, {"invariant:liveness"}


def rank_falls_silent():
    h = node_loss()
    h.events = [e for e in h.events if not (e["event"] == "step" and e["node"] == "node-1"
                                            and e.get("restart_count") == 1 and e["step"] > 50)]
    return h, {"reaches_step": 100}, {"invariant:completeness"}


def two_rank_zero():
    h = node_loss()
    for e in _round1(h):
        if e["node"] == "node-1":
            e["rank"] = 0
    return h, {"world_size_after": 2}, {"invariant:completeness"}


def rank_beyond_world():
    h = node_loss()
    for e in _round1(h):
        if e["node"] == "node-1":
            e["rank"] = 5
    return h, {"world_size_after": 2}, {"invariant:completeness"}


def two_claim_world_three():
    h = node_loss()
    for e in _round1(h):
        e["world_size"] = 3
    return h, {"max_lost_steps": 5}, {"invariant:completeness"}


def nan_after_restore():
    h = node_loss(after_loss=math.nan)
    return h, {"loss_continuity": True}, {"loss_continuity", "invariant:numerics"}


def loss_x1000_from_second_step():
    h = node_loss()
    for e in _round1(h):
        if e["event"] == "step" and e["step"] > 41:
            e["loss"] *= 1000
    return h, {"loss_continuity": True}, {"loss_continuity", "invariant:numerics"}


def checksum_zero():
    h = node_loss()
    for e in h.of("checkpoint_loaded"):
        e["checksum_ok"] = 0
    return h, {"recovered_from": "memory"}, {"invariant:evidence"}


def loads_what_it_called_invalid():
    h = node_loss()
    h.events.append(ev(6.3, "checkpoint_invalid", "node-0", 0, 2, restart=1, tier="memory", step=40,
                       error="checksum mismatch"))
    h.events.sort(key=lambda e: e["ts"])
    return h, {"recovered_from": "memory"}, {"invariant:evidence"}


def digests_stop_after_restore():
    h = node_loss()
    for e in h.of("step"):
        if e["step"] % 5 == 0 and e.get("restart_count") == 0:
            e["param_digest"] = f"d{e['step']}"
    return h, {"replicas_agree": True}, {"replicas_agree"}


def dying_workers_late_save():
    """The only save of step 40 is one the killed node logged after the harness's inventory began."""
    h = node_loss()
    h.events = [e for e in h.events if not (e["event"] == "checkpoint_saved" and e["step"] == 40)]
    h.events.append(ev(4.15, "checkpoint_saved", "node-2", 2, 3, tier="memory", step=40, bytes=123456))
    h.events.sort(key=lambda e: e["ts"])
    for e in h.of("checkpoint_loaded"):
        e["source"] = "peer"
    h.inventories["f1"] = {"fault_id": "f1", "started_at": T0 + 4.1, "taken_at": T0 + 4.3, "files": [],
                           "checkpoints": [], "unseen": [],
                           "looked": ["node-0/memory", "node-1/memory", "node-2/memory"]}
    return h, {"recovered_from": "memory"}, {"recovered_from", "invariant:evidence"}


CASES = {f.__name__: f for f in (fresh_restart_without_fault, steps_missing_everywhere, steps_replayed_without_restart,
                                  lone_step_after_stop, stall_after_first_step, rank_falls_silent, two_rank_zero,
                                  rank_beyond_world, two_claim_world_three, nan_after_restore,
                                  loss_x1000_from_second_step, checksum_zero, loads_what_it_called_invalid,
                                  digests_stop_after_restore, dying_workers_late_save)}


def blocking(h, expect: dict) -> set[str]:
    from chaosbench.checks import evaluate
    from chaosbench.scenario.model import Expect
    return {r.name for r in evaluate(h, Expect(**expect))[1] if r.blocking}
