"""How the run ended is part of the verdict: the `ending` check and `expect.ends`."""
import pytest

from chaosbench.checks import evaluate
from chaosbench.scenario import ScenarioError, parse_scenario
from chaosbench.scenario.model import Expect

from .synth import no_fault, node_loss


def ending(h, **expect):
    _, results = evaluate(h, Expect(**expect))
    return next((r for r in results if r.name == "ending"), None)


@pytest.mark.parametrize("stop,name", [("timeout: 600 s elapsed (highest step 20)", "timeout"),
                                       ("stuck: no new step for 120 s (highest step 20)", "stuck"),
                                       ("every node exited before step 60: node-0 exited:1", "nodes_exited")])
def test_an_abnormal_ending_fails_even_when_every_other_check_passes(stop, name):
    h = node_loss()
    h.harness.update(stop_reason=stop, ending=name)
    _, results = evaluate(h, Expect(recovered_from="memory", max_lost_steps=5))
    by = {r.name: r for r in results}
    assert by["recovered_from"].status == "passed" and by["max_lost_steps"].status == "passed"
    assert by["ending"].status == "failed" and by["ending"].observed == name and f"ends: {name}" in by["ending"].reason
    assert ending(h, recovered_from="memory", ends=name).status == "passed"


def test_an_ending_read_from_an_older_record_without_it():
    h = node_loss()
    h.harness = {"stop_reason": "stuck: no new step for 60 s"}
    assert ending(h, max_lost_steps=5).observed == "stuck"


def test_a_history_without_a_run_record_has_no_ending_check_and_a_harness_error_fails_it():
    assert ending(no_fault(), reaches_step=5) is None
    h = node_loss()
    h.harness.update(ending="error", stop_reason=None)
    assert ending(h, max_lost_steps=5).status == "failed"


BASE = {"name": "s", "trainer": {"config": None, "command": ["train"]}, "cluster": {"nodes": 2}}


@pytest.mark.parametrize("expect,msg", [
    ({"ends": "stuck", "reaches_step": 50}, "cannot end stuck"),
    ({"ends": "reached_step"}, "needs expect.reaches_step"),
    ({"ends": "hung"}, "ends"),
])
def test_ends_is_validated(expect, msg):
    with pytest.raises(ScenarioError) as e:
        parse_scenario({**BASE, "expect": expect}, "s.yaml")
    assert msg in str(e.value.problems) and "s.yaml" in str(e.value.problems)


def test_ends_alone_is_an_expectation():
    assert parse_scenario({**BASE, "expect": {"ends": "stuck"}}, "s.yaml").expect.ends == "stuck"


def test_faults_injected_together_share_the_wait_for_the_next_step():
    """Three corruptions fired by one checkpoint_saved, 10 ms apart, training going on: no stall
    (was: 'no step after it before c1', a false failure, once no-restart faults were measured)."""
    from chaosbench.checks.history import FaultWindow
    from .synth import T0
    h = no_fault(steps=60)
    h.faults = [FaultWindow(f"c{i}", "corrupt_checkpoint", f"node-{i}", {}, T0 + 2.0 + 0.01 * i) for i in range(3)]
    h.harness = {"stop_reason": "reached step 60", "ending": "reached_step",
                 "faults_planned": [{"id": f"c{i}", "type": "corrupt_checkpoint", "trigger": "on checkpoint_saved",
                                     "healable": False, "heal_after_s": None} for i in range(3)]}
    _, results = evaluate(h, Expect(max_recovery_seconds=1))
    by = {r.name: r for r in results}
    assert all(by[f"fault:c{i}"].status == "passed" for i in range(3)), [by[f"fault:c{i}"].reason for i in range(3)]
    assert by["max_recovery_seconds"].status == "passed", by["max_recovery_seconds"].reason
