"""Property-based tests of the checks (hypothesis): histories generated from a small model of a
correct node-loss recovery pass every check; the same histories mutated with each defect class the
reviews found never pass the check the defect concerns (nor the run), and never crash a check.

The model: n nodes train S steps (dt apart, a memory snapshot every k steps, logged), the last node
is killed, the survivors restart after a delay at world n-1, restore the newest snapshot R and train
A more steps. It is generated as the trainer's own events, or as a job without events seen by the
node watcher (every rank printing every step, or rank 0 only). Derandomized: CI runs the same cases.
"""
from __future__ import annotations

import json
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaosbench.checks import evaluate
from chaosbench.checks.history import FaultWindow, History
from chaosbench.observer.tail import parse_lines
from chaosbench.scenario.model import Expect

from .synth import T0

EXAMPLES = 200
SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

runs = st.fixed_dictionaries({
    "n": st.integers(2, 4), "every": st.integers(1, 8), "S": st.integers(8, 60), "A": st.integers(6, 30),
    "dt": st.sampled_from([0.05, 0.1, 0.25]), "delay": st.floats(0.5, 6.0),
    "form": st.sampled_from(["events", "observed", "rank0"]),
})


def _ev(t, event, node, rank, world, restart, pid, **kw):
    return {"ts": T0 + t, "event": event, "node": node, "rank": rank, "local_rank": 0, "world_size": world,
            "restart_count": restart, "pid": pid, "run_id": "r", **kw}


def model(p: dict) -> tuple[History, Expect]:
    """A correct recovery and the expectations it meets."""
    n, k, S, A, dt, delay, form = (p[x] for x in ("n", "every", "S", "A", "dt", "delay", "form"))
    S = max(S, k)
    R = S - S % k                      # the newest snapshot before the fault
    nodes = [f"node-{i}" for i in range(n)]
    t_f, t_r = S * dt + dt / 2, S * dt + dt / 2 + delay
    observed = form != "events"
    events, agents = [], []

    def emit(e):
        events.append({**e, "observed": True} if observed else e)

    def prints(r):
        return form != "rank0" or r == 0
    for r, node in enumerate(nodes):
        pid = 1000 + r
        if observed:
            emit(_ev(-0.05, "worker_start", node, r, n, 0, pid))
            agents.append({"ts": T0 - 0.1, "event": "rendezvous_done", "node": node, "world_size": n, "observed": True})
            emit(_ev(t_f if r == n - 1 else t_f + delay / 2, "worker_exit", node, r, n, 0, pid))
        for s in range(1, S + 1):
            if prints(r):
                emit(_ev(s * dt, "step", node, r, n, 0, pid, step=s, **({} if observed else {"loss": 1.0})))
            if not observed and s % k == 0:
                emit(_ev(s * dt + 0.001, "checkpoint_saved", node, r, n, 0, pid, tier="memory", step=s, bytes=10))
    for r, node in enumerate(nodes[:-1]):
        pid = 2000 + r
        if observed:
            emit(_ev(t_r, "worker_start", node, r, n - 1, 1, pid))
            agents.append({"ts": T0 + t_r - 0.05, "event": "rendezvous_done", "node": node, "world_size": n - 1,
                           "observed": True})
        else:
            emit(_ev(t_r, "phase", node, r, n - 1, 1, pid, phase="rendezvous"))
            emit(_ev(t_r + 0.1, "checkpoint_loaded", node, r, n - 1, 1, pid, tier="memory", step=R,
                     source="local", checksum_ok=True))
        for j in range(A):
            if prints(r):
                emit(_ev(t_r + 0.2 + j * dt, "step", node, r, n - 1, 1, pid, step=R + 1 + j,
                         **({} if observed else {"loss": 1.0})))
    events.sort(key=lambda e: e["ts"])
    last = max(e["ts"] for e in events)
    h = History(events=events, agent_events=agents,
                faults=[FaultWindow("f1", "kill_node", nodes[-1], {}, T0 + t_f)],
                harness={"training_started_at": T0, "stop_reason": f"reached step {R + A}", "ending": "reached_step",
                         "stopped_at": last + 0.1,
                         "faults_planned": [{"id": "f1", "type": "kill_node", "trigger": f"at step {S}",
                                             "healable": False, "heal_after_s": None}]})
    if not observed:
        h.inventories["f1"] = {"started_at": T0 + t_f + 0.01, "taken_at": T0 + t_f + 0.05, "unseen": [],
                               "looked": [f"{x}/memory" for x in nodes[:-1]],
                               "checkpoints": [{"node": f"{x}/memory", "tier": "memory", "dir": f"step-{R:010d}",
                                                "step": R, "published": True, "valid": True, "reason": "ok"}
                                               for x in nodes[:-1]]}
    e = Expect(max_lost_steps=k - 1, max_recovery_seconds=round(delay + 0.2 + dt + 0.5, 3), world_size_after=n - 1,
               world_sizes=[n, n - 1], reaches_step=R + A, **({} if observed else {"recovered_from": "memory",
                                                                                  "resumed_at_step": R}))
    return h, e


def results(h: History, e: Expect) -> dict:
    _, res = evaluate(h, e)
    return {r.name: r for r in res}


def test_a_correct_recovery_passes_every_check(record_property):
    seen: Counter = Counter()

    @given(runs)
    @SETTINGS
    def prop(p):
        seen[p["form"]] += 1
        h, e = model(p)
        res = results(h, e)
        # an invariant the history cannot show (no loss seen by the node watcher) says so without blocking
        bad = {n: (r.status, r.reason) for n, r in res.items() if r.status != "passed"
               and not (n.startswith("invariant:") and r.status == "not_evaluated" and not r.blocking)}
        assert not bad, (p, bad)
        assert "ending" in res and "fault:f1" in res

    prop()
    record_property("trials", f"{sum(seen.values())} generated correct recoveries (hypothesis, derandomized): "
                              + ", ".join(f"{k} {v}" for k, v in sorted(seen.items())) + "; every check passed")


# -- defects: each returns the checks that must not pass, or None where it does not apply ----------
def _loads(h):
    return [e for e in h.events if e["event"] == "checkpoint_loaded"]


def negative_loss(h, e, p, d):
    if not _loads(h):
        return None
    above = max(x["step"] for x in h.events if x["event"] == "step") + d.draw(st.integers(1, 1000))
    for x in _loads(h):
        x["step"] = above
    return ["max_lost_steps", "recovered_from"]


def tierless_unbacked_claim(h, e, p, d):
    if not _loads(h):
        return None
    step = _loads(h)[0]["step"]
    for x in _loads(h):
        x.pop("tier")
    h.events = [x for x in h.events if not (x["event"] == "checkpoint_saved" and x["step"] == step)]
    h.inventories["f1"]["checkpoints"] = []
    return ["max_lost_steps"]


def wiped_tier_with_earlier_saves(h, e, p, d):
    if not _loads(h):
        return None
    h.inventories["f1"]["checkpoints"] = []   # looked at every survivor's memory: empty
    return ["recovered_from", "max_lost_steps"]


def restore_after_first_step(h, e, p, d):
    if not _loads(h):
        return None
    x = d.draw(st.sampled_from(_loads(h)))
    first = min(s["ts"] for s in h.events if s["event"] == "step" and s["pid"] == x["pid"])
    x["ts"] = first + d.draw(st.floats(0.001, 2.0))
    h.events.sort(key=lambda ev: ev["ts"])
    return ["recovered_from"]


def stalled_fault(h, e, p, d):
    after = sorted({s["ts"] for s in h.events if s["event"] == "step" and s["restart_count"] == 1})
    t_p = d.draw(st.sampled_from(after[1:-1]))
    gap = e.max_recovery_seconds + d.draw(st.floats(0.5, 60.0))
    for x in h.events:
        if x["ts"] >= t_p:
            x["ts"] += gap
    h.faults.append(FaultWindow("f2", "pause_node", "node-0", {}, t_p - 0.01, t_p + gap - 0.05))
    h.harness["faults_planned"].append({"id": "f2", "type": "pause_node", "trigger": "at step x", "healable": True,
                                        "heal_after_s": gap - 0.05})
    h.harness["stopped_at"] += gap
    return ["max_recovery_seconds", "fault:f2"]


def missing_ts(h, e, p, d):
    i = d.draw(st.integers(0, len(h.events) - 1))
    lines = [json.dumps(x) for x in h.events]
    lines[i] = json.dumps({k: v for k, v in h.events[i].items() if k != "ts"})
    rejected: list[str] = []
    h.events = parse_lines(lines, rejected)   # as History.load reads an events file
    h.rejected_lines = rejected
    return ["event_contract"]


def regex_noise(h, e, p, d):
    if p["form"] == "events":
        return None
    steps = [x for x in h.events if x["event"] == "step"]
    like = d.draw(st.sampled_from(steps))
    big = max(x["step"] for x in steps) + d.draw(st.integers(2, 10 ** 12))
    value = d.draw(st.sampled_from([0, big]))
    near = sorted(x["ts"] for x in steps if x["pid"] == like["pid"])
    at = d.draw(st.sampled_from(near)) - d.draw(st.floats(0.0001, 0.01))
    h.events.append({**like, "ts": at, "step": value})
    h.events.sort(key=lambda ev: ev["ts"])
    if value == 0 and like["restart_count"] == 0 and at < T0 + 1.5 * p["dt"]:
        return None   # a 0 printed before step 1: indistinguishable from a job that counts from 0
    return ["max_lost_steps"]


def stuck_ending(h, e, p, d):
    h.harness.update(ending="stuck", stop_reason="stuck: no new step for 120 s")
    return ["ending"]


DEFECTS = [negative_loss, tierless_unbacked_claim, wiped_tier_with_earlier_saves, restore_after_first_step,
           stalled_fault, missing_ts, regex_noise, stuck_ending]


# the defects that need the trainer's own restore events, or a job seen only by the node watcher
FORMS = {regex_noise: ["observed", "rank0"], missing_ts: ["events", "observed", "rank0"],
         stalled_fault: ["events", "observed", "rank0"], stuck_ending: ["events", "observed", "rank0"]}
PER_DEFECT = 60


def test_no_check_passes_a_history_with_a_defect(record_property):
    seen: Counter = Counter()
    for defect in DEFECTS:
        forms = st.sampled_from(FORMS.get(defect, ["events"]))

        @given(runs.flatmap(lambda p: forms.map(lambda f: {**p, "form": f})), st.data())
        @settings(SETTINGS, max_examples=PER_DEFECT)
        def prop(p, d):
            h, e = model(p)
            must_not_pass = defect(h, e, p, d)
            if must_not_pass is None:
                return
            seen[defect.__name__] += 1
            res = results(h, e)   # never raises
            passing = [n for n in must_not_pass if n in res and res[n].status == "passed"]
            assert not passing, (defect.__name__, p, {n: res[n].reason for n in passing})
            assert any(r.blocking for r in res.values()), (defect.__name__, p)

        prop()
    assert set(seen) == {f.__name__ for f in DEFECTS}, seen   # every defect class was exercised
    record_property("trials", f"{sum(seen.values())} generated defective histories (hypothesis, derandomized, "
                              f"{PER_DEFECT} per defect class): " + ", ".join(f"{k} {v}" for k, v in sorted(seen.items()))
                    + "; none passed its check, no check crashed")
