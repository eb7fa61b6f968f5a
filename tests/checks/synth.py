"""Synthetic recorded histories (what a real run leaves in reports/<run-id>/) for check tests."""
from __future__ import annotations

from chaosbench.checks.history import FaultWindow, History

T0 = 1_700_000_000.0


def ev(t, event, node, rank, world, restart=0, pid=None, **kw):
    return {"ts": T0 + t, "event": event, "node": node, "rank": rank, "local_rank": 0, "world_size": world,
            "restart_count": restart, "pid": pid or (1000 + 10 * int(node[-1]) + restart), "run_id": "r", **kw}


def node_loss(tier: str | None = "memory", emit_tier: bool = True, restored=40, after_loss=2.0,
              steps_after=60, fatal=True) -> History:
    """3 nodes train to step 42 (0.1 s/step); node-2 is killed at t=4.0 (step 40); the survivors
    restart at t=6.0, restore `restored` from `tier` at 6.5/6.6 and train at world size 2 from t=7.0."""
    events = []
    nodes = ["node-0", "node-1", "node-2"]
    for r, n in enumerate(nodes):
        events += [ev(0.0, "phase", n, r, 3, phase="training")]
        for s in range(1, 43):
            events.append(ev(0.1 * s, "step", n, r, 3, step=s, loss=3.0 - 0.01 * s))
        if n != "node-2" and fatal:
            events.append(ev(4.25, "fatal", n, r, 3, error="Connection reset by peer", error_type="DistBackendError"))
    for r, n in enumerate(nodes[:2]):
        events += [ev(6.0 + 0.01 * r, "phase", n, r, 2, restart=1, phase="rendezvous"),
                   ev(6.1, "phase", n, r, 2, restart=1, phase="checkpoint_restore")]
        if tier is not None:
            fields = {"step": restored, "source": "local" if r == 0 else "peer", "duration_s": 0.05,
                      "checksum_ok": True, "bytes": 123456}
            if emit_tier:
                fields["tier"] = tier
            events.append(ev(6.5 + 0.1 * r, "checkpoint_loaded", n, r, 2, restart=1, **fields))
        else:
            events.append(ev(6.5, "checkpoint_fresh_start", n, r, 2, restart=1, reason="nothing found"))
        for i, s in enumerate(range(restored + 1, restored + 1 + steps_after)):
            loss = after_loss if i == 0 else 2.5
            events.append(ev(7.0 + 0.1 * i, "step", n, r, 2, restart=1, step=s, loss=loss))
    events.sort(key=lambda e: e["ts"])
    faults = [FaultWindow("f1", "kill_node", "node-2", {"node": "node-2"}, T0 + 4.0)]
    return History(events=events, faults=faults, harness={"training_started_at": T0, "stop_reason": "reached step"})


def no_fault(steps=50) -> History:
    events = [ev(0.1 * s, "step", n, r, 2, step=s, loss=3.0) for s in range(1, steps + 1)
              for r, n in enumerate(["node-0", "node-1"])]
    return History(events=events, harness={"training_started_at": T0})
