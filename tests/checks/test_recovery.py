"""Recovery breakdown and the recovery checks, over synthetic histories."""
from chaosbench.checks import evaluate
from chaosbench.checks.history import FaultWindow, History
from chaosbench.checks.invariants import NAMES
from chaosbench.checks.registry import all_checks
from chaosbench.checks.recovery import recoveries
from chaosbench.checks.recovery_checks import (max_lost_steps, max_recovery_seconds, recovered_from,
                                               world_size_after, world_sizes)
from chaosbench.scenario.model import Expect

from .synth import T0, flapping_node, node_loss


def test_breakdown_of_a_node_loss():
    (r,) = recoveries(node_loss())
    assert r.fault_id == "f1" and r.injected_at == T0 + 4.0
    assert r.detection_s == 0.25                 # survivors' fatal event
    assert r.rendezvous_s == 1.75                # new incarnation at 6.0
    assert r.restore_s == 0.6                    # last rank restored at 6.6
    assert r.first_step_s == 0.4                 # first step at 7.0
    assert r.total_s == 3.0
    assert (r.tier, r.restored_step, r.source) == ("memory", 40, "local,peer")
    assert (r.step_before_fault, r.lost_steps) == (42, 2)
    assert (r.world_size_before, r.world_size_after) == (3, 2)
    assert r.failed_restarts == 0


def test_failed_restart_rounds_are_counted():
    h = node_loss()
    for n, r in (("node-0", 0), ("node-1", 1)):   # a first round that died in process-group setup
        h.events.append({"ts": h.faults[0].injected_at + 1.0, "event": "fatal", "node": n, "rank": r,
                         "local_rank": 0, "world_size": 2, "restart_count": 1, "pid": 5000 + r,
                         "error": "Gloo connectFullMesh failed"})
    h.events.sort(key=lambda e: e["ts"])
    (rec,) = recoveries(h)
    assert rec.failed_restarts == 2 and rec.tier == "memory"
    res = max_recovery_seconds(h, Expect(max_recovery_seconds=30), [rec])
    assert "(2 worker start(s) failed before training resumed)" in res.reason


def test_no_detection_event_leaves_detection_unknown_not_zero():
    (r,) = recoveries(node_loss(fatal=False))
    assert r.detected_at is None and r.detection_s is None
    assert r.rendezvous_s == 2.0 and r.total_s == 3.0


def test_recovered_from_passes_and_fails_with_reason():
    res = recovered_from(node_loss(), Expect(recovered_from="memory"), recoveries(node_loss()))
    assert res.status == "passed" and res.observed == "memory@40"
    h = node_loss()
    res = recovered_from(h, Expect(recovered_from="s3"), recoveries(h))
    assert res.status == "failed"
    assert "expected s3" in res.reason and "restored step 40 from memory" in res.reason


def test_resumed_at_step():
    h = node_loss(restored=35)
    assert recovered_from(h, Expect(resumed_at_step=35), recoveries(h)).status == "passed"
    res = recovered_from(h, Expect(recovered_from="memory", resumed_at_step=40), recoveries(h))
    assert res.status == "failed" and "step 35" in res.reason


def test_trainer_without_tier_is_not_evaluated():
    h = node_loss(emit_tier=False)
    res = recovered_from(h, Expect(recovered_from="memory"), recoveries(h))
    assert res.status == "not_evaluated" and "no restore tier seen; emit checkpoint_loaded" in res.reason


def test_trainer_without_events_is_not_evaluated():
    h = History(faults=node_loss().faults)
    for check in (recovered_from, max_lost_steps, max_recovery_seconds, world_size_after):
        res = check(h, Expect(recovered_from="memory", max_lost_steps=1, max_recovery_seconds=5,
                              world_size_after=2), [])
        assert res.status == "not_evaluated" and "no events" in res.reason


def test_no_restart_after_fault_fails_recovery_checks():
    h = node_loss()
    h.events = [e for e in h.events if e["restart_count"] == 0]
    res = recovered_from(h, Expect(recovered_from="memory"), recoveries(h))
    assert res.status == "failed" and "no worker restarted after fault(s) f1" in res.reason


def test_restart_that_never_trains_fails():
    h = node_loss(steps_after=0)
    res = max_recovery_seconds(h, Expect(max_recovery_seconds=30), recoveries(h))
    assert res.status == "failed" and "never completed a training step" in res.reason


def test_no_fault_injected_is_not_evaluated():
    h = node_loss()
    h.faults = []
    assert recovered_from(h, Expect(recovered_from="memory"), []).status == "not_evaluated"


def test_max_lost_steps_bound():
    h = node_loss()
    recs = recoveries(h)
    assert max_lost_steps(h, Expect(max_lost_steps=5), recs).status == "passed"
    res = max_lost_steps(h, Expect(max_lost_steps=1), recs)
    assert res.status == "failed" and res.observed == 2 and "last step 42, resumed at 40" in res.reason


def test_fresh_start_counts_everything_as_lost():
    h = node_loss(tier=None, restored=0)
    (r,) = recoveries(h)
    assert r.tier == "none" and r.lost_steps == 42
    res = recovered_from(h, Expect(recovered_from="memory"), [r])
    assert res.status == "failed" and "from none" in res.reason


def test_max_recovery_seconds_reports_breakdown():
    h = node_loss()
    recs = recoveries(h)
    ok = max_recovery_seconds(h, Expect(max_recovery_seconds=30), recs)
    assert ok.status == "passed" and "detection 0.25s + rendezvous 1.75s + restore 0.60s" in ok.reason
    assert max_recovery_seconds(h, Expect(max_recovery_seconds=2.5), recs).status == "failed"


def test_world_size_checks():
    h = node_loss()
    recs = recoveries(h)
    assert world_size_after(h, Expect(world_size_after=2), recs).status == "passed"
    assert world_size_after(h, Expect(world_size_after=3), recs).status == "failed"
    assert world_sizes(h, Expect(world_sizes=[3, 2]), recs).status == "passed"
    res = world_sizes(h, Expect(world_sizes=[3, 2, 3]), recs)
    assert res.status == "failed" and res.observed == [3, 2]


def test_mixed_tiers_across_ranks_fail():
    h = node_loss()
    for e in h.events:
        if e["event"] == "checkpoint_loaded" and e["rank"] == 1:
            e["tier"] = "nvme"
    res = recovered_from(h, Expect(recovered_from="memory"), recoveries(h))
    assert res.status == "failed" and "memory,nvme" in res.observed


def test_evaluate_marks_optional_and_only_runs_requested():
    h = node_loss(emit_tier=False)
    recs, results = evaluate(h, Expect(recovered_from="memory", max_lost_steps=5, optional=["recovered_from"]))
    by = {r.name: r for r in results}
    always = {d.name for d in all_checks() if d.always} | {f"invariant:{n}" for n in NAMES}
    assert set(by) - always == {"recovered_from", "max_lost_steps"} and "ending" in by
    assert len(recs) == 1
    assert by["recovered_from"].status == "not_evaluated" and by["recovered_from"].optional
    assert not by["recovered_from"].blocking and not by["max_lost_steps"].blocking
    _, results = evaluate(h, Expect(recovered_from="memory"))
    assert {r.name: r for r in results}["recovered_from"].blocking   # not evaluated, not optional: fails the run


def test_restarted_container_reusing_the_dead_workers_pid_is_a_new_incarnation():
    """docker restarts a node in a fresh PID namespace: the new worker often has the old pid."""
    from chaosbench.checks.history import fault_windows

    def ev(ts, event, **kw):
        return {"ts": ts, "event": event, "node": "node-0", "rank": 0, "local_rank": 0, "pid": 42,
                "world_size": 1, "restart_count": 0, **kw}
    events = [ev(100.0, "phase", phase="config")]
    events += [ev(100.0 + s, "step", step=s) for s in range(1, 31)]          # killed right after step 30
    events += [ev(140.0, "phase", phase="config"),                           # same pid, new process
               ev(143.0, "checkpoint_loaded", tier="nvme", step=20, source="local", duration_s=0.3),
               ev(144.0, "step", step=21), ev(145.0, "step", step=22)]
    faults = fault_windows([{"ts": 131.0, "id": "f1", "fault": "kill_all", "action": "inject", "target": "node-0"},
                            {"ts": 132.0, "id": "f1", "fault": "kill_all", "action": "heal", "target": "node-0"}])
    (rec,) = recoveries(History(events=events, faults=faults))
    assert rec.step_before_fault == 30 and rec.restored_step == 20 and rec.lost_steps == 10
    assert rec.rendezvous_s == 9.0 and rec.total_s == 13.0


PHASE_KEYS = ("detection_s", "rendezvous_s", "restore_s", "first_step_s")


def _assert_consistent(r):
    """No phase is negative or zero-for-unknown, and the measured phases add up to the total."""
    phases = [getattr(r, k) for k in PHASE_KEYS]
    assert all(p is None or p >= 0 for p in phases), (r.fault_id, phases)
    assert r.restore_s is not None and r.first_step_s is not None
    assert round(sum(p for p in phases if p is not None), 3) == r.total_s


def test_flapping_node_each_fault_is_its_loss_round_not_the_rejoin():
    """The healed node's rejoin restarts every worker before the next fault: that round is not
    the fault's recovery (it restored later than the loss round's first step)."""
    f1, f2 = recoveries(flapping_node())
    for r in (f1, f2):
        _assert_consistent(r)
    assert f1.fault_id == "f1" and f1.injected_at == T0 + 2.4
    assert (f1.rendezvous_done_at, f1.restored_at, f1.first_step_at) == (T0 + 3.0, T0 + 3.6, T0 + 4.0)
    assert (f1.rendezvous_s, f1.restore_s, f1.first_step_s, f1.total_s) == (0.6, 0.6, 0.4, 1.6)
    assert (f1.restored_step, f1.step_before_fault, f1.lost_steps, f1.source) == (20, 20, 0, "local")
    assert (f1.world_size_before, f1.world_size_after, f1.failed_restarts) == (3, 2, 0)
    assert f2.fault_id == "f1#2"
    assert (f2.rendezvous_s, f2.restore_s, f2.first_step_s, f2.total_s) == (1.2, 0.6, 0.4, 2.2)
    assert (f2.restored_step, f2.step_before_fault, f2.lost_steps) == (58, 60, 2)
    assert (f2.world_size_before, f2.world_size_after) == (3, 2)


def test_failure_seen_before_the_injection_was_recorded_leaves_detection_unmeasured():
    """The fault log records a kill once `docker kill` returned; the survivors' fatal (0.2 s
    earlier, after node-2's last step) is the detection, but its delay cannot be measured."""
    f1, f2 = recoveries(flapping_node())
    assert f1.detected_at == T0 + 2.2 and f2.detected_at == T0 + 9.6
    assert f1.detection_s is None and f2.detection_s is None
    assert f1.rendezvous_s == 0.6                 # from the injection record
    res = max_recovery_seconds(flapping_node(), Expect(max_recovery_seconds=30), [f1, f2])
    assert "detection ? + rendezvous 0.60s (from injection) + restore 0.60s + first step 0.40s" in res.reason


def test_sign_of_an_earlier_failure_is_not_this_faults_detection():
    """Before the target's last event the fault had not acted: a fatal then is something else."""
    h = flapping_node()
    for e in h.events:
        if e["event"] == "fatal" and e["ts"] == T0 + 2.2:
            e["ts"] = T0 + 1.5                     # node-2 still stepped at 2.0
    h.events.sort(key=lambda e: e["ts"])
    f1, _ = recoveries(h)
    assert f1.detected_at is None and f1.detection_s is None and f1.rendezvous_s == 0.6


def test_restore_logged_after_the_first_step_is_not_a_negative_phase():
    """Clocks of different hosts can put a rank's restore after another rank's first step."""
    h = node_loss()
    for e in h.events:
        if e["event"] == "checkpoint_loaded" and e["rank"] == 1:
            e["ts"] = T0 + 7.05                    # first step at 7.0
    (r,) = recoveries(h)
    assert r.restored_at == T0 + 7.05 and r.restore_s is None and r.first_step_s is None
    assert (r.detection_s, r.rendezvous_s, r.total_s) == (0.25, 1.75, 3.0)


def test_failed_start_in_the_rejoin_round_is_not_a_failed_recovery_restart():
    h = flapping_node()
    h.events.append({"ts": T0 + 6.45, "event": "fatal", "node": "node-2", "rank": 2, "local_rank": 0,
                     "world_size": 3, "restart_count": 0, "pid": 9999, "error": "connectFullMesh failed"})
    h.events.append({"ts": T0 + 3.5, "event": "fatal", "node": "node-0", "rank": 0, "local_rank": 0,
                     "world_size": 2, "restart_count": 1, "pid": 9998, "error": "connectFullMesh failed"})
    h.events.sort(key=lambda e: e["ts"])
    f1, _ = recoveries(h)
    assert f1.failed_restarts == 1 and f1.total_s == 1.6


def test_lost_work_is_counted_on_the_world_step_when_the_round_restored():
    """The world's step when the round restored, not the highest step an earlier process ever reported: after a
    rollback the world's step is the one it trained back up to, and a step one rank reported alone (its peer had
    died in it) is no world step."""
    from .synth import ev
    events = [ev(0.1 * s, "step", n, r, 2, pid=p, step=s) for s in range(1, 51) for r, (n, p) in
              enumerate((("node-0", 1), ("node-1", 2)))]
    for r, n in enumerate(("node-0", "node-1")):   # f1: both restart, restore 40, train to 45
        events += [ev(7.0, "checkpoint_loaded", n, r, 2, restart=1, pid=3 + r, step=40, tier="memory")]
        events += [ev(7.0 + 0.1 * (s - 40), "step", n, r, 2, restart=1, pid=3 + r, step=s) for s in range(41, 46)]
        events += [ev(9.0, "checkpoint_loaded", n, r, 2, restart=2, pid=5 + r, step=40, tier="memory")]
        events += [ev(9.0 + 0.1 * (s - 40), "step", n, r, 2, restart=2, pid=5 + r, step=s) for s in range(41, 60)]
    events.append(ev(7.65, "step", "node-0", 0, 2, restart=1, pid=3, step=46))   # node-1 died in step 46
    faults = [FaultWindow("f1", "kill_node", "node-1", {"node": "node-1"}, T0 + 5.05),
              FaultWindow("f2", "kill_worker", "node-1", {"node": "node-1"}, T0 + 7.6)]
    h = History(events=sorted(events, key=lambda e: e["ts"]), faults=faults, harness={"training_started_at": T0})
    first, second = recoveries(h)
    assert (first.step_before_fault, first.lost_steps) == (50, 10)
    assert (second.step_before_fault, second.lost_steps) == (45, 5)
