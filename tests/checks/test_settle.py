"""`trains_after_settle` against histories that would make it pass wrongly."""
from chaosbench.checks import evaluate
from chaosbench.checks.history import History
from chaosbench.scenario.model import Expect

from .synth import T0, ev, node_loss

SETTLED = {"stop_reason": "trained 10 steps at world size 2 after the last fault settled (step 50)",
           "ending": "settled", "training_started_at": T0}


def results(h, **expect):
    _, res = evaluate(h, Expect(**expect))
    return {r.name: r for r in res}


def test_the_survivors_round_trained_enough_and_the_ending_is_normal():
    h = node_loss(steps_after=12)
    h.harness = dict(SETTLED)
    by = results(h, trains_after_settle=10, world_size_after=2)
    assert by["trains_after_settle"].status == "passed", by["trains_after_settle"].reason
    assert by["trains_after_settle"].observed == "12 steps at world size 2"
    assert by["ending"].status == "passed"


def test_a_settled_ending_the_events_do_not_bear_out_fails():
    h = node_loss(steps_after=4)          # the run claims it settled; only 4 steps followed the restart
    h.harness = dict(SETTLED)
    r = results(h, trains_after_settle=10, world_size_after=2)["trains_after_settle"]
    assert r.status == "failed" and r.observed == "at most 4 steps at world size 2"


def test_steps_before_the_fault_never_count():
    # 42 steps at world 3 before the kill, none after it: no settled training at all
    h = node_loss(steps_after=0)
    h.harness = dict(SETTLED)
    r = results(h, trains_after_settle=10)["trains_after_settle"]
    assert r.status == "failed"


def test_the_wrong_world_size_does_not_count():
    h = node_loss(steps_after=30)         # ended at world 2; the story wanted the node back (world 3)
    h.harness = dict(SETTLED)
    r = results(h, trains_after_settle=10, world_size_after=3)["trains_after_settle"]
    # steps 41-42 were in flight at world 3 when node-2 died (after the injection): never enough
    assert r.status == "failed" and r.observed == "at most 2 steps at world size 3"


def test_a_fault_healed_after_the_last_step_leaves_nothing_settled():
    h = node_loss(steps_after=30)
    h.faults[0].healed_at = T0 + 20.0     # the steps (t 7.0-9.9) all came while it was in place
    h.harness = dict(SETTLED)
    assert results(h, trains_after_settle=10)["trains_after_settle"].status == "failed"


def test_a_fault_the_stop_cut_short_fails_it():
    h = node_loss(steps_after=30)
    h.harness = {**SETTLED, "faults_unfinished": ["f2"]}
    r = results(h, trains_after_settle=10)["trains_after_settle"]
    assert r.status == "failed" and "f2" in r.reason


def test_a_restart_inside_the_settled_stretch_cuts_it():
    h = node_loss(steps_after=8)          # 8 steps at restart 1, then a second restart
    h.events += [ev(9.0 + 0.1 * i, "step", n, r, 2, restart=2, step=45 + i)
                 for i in range(8) for r, n in enumerate(["node-0", "node-1"])]
    h.harness = dict(SETTLED)
    r = results(h, trains_after_settle=10)["trains_after_settle"]
    assert r.status == "failed" and r.observed == "at most 8 steps in one stretch"


def test_no_events_is_not_evaluated():
    h = History(harness=dict(SETTLED))
    assert results(h, trains_after_settle=10)["trains_after_settle"].status == "not_evaluated"


def test_loader_rules(tmp_path):
    import pytest
    from chaosbench.scenario import ScenarioError, parse_scenario
    base = {"name": "s", "trainer": {"config": None, "command": ["train"]}, "cluster": {"nodes": 2}}
    for expect, msg in [({"trains_after_settle": 10, "reaches_step": 50}, "keep one"),
                        ({"ends": "settled"}, "needs expect.trains_after_settle"),
                        ({"trains_after_settle": 10, "ends": "stuck"}, "cannot end stuck"),
                        ({"trains_after_settle": 2}, "greater than or equal to 5")]:
        with pytest.raises(ScenarioError, match=msg):
            parse_scenario({**base, "expect": expect}, "s.yaml")
    assert parse_scenario({**base, "expect": {"trains_after_settle": 10}}, "s.yaml").expect.trains_after_settle == 10


def test_a_cooperative_fault_the_job_never_acted_on_leaves_nothing_settled():
    h = node_loss(steps_after=30)
    h.harness = dict(SETTLED)
    h.unfired = {"f2": "the job never reached the fault point"}
    r = results(h, trains_after_settle=10)["trains_after_settle"]
    assert r.status == "failed" and "f2" in r.reason
