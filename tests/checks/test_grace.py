"""saved_within_grace: a save between the preemption notice and the kill, and a restore of it. The
histories that would pass it wrongly (a save just after the kill, a restore of an older step, a save
by another node before the notice, no restore) fail."""
from chaosbench.checks import evaluate
from chaosbench.checks.history import FaultWindow, History
from chaosbench.scenario.model import Expect

from .synth import T0, ev

NODES = ["node-0", "node-1", "node-2"]
NOTICE = 4.55   # just after step 45


def preemption(saves=((4.7, "node-2", 45), (4.7, "node-0", 45), (4.7, "node-1", 45)), load=45, grace=10.0,
               planned=True, injected=True) -> History:
    """3 nodes train steps 1-45 (0.1 s/step), saving to memory every 20 steps; node-2 gets the notice at
    4.55 s. `saves`: (t, node, step) checkpoint_saved after that; node-0/1 restart at 15 s (after the
    kill) and restore `load` (None: they start fresh) and train on."""
    events = []
    for r, n in enumerate(NODES):
        for s in range(1, 46):
            events.append(ev(0.1 * s, "step", n, r, 3, step=s, loss=2.0))
            if s % 20 == 0:
                events.append(ev(0.1 * s + 0.01, "checkpoint_saved", n, r, 3, tier="memory", step=s, bytes=10))
    for t, n, step in saves:
        events.append(ev(t, "checkpoint_saved", n, NODES.index(n), 3, tier="memory", step=step, bytes=10))
    for r, n in enumerate(NODES[:2]):
        events.append(ev(15.0, "phase", n, r, 2, restart=1, phase="config"))
        if load is None:
            events.append(ev(15.2, "checkpoint_fresh_start", n, r, 2, restart=1, reason="nothing"))
        else:
            events.append(ev(15.2, "checkpoint_loaded", n, r, 2, restart=1, tier="memory", step=load,
                             source="local", duration_s=0.01, checksum_ok=True))
        start = load or 0
        events += [ev(15.5 + 0.1 * i, "step", n, r, 2, restart=1, step=start + 1 + i, loss=2.0) for i in range(20)]
    events.sort(key=lambda e: e["ts"])
    faults = [FaultWindow("p1", "preempt_node", "node-2", {"node": "node-2", "grace_s": grace}, T0 + NOTICE)] \
        if injected else []
    plan = [{"id": "p1", "type": "preempt_node", "trigger": "at step 45", "healable": False,
             "heal_after_s": None}] if planned else []
    return History(events=events, faults=faults, harness={"training_started_at": T0, "faults_planned": plan})


def check(h: History):
    out = [r for r in evaluate(h, Expect(saved_within_grace=True))[1] if r.name.startswith("saved_within_grace")]
    assert len(out) == 1
    return out[0]


def test_a_save_in_the_window_that_the_restore_used_passes():
    r = check(preemption())
    assert (r.status, r.name, r.fault_id) == ("passed", "saved_within_grace:p1", "p1")
    assert r.reason == ("p1 (preempt_node) on node-2: notice at 0 s, kill at 10 s; saved step 45 (memory) by "
                        "node-2/rank 2 at +0.15 s (the preempted node); the restore at +10.65 s loaded it (memory)")


def test_a_save_by_another_node_in_the_window_passes_and_says_whose():
    r = check(preemption(saves=((4.7, "node-0", 45),)))
    assert r.status == "passed"
    assert "by node-0/rank 0 at +0.15 s (not the preempted node-2: no rank of it saved in the window)" in r.reason


def test_a_save_just_after_the_kill_fails():
    r = check(preemption(saves=((NOTICE + 10.05, "node-2", 45),)))
    assert (r.status, r.observed) == ("failed", "no save in the grace period")
    assert r.reason == ("p1 (preempt_node) on node-2: notice at 0 s, kill at 10 s; no checkpoint was saved in "
                        "between: the last save before the notice was step 40 (memory) by node-2/rank 2 at -0.54 s; "
                        "the first after it came after the kill: step 45 (memory) by node-2/rank 2 at +10.05 s")


def test_a_save_by_a_node_that_was_not_preempted_before_the_notice_fails():
    r = check(preemption(saves=((4.5, "node-0", 45),)))
    assert r.status == "failed"
    assert "the last save before the notice was step 45 (memory) by node-0/rank 0 at -0.05 s" in r.reason


def test_a_restore_of_an_older_step_fails():
    r = check(preemption(load=40))
    assert (r.status, r.observed) == ("failed", "restored step 40")
    assert "but the restore at +10.65 s loaded step(s) [40]: an older step, the notice save was not used" in r.reason


def test_a_save_never_restored_fails():
    r = check(preemption(load=None))
    assert r.status == "failed" and r.reason.endswith("but no checkpoint_loaded followed it")


def test_a_restore_of_a_step_no_one_saved_fails():
    r = check(preemption(load=50))
    assert r.status == "failed" and "loaded step 50, which no save recorded" in r.reason


def test_no_preemption_planned_is_not_evaluated():
    r = check(preemption(planned=False, injected=False))
    assert (r.status, r.reason) == ("not_evaluated", "no preempt_node fault was planned")


def test_a_preemption_planned_but_never_injected_fails():
    r = check(preemption(injected=False))
    assert (r.status, r.reason) == ("failed", "p1 (preempt_node) was planned but never injected")
