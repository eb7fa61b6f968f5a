"""The settle stop rule: N steps in one unbroken stretch after the last fault settled, at the
story's final world size; what must keep such a run going."""
from types import SimpleNamespace

from chaosbench.observer.progress import Progress, Stretch
from chaosbench.scenario.stop import StopRule, stop_reason

from .test_schedule import fire, sched

T0 = 1000.0


def rule(n=10, world=None, timeout_s=600):
    return StopRule(started_at=T0, target=None, timeout_s=timeout_s, stuck_after_s=120, settle_s=0.0,
                    settled_steps=n, final_world=world)


def feed(stretch, steps, world, at, restart=0, nodes=("node-0", "node-1"), dt=0.1):
    """Step events of `nodes` for `steps`, seen from time `at` one step per dt."""
    for i, s in enumerate(steps):
        for n in nodes:
            stretch = stretch.after({"event": "step", "step": s, "world_size": world, "node": n,
                                     "restart_count": restart}, at + i * dt)
    return stretch


def progress(stretch, step=None, last=T0 + 30):
    return SimpleNamespace(step=step or stretch.top, last_progress_at=last, trainer_phases={}, last_fatal="",
                           stretch=stretch, acted={})


def kill_at(seconds):
    sc = sched([{"at": {"seconds": seconds}, "kill_node": {"node": "node-2"}}])
    fire(sc, seconds)
    return sc


def test_stops_n_steps_after_the_restart_round_not_on_the_steps_before_it():
    sc = kill_at(4.0)                                   # one-shot: done once injected
    s = feed(Stretch(), range(1, 50), 3, T0, nodes=("node-0", "node-1", "node-2"))
    s = feed(s, range(41, 45), 3, T0 + 4.1, nodes=("node-0",))   # in-flight steps seen after the kill
    assert stop_reason(progress(s), sc, T0 + 5, rule(n=10, world=2)) is None   # world 3, and too few
    s = feed(s, range(41, 50), 2, T0 + 7.0, restart=1)              # the survivors' round: 9 steps so far
    assert s.world == 2 and s.top == 49
    assert stop_reason(progress(s), sc, T0 + 8, rule(n=10, world=2)) is None
    s = feed(s, [50], 2, T0 + 8.0, restart=1)
    reason, ending = stop_reason(progress(s), sc, T0 + 8.1, rule(n=10, world=2))
    assert ending == "settled" and "10 steps at world size 2" in reason and "step 50" in reason


def test_a_join_still_to_come_keeps_the_run_going_at_the_old_world_size():
    sc = kill_at(2.0)   # stands in for add_node: done at injection, the node joins seconds later
    s = feed(Stretch(), range(1, 200), 2, T0 + 2.5)
    assert stop_reason(progress(s), sc, T0 + 30, rule(n=10, world=3)) is None
    s = feed(s, range(150, 161), 3, T0 + 30, nodes=("node-0", "node-1", "node-2"))
    assert stop_reason(progress(s), sc, T0 + 32, rule(n=10, world=3))[1] == "settled"


def test_a_fault_in_place_keeps_the_run_going_and_the_count_starts_at_its_heal():
    sc = sched([{"at": {"seconds": 5}, "pause_node": {"node": "node-1"}, "duration_s": 10}])
    fire(sc, 5.0)
    s = feed(Stretch(), range(1, 300), 2, T0)            # steps go on (a degraded job) while it is in place
    assert stop_reason(progress(s), sc, T0 + 12, rule(n=10)) is None
    fire(sc, 15.0)                                        # healed at +15 s
    s2 = feed(Stretch(), range(1, 151), 2, T0)            # steps 1-150 seen by +15 s
    s2 = feed(s2, range(151, 160), 2, T0 + 15.05)         # 9 after the heal
    assert stop_reason(progress(s2), sc, T0 + 16, rule(n=10)) is None
    s2 = feed(s2, [160], 2, T0 + 16)
    assert stop_reason(progress(s2), sc, T0 + 16.1, rule(n=10))[1] == "settled"


def test_a_restart_after_the_settle_point_starts_the_count_again():
    sc = kill_at(1.0)
    s = feed(Stretch(), range(20, 29), 2, T0 + 3, restart=1)       # 9 steps
    s = feed(s, range(25, 30), 2, T0 + 4, restart=2)               # restarted again: a new stretch
    assert s.steps_since(T0 + 1) == 5
    assert stop_reason(progress(s), sc, T0 + 5, rule(n=6)) is None


def test_a_step_going_back_breaks_a_stretch_without_restart_counts():
    s = Stretch()
    for i, st in enumerate([10, 11, 12, 3, 4]):
        s = s.after({"step": st, "world_size": 2, "node": "node-0"}, T0 + i)
    assert s.marks[0][1] == 3 and s.top == 4


def test_a_run_that_never_settles_times_out_and_says_what_it_waited_for():
    sc = kill_at(1.0)
    s = feed(Stretch(), range(1, 100), 3, T0 + 2)
    reason, ending = stop_reason(progress(s, last=T0 + 599), sc, T0 + 601, rule(n=10, world=2))
    assert ending == "timeout" and "never trained 10 steps at world size 2" in reason and "world size 3" in reason


def test_without_the_rule_a_stretch_changes_nothing():
    sc = kill_at(1.0)
    s = feed(Stretch(), range(1, 100), 2, T0 + 2)
    assert stop_reason(progress(s), sc, T0 + 30, rule(n=None)) is None


def test_progress_keeps_the_stretch_of_the_live_view():
    assert Progress().stretch is None   # a run whose stop rule counts no stretch keeps none
    p = Progress(stretch=Stretch())
    for st in range(1, 4):
        p.update({"event": "step", "step": st, "world_size": 3, "node": "node-0", "restart_count": 0})
    p.update({"event": "step", "step": 2, "world_size": 2, "node": "node-0", "restart_count": 1})
    assert p.step == 3 and p.stretch.world == 2 and p.stretch.top == 2


def test_a_cooperative_fault_settles_only_once_the_job_said_it_acted():
    # corrupt_replica is delivered at step 20 and acts at step 42: the steps between are not settled
    sc = sched([{"at": {"step": 20}, "corrupt_replica": {"rank": 1, "step": 42}}])
    assert fire(sc, 2.0, step=20) == [("inject", "f1")] and sc.finished
    s = feed(Stretch(), range(20, 42), 2, T0 + 2.0)
    p = progress(s)
    p.acted = {}
    assert stop_reason(p, sc, T0 + 4.5, rule(n=10)) is None          # 21 steps after delivery: not enough
    p.acted = {"f1": T0 + 4.15}
    s = feed(s, range(42, 51), 2, T0 + 4.2)
    p = progress(s)
    p.acted = {"f1": T0 + 4.15}
    assert stop_reason(p, sc, T0 + 5.2, rule(n=10)) is None          # 9 steps after it acted
    s = feed(s, [51], 2, T0 + 5.3)
    p = progress(s)
    p.acted = {"f1": T0 + 4.15}
    assert stop_reason(p, sc, T0 + 5.4, rule(n=10))[1] == "settled"


def test_progress_records_when_the_job_acted_on_a_command():
    p = Progress()
    p.update({"event": "fault_fired", "fault_id": "f1", "node": "node-1"})
    assert "f1" in p.acted
