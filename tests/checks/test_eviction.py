"""evicts_straggler_within_s: after throttle_node, a round without the slow node trains within the
bound. Histories where the node stays, comes back in every round, or leaves with no training after
it fail; a run too short to tell is not evaluated."""
from chaosbench.checks import evaluate
from chaosbench.checks.history import FaultWindow, History
from chaosbench.scenario.model import Expect

from .synth import T0, ev, straggler

NODES = ["node-0", "node-1", "node-2"]


def evicted(second_round=("node-0", "node-2"), restart_at=13.0, steps_after=30, stopped=25.0,
            next_fault_at=None) -> History:
    """3 nodes step at 10 steps/s; node-1 is throttled at 10 s; the job drops it: the nodes in
    `second_round` start a new round at `restart_at` and step from +1 s."""
    events = [ev(0.1 * s, "step", n, r, 3, step=s, loss=2.0) for s in range(1, 101) for r, n in enumerate(NODES)]
    world = len(second_round)
    for r, n in enumerate(second_round):
        events.append(ev(restart_at, "phase", n, r, world, restart=1, pid=7000 + r, phase="config"))
        events += [ev(restart_at + 1.0 + 0.1 * i, "step", n, r, world, restart=1, pid=7000 + r, step=95 + i, loss=2.0)
                   for i in range(steps_after)]
    events.sort(key=lambda e: e["ts"])
    faults = [FaultWindow("f1", "throttle_node", "node-1", {"node": "node-1", "cpu_fraction": 0.2}, T0 + 10.0)]
    plan = [{"id": "f1", "type": "throttle_node", "trigger": "at 10 s", "healable": True, "heal_after_s": None}]
    if next_fault_at is not None:
        faults.append(FaultWindow("f2", "kill_node", "node-0", {"node": "node-0"}, T0 + next_fault_at))
        plan.append({"id": "f2", "type": "kill_node", "trigger": "at 12 s", "healable": False, "heal_after_s": None})
    return History(events=events, faults=faults, harness={"training_started_at": T0, "faults_planned": plan,
                                                          "stopped_at": T0 + stopped})


def check(h: History, bound: float):
    (r,) = [r for r in evaluate(h, Expect(evicts_straggler_within_s=bound))[1]
            if r.name.startswith("evicts_straggler_within_s")]
    return r


def test_a_round_without_the_slow_node_within_the_bound_passes():
    r = check(evicted(), 10)
    assert (r.status, r.name, r.observed) == ("passed", "evicts_straggler_within_s:f1", 4.0)
    assert r.reason == ("f1 (throttle_node) on node-1: a round of node-0, node-2 (world size 2) started 3.0 s after "
                        "the throttle and trained step 95 4 s after it")


def test_too_late_fails():
    r = check(evicted(), 2)
    assert (r.status, r.observed) == ("failed", 4.0)


def test_a_straggler_the_job_keeps_fails():
    h = straggler(rate_during=3.0, healed=False)
    r = check(h, 3)
    assert r.status == "failed"
    assert r.reason.startswith("f1 (throttle_node) on node-1: no new rendezvous round after it: node-1 stayed in the job")


def test_a_restart_that_keeps_the_slow_node_is_no_eviction():
    r = check(evicted(second_round=tuple(NODES)), 10)
    assert r.status == "failed" and "each of the 1 round(s) after it included node-1" in r.reason


def test_leaving_without_training_on_is_no_eviction():
    r = check(evicted(steps_after=0), 10)
    assert r.status == "failed" and "node-1 left at 3.0 s but no round without it reported a step" in r.reason


def test_a_round_after_the_next_fault_belongs_to_that_fault():
    r = check(evicted(next_fault_at=12.0), 10)
    assert r.status != "passed"


def test_a_run_that_stopped_before_the_bound_is_not_evaluated():
    r = check(evicted(second_round=tuple(NODES), stopped=14.0), 10)
    assert r.status == "not_evaluated" and "the run stopped 4.0 s after it" in r.reason


def test_no_throttle_planned_is_not_evaluated():
    h = evicted()
    h.harness["faults_planned"], h.faults = [], []
    r = check(h, 10)
    assert (r.status, r.reason) == ("not_evaluated", "no throttle_node fault was planned")
