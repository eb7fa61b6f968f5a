"""The stop rule with synthetic clocks: each way a run stops, and what keeps it going."""
from types import SimpleNamespace

from chaosbench.scenario.schedule import Schedule
from chaosbench.scenario.stop import StopRule, stop_reason

from .test_schedule import fire, sched

T0 = 1000.0   # training start, wall clock


def rule(target=50, timeout_s=600, stuck_after_s=120, settle_s=0.0):
    return StopRule(started_at=T0, target=target, timeout_s=timeout_s, stuck_after_s=stuck_after_s, settle_s=settle_s)


def progress(step=0, last_progress_at=T0, phases=None, fatal=""):
    return SimpleNamespace(step=step, last_progress_at=last_progress_at, trainer_phases=phases or {},
                           last_fatal=fatal)


def none_planned() -> Schedule:
    return sched([])


def test_nothing_stops_a_healthy_run_before_its_target():
    assert stop_reason(progress(step=10, last_progress_at=T0 + 9), none_planned(), T0 + 10, rule()) is None


def test_reached_step_stops_once_settled():
    p = progress(step=50, last_progress_at=T0 + 20)
    assert stop_reason(p, none_planned(), T0 + 20, rule(settle_s=5), reached_at=T0 + 20) is None
    assert stop_reason(p, none_planned(), T0 + 25, rule(settle_s=5), reached_at=T0 + 20) == \
        ("reached step 50", "reached_step")


def test_reached_step_waits_for_a_fault_in_place_and_settles_from_its_heal():
    sc = sched([{"at": {"seconds": 5}, "pause_node": {"node": "node-1"}, "duration_s": 30}])
    fire(sc, 5.0)                      # injected at +5 s, heals at +35 s
    p = progress(step=60, last_progress_at=T0 + 20)
    assert stop_reason(p, sc, T0 + 20, rule(settle_s=2), reached_at=T0 + 10) is None   # still in place
    fire(sc, 35.0)
    assert stop_reason(p, sc, T0 + 36, rule(settle_s=2), reached_at=T0 + 10) is None   # settling after the heal
    assert stop_reason(p, sc, T0 + 37, rule(settle_s=2), reached_at=T0 + 10)[1] == "reached_step"


def test_timeout_names_the_highest_step():
    stop = stop_reason(progress(step=7, last_progress_at=T0 + 600), none_planned(), T0 + 600.5, rule())
    assert stop == ("timeout: 600 s elapsed (highest step 7)", "timeout")


def test_stuck_names_the_phases_and_the_last_fatal_error():
    p = progress(step=12, last_progress_at=T0 + 10, phases={"node-1": "rendezvous (restart 1)"},
                 fatal="node-1: RuntimeError boom")
    assert stop_reason(p, none_planned(), T0 + 130, rule()) is None
    reason, ending = stop_reason(p, none_planned(), T0 + 130.5, rule())
    assert ending == "stuck" and reason.startswith("stuck: no new step for 120 s (highest step 12; ")
    assert "node-1: rendezvous (restart 1)" in reason and reason.endswith("; last fatal error: node-1: RuntimeError boom")


def test_every_node_exited_before_the_target():
    reason, ending = stop_reason(progress(step=3), none_planned(), T0 + 5, rule(), exited="node-0 exited:1")
    assert ending == "nodes_exited" and reason == "every node exited before step 50 (highest step 3): node-0 exited:1"


def test_a_job_without_target_that_exits_0_completed_and_one_that_crashed_did_not():
    ok = stop_reason(progress(), none_planned(), T0 + 5, rule(target=None), exited="node-0 exited:0, node-1 exited:0")
    assert ok == ("every node exited: node-0 exited:0, node-1 exited:0", "completed")
    bad = stop_reason(progress(), none_planned(), T0 + 5, rule(target=None), exited="node-0 exited:0, node-1 exited:1")
    assert bad[1] == "nodes_exited"


def test_a_job_that_exits_after_its_target_with_every_fault_done_reached_it():
    reason, ending = stop_reason(progress(step=50), none_planned(), T0 + 5, rule(settle_s=60), reached_at=T0 + 4,
                                 exited="node-0 exited:0")
    assert ending == "reached_step" and reason.startswith("every node exited after reaching step 50")


def test_nodes_down_under_a_fault_that_restarts_them_do_not_stop_the_run():
    sc = sched([{"at": {"seconds": 1}, "kill_all": {}, "duration_s": 10}])
    fire(sc, 1.0)
    assert sc.unhealed()
    assert stop_reason(progress(), sc, T0 + 2, rule(), exited="node-0 exited:-9") is None
