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
            if s % 5 == 0:   # each node's memory snapshot, as the reference trainer logs it
                events.append(ev(0.1 * s + 0.01, "checkpoint_saved", n, r, 3, tier="memory", step=s, bytes=123456))
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


def flapping_node() -> History:
    """node-2 is killed twice (f1, f1#2) and comes back after each, as in a docker run of
    scenarios/flapping_node.yaml. The fault log records each injection once `docker kill` returned,
    0.2 s after the survivors' fatal. Per fault: the survivors restart at world size 2 (the
    recovery), then the healed node rejoins and all three restart again (the next round).

      t   0.1-2.0  steps 1-20 at world 3;     2.2 fatal on node-0/1;   2.4 f1 recorded
      t   3.0      loss round (node-0/1), restored step 20 at 3.5/3.6, steps 21-40 from 4.0
      t   6.5      rejoin round (all three), restored step 39 by 7.1, steps 40-60 from 7.5 to 9.5
      t   9.6      fatal on node-0/1;         9.8 f1#2 recorded
      t  11.0      loss round, restored step 58 at 11.5/11.6, steps 59-78 from 12.0
      t  15.0      rejoin round, restored step 78 by 15.6, steps 79-99 from 16.0
    """
    events: list[dict] = []
    pids = iter(range(2000, 3000))

    def round_(nodes, start, restored, first, steps, restart, sources=None) -> dict[str, int]:
        world, out = len(nodes), {}
        for r, n in enumerate(nodes):
            pid = out[n] = next(pids)
            events.extend([
                ev(start + 0.01 * r, "phase", n, r, world, restart, pid, phase="config"),
                ev(start + 0.02 + 0.01 * r, "phase", n, r, world, restart, pid, phase="rendezvous"),
                ev(first - 0.5 + 0.1 * (r % 2), "checkpoint_loaded", n, r, world, restart, pid, tier="memory",
                   step=restored, source=(sources or {}).get(n, "local"), duration_s=0.05, bytes=1000),
                ev(first - 0.05, "phase", n, r, world, restart, pid, phase="training")])
            events.extend(ev(first + 0.1 * i, "step", n, r, world, restart, pid, step=restored + 1 + i)
                          for i in range(steps))
        return out

    def end(pid_of, t, restart, world, event, **kw):
        events.extend(ev(t, event, n, r, world, restart, pid, **kw)
                      for r, (n, pid) in enumerate(pid_of.items()))

    three = ["node-0", "node-1", "node-2"]
    cold = round_(three, -1.0, 0, 0.1, 20, 0)
    end({n: p for n, p in cold.items() if n != "node-2"}, 2.2, 0, 3, "fatal", error="Connection reset by peer")
    loss = round_(three[:2], 3.0, 20, 4.0, 20, 1)                   # f1: the survivors
    end(loss, 6.4, 1, 2, "phase", phase="shutdown", reason="SIGTERM")    # f1 healed: node-2 rejoins
    rejoin = round_(three, 6.5, 39, 7.5, 21, 1, {"node-2": "peer"})
    end({n: p for n, p in rejoin.items() if n != "node-2"}, 9.6, 1, 3, "fatal", error="Connection reset by peer")
    loss = round_(three[:2], 11.0, 58, 12.0, 20, 2)                   # f1#2: the survivors
    end(loss, 14.9, 2, 2, "phase", phase="shutdown", reason="SIGTERM")    # f1#2 healed: node-2 rejoins
    round_(three, 15.0, 78, 16.0, 21, 2, {"node-2": "peer"})
    # each restored snapshot was saved by the process that trained that step, as the trainer logs it
    for load in [e for e in events if e["event"] == "checkpoint_loaded" and e["step"]]:
        done = [e for e in events if e["event"] == "step" and e["node"] == load["node"] and e["step"] == load["step"]
                and e["ts"] < load["ts"]]
        if done:
            events.append({**done[0], "ts": done[0]["ts"] + 0.01, "event": "checkpoint_saved", "tier": "memory",
                           "bytes": 1000})
    events.sort(key=lambda e: e["ts"])
    faults = [FaultWindow("f1", "kill_node", "node-2", {"node": "node-2"}, T0 + 2.4, T0 + 6.0),
              FaultWindow("f1#2", "kill_node", "node-2", {"node": "node-2"}, T0 + 9.8, T0 + 14.0)]
    return History(events=events, faults=faults, harness={"training_started_at": T0, "stop_reason": "reached step"})


def observed_node_loss(before=range(1, 43), after=range(41, 101), rank0_only=False, noise=()) -> History:
    """A job without events, seen by the node watcher only. Three nodes print the steps in `before`
    (0.1 s apart), node-2 is killed 0.05 s after the last; node-0/1 restart (restart 1, world 2) 1 s
    later and print the steps in `after`. `noise`: (index in `after`, step) lines that match the
    progress regex but are no step. The agents log their rendezvous rounds (world size 3, then 2)."""
    def w(t, event, node, rank, world, restart, pid, **kw):
        return {**ev(t, event, node, rank, world, restart, pid, **kw), "observed": True}
    events, agents = [], []
    nodes = ["node-0", "node-1", "node-2"]
    before, after = list(before), list(after)
    t_kill = 0.1 * len(before) + 0.05
    after_steps = list(after)
    for i, step in sorted(noise, reverse=True):
        after_steps.insert(i, step)
    for r, n in enumerate(nodes):
        agents.append({"ts": T0 - 0.1, "event": "rendezvous_done", "node": n, "world_size": 3, "nodes": 3,
                       "restart_count": 0, "observed": True})
        events.append(w(0.0, "worker_start", n, r, 3, 0, 1000 + r))
        if r == 0 or not rank0_only:
            events += [w(0.1 * (i + 1), "step", n, r, 3, 0, 1000 + r, step=s) for i, s in enumerate(before)]
        events.append(w(t_kill + (0.0 if n == "node-2" else 0.5), "worker_exit", n, r, 3, 0, 1000 + r))
    for r, n in enumerate(nodes[:2]):
        agents.append({"ts": T0 + t_kill + 0.9, "event": "rendezvous_done", "node": n, "world_size": 2,
                       "nodes": 2, "restart_count": 1, "observed": True})
        events.append(w(t_kill + 1.0, "worker_start", n, r, 2, 1, 2000 + r))
        if r == 0 or not rank0_only:
            events += [w(t_kill + 2.0 + 0.1 * i, "step", n, r, 2, 1, 2000 + r, step=s)
                       for i, s in enumerate(after_steps)]
    events.sort(key=lambda e: e["ts"])
    faults = [FaultWindow("f1", "kill_node", "node-2", {"node": "node-2"}, T0 + t_kill)]
    return History(events=events, faults=faults, agent_events=agents,
                   harness={"training_started_at": T0, "stop_reason": "reached step", "ending": "reached_step"})


def hung_rank(detected_after: float | None = 3.1, stopped_after=120.0, ending="stuck", resume=True) -> History:
    """2 nodes train steps 1-50 (0.1 s/step); freeze_worker stops node-1's worker at t=5.0 (fault f1,
    never healed). With `detected_after`, node-0's heartbeat fails that long after it, then its fatal;
    with `resume`, both restart at +1 s and train again (steps 41-60). Without, nothing is heard of
    the job again and the run stops `stopped_after` s after the fault, ending `ending`."""
    events = [ev(0.1 * s, "step", n, r, 2, step=s, loss=2.0) for s in range(1, 51)
              for r, n in enumerate(["node-0", "node-1"])]
    t = 5.0
    if detected_after is not None:
        d = t + detected_after
        events += [ev(d, "health_check_failed", "node-0", 0, 2, error="timed out", timeout_s=5.0),
                   ev(d + 0.1, "fatal", "node-0", 0, 2, error="timed out", error_type="DistBackendError")]
        if resume:
            for r, n in enumerate(["node-0", "node-1"]):
                events.append(ev(d + 1.0, "phase", n, r, 2, restart=1, phase="config"))
                events += [ev(d + 1.5 + 0.1 * i, "step", n, r, 2, restart=1, step=41 + i, loss=2.0) for i in range(20)]
    events.sort(key=lambda e: e["ts"])
    faults = [FaultWindow("f1", "freeze_worker", "node-1", {"node": "node-1", "local_rank": 0}, T0 + t)]
    plan = [{"id": "f1", "type": "freeze_worker", "trigger": "at 5 s", "healable": True, "heal_after_s": None}]
    end = max(e["ts"] for e in events) if resume and detected_after is not None else T0 + t + stopped_after
    return History(events=events, faults=faults, harness={
        "training_started_at": T0, "faults_planned": plan, "stopped_at": end, "ending": ending,
        "stop_reason": ending})


def straggler(rate_during: float, before_s=10.0, during_s=10.0, rate=10.0, ranks=2, healed=True) -> History:
    """`ranks` ranks train at `rate` steps/s; throttle_node (f1) on node-1 from t=before_s for during_s
    s, training at `rate_during` steps/s meanwhile (0: not at all), then at `rate` again for 5 s."""
    times, t = [], 0.0
    while t < before_s - 1e-9:
        t += 1 / rate
        times.append(t)
    if rate_during > 0:
        t = before_s
        while t + 1 / rate_during < before_s + during_s:
            t += 1 / rate_during
            times.append(t)
    t = before_s + during_s
    while t < before_s + during_s + 5:
        t += 1 / rate
        times.append(t)
    nodes = [f"node-{i}" for i in range(ranks)]
    events = [ev(ts, "step", n, r, ranks, step=s + 1, loss=2.0) for s, ts in enumerate(times)
              for r, n in enumerate(nodes)]
    events.sort(key=lambda e: e["ts"])
    heal = T0 + before_s + during_s if healed else None
    faults = [FaultWindow("f1", "throttle_node", "node-1", {"node": "node-1", "cpu_fraction": 0.3},
                          T0 + before_s, heal)]
    plan = [{"id": "f1", "type": "throttle_node", "trigger": f"at {before_s:g} s", "healable": True,
             "heal_after_s": during_s}]
    return History(events=events, faults=faults, harness={
        "training_started_at": T0, "faults_planned": plan, "stopped_at": T0 + max(times) + 0.5,
        "ending": "reached_step", "stop_reason": "reached step"})
