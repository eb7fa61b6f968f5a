"""max_detection_seconds and max_slowdown: each history that would pass them wrongly fails or is not
evaluated, never passed."""
import json

import pytest
import yaml

from chaosbench.checks import evaluate
from chaosbench.checks.history import FaultWindow, History
from chaosbench.scenario import ScenarioError
from chaosbench.scenario.loader import load_scenario
from chaosbench.scenario.model import Expect

from .synth import T0, ev, hung_rank, straggler


def results(h: History, prefix: str, **expect):
    _, out = evaluate(h, Expect(**expect))
    return [r for r in out if r.name.split(":")[0] == prefix]


def one(h: History, prefix: str, **expect):
    (r,) = results(h, prefix, **expect)
    return r


# -- max_detection_seconds -------------------------------------------------------------------------
def test_detection_passes_within_the_bound_and_names_the_sign():
    r = one(hung_rank(detected_after=3.1), "max_detection_seconds", max_detection_seconds=10)
    assert (r.status, r.name, r.fault_id, r.observed) == ("passed", "max_detection_seconds:f1", "f1", 3.1)
    assert "noticed after 3.1 s (health_check_failed on node-0/local0)" in r.reason


def test_detection_over_the_bound_fails():
    r = one(hung_rank(detected_after=3.1), "max_detection_seconds", max_detection_seconds=2)
    assert r.status == "failed" and r.observed == 3.1


def test_a_stuck_job_fails_with_the_hang_and_an_unknown_timeout_for_a_user_job():
    h = hung_rank(detected_after=None)
    h.scenario = {"trainer": {"workdir": ".", "script": "train.py"}}
    r = one(h, "max_detection_seconds", max_detection_seconds=10)
    assert r.status == "failed"
    assert r.reason.startswith("hung 120 s after the fault f1 (freeze_worker) without noticing it; it would wait "
                               "for an unknown timeout (the job's own; torch's default if the job sets none: 1800 s")


def test_workers_ended_by_the_harness_stopping_a_stuck_run_are_no_sign_of_detection():
    """A hung run the harness stops: its teardown ends the workers (the node watcher sees them exit)
    after stopped_at; that is the harness, not the job noticing."""
    h = hung_rank(detected_after=None)
    stop = h.harness["stopped_at"]
    h.events.append(ev(stop - T0 + 1.5, "worker_exit", "node-0", 0, 2, observed=True, exitcode=-15))
    r = one(h, "max_detection_seconds", max_detection_seconds=10)
    assert r.status == "failed" and r.reason.startswith("hung 120 s after the fault f1"), r.reason


def test_the_hang_names_the_timeout_the_jobs_environment_sets():
    h = hung_rank(detected_after=None)
    h.scenario = {"trainer": {"command": ["python", "t.py"]}, "cluster": {"env": {"TORCH_NCCL_TIMEOUT": "600"}}}
    r = one(h, "max_detection_seconds", max_detection_seconds=10)
    assert r.status == "failed" and "it would wait for TORCH_NCCL_TIMEOUT=600 (cluster.env)" in r.reason


def test_the_hang_names_the_reference_trainers_timeouts_from_overrides_and_config():
    h = hung_rank(detected_after=None)
    h.scenario = {"trainer": {"config": "trainer/configs/tiny.yaml", "overrides": {"elastic.pg_timeout_s": 90}}}
    r = one(h, "max_detection_seconds", max_detection_seconds=10)
    assert r.status == "failed"
    assert ("elastic.health_check_timeout_s 5 s for a silent peer (trainer/configs/tiny.yaml); "
            "elastic.pg_timeout_s 90 s for a blocked collective (override)") in r.reason


def test_a_run_without_a_stored_scenario_says_the_timeout_is_unknown():
    r = one(hung_rank(detected_after=None), "max_detection_seconds", max_detection_seconds=10)
    assert r.status == "failed" and "an unknown timeout (no scenario.yaml" in r.reason


def test_a_run_that_stopped_before_the_bound_without_a_sign_is_not_evaluated():
    h = hung_rank(detected_after=None, stopped_after=4.0, ending="error")
    r = one(h, "max_detection_seconds", max_detection_seconds=10)
    assert r.status == "not_evaluated" and "before the 10 s bound could be judged (ending error)" in r.reason


def test_a_planned_fault_never_injected_fails():
    h = hung_rank()
    h.faults = []
    r = one(h, "max_detection_seconds", max_detection_seconds=10)
    assert r.status == "failed" and "never injected" in r.reason


def test_a_clean_shutdown_after_run_complete_is_no_sign():
    """The job rode through the fault without noticing it and finished: its final shutdown says nothing."""
    h = hung_rank(detected_after=None, stopped_after=30, ending="completed")
    h.events += [ev(5.5 + 0.1 * i, "step", "node-0", 0, 2, step=51 + i) for i in range(200)]
    h.events += [ev(26.0, "run_complete", "node-0", 0, 2, step=250), ev(26.1, "phase", "node-0", 0, 2, phase="shutdown")]
    r = one(h, "max_detection_seconds", max_detection_seconds=10)
    assert r.status == "failed" and "no sign the job noticed it in the 30 s" in r.reason


def test_a_clean_shutdown_without_run_complete_is_no_sign_but_a_signalled_one_is():
    h = hung_rank(detected_after=None, stopped_after=30, ending="completed")
    h.events.append(ev(9.0, "phase", "node-0", 0, 2, phase="shutdown"))   # instrument's run() ending cleanly
    assert one(h, "max_detection_seconds", max_detection_seconds=10).status == "failed"
    h.events.append(ev(8.0, "phase", "node-0", 0, 2, phase="shutdown", reason="SIGTERM"))
    r = one(h, "max_detection_seconds", max_detection_seconds=10)
    assert r.status == "passed" and r.observed == 3.0 and "shutdown on node-0/local0" in r.reason


def test_a_worker_the_heal_started_is_no_sign():
    """kill_node healed by starting node-1 again: its new worker is the heal's doing, not the job's."""
    h = hung_rank(detected_after=None, stopped_after=60)
    h.faults[0] = FaultWindow("f1", "kill_node", "node-1", {"node": "node-1"}, T0 + 5.0, T0 + 15.0)
    h.events.append(ev(16.0, "phase", "node-1", 1, 2, restart=1, phase="config"))
    h.agent_events.append({"ts": T0 + 15.5, "event": "rendezvous_start", "node": "node-1", "observed": True})
    r = one(h, "max_detection_seconds", max_detection_seconds=20)
    assert r.status == "failed" and "hung 60 s" in r.reason


def test_the_victims_own_exit_is_no_sign_but_its_agent_noticing_is():
    h = hung_rank(detected_after=None, stopped_after=60)
    h.faults[0] = FaultWindow("f1", "kill_worker", "node-1", {"node": "node-1", "local_rank": 0}, T0 + 5.0)
    h.events.append({**ev(5.01, "worker_exit", "node-1", 1, 2), "observed": True, "exit_code": -9})
    assert one(h, "max_detection_seconds", max_detection_seconds=10).status == "failed"
    h.agent_events.append({"ts": T0 + 7.0, "event": "worker_group_failed", "node": "node-1", "observed": True})
    r = one(h, "max_detection_seconds", max_detection_seconds=10)
    assert r.status == "passed" and r.observed == 2.0 and "worker_group_failed on node-1" in r.reason


def test_a_sign_of_the_next_fault_is_not_a_sign_of_this_one():
    h = hung_rank(detected_after=8.0, resume=False, stopped_after=30)
    h.faults.append(FaultWindow("f2", "kill_node", "node-0", {"node": "node-0"}, T0 + 10.0))
    h.harness["faults_planned"].append({"id": "f2", "type": "kill_node"})
    by_id = {r.fault_id: r for r in results(h, "max_detection_seconds", max_detection_seconds=10)}
    assert by_id["f1"].status == "failed" and "hung" in by_id["f1"].reason
    assert by_id["f2"].status == "passed" and by_id["f2"].observed == 3.0


def test_detect_faults_picks_the_faults_judged_and_their_repetitions():
    h = hung_rank(detected_after=3.1)
    h.faults.insert(0, FaultWindow("slow", "throttle_node", "node-1", {"node": "node-1"}, T0 + 1.0, T0 + 2.0))
    h.faults.append(FaultWindow("f1#2", "freeze_worker", "node-1", {"node": "node-1"}, T0 + 30.0))
    h.harness["faults_planned"] = [{"id": i, "type": "x"} for i in ("slow", "f1", "f1#2")]
    got = results(h, "max_detection_seconds", max_detection_seconds=10, detect_faults=["f1"])
    assert [r.fault_id for r in got] == ["f1", "f1#2"]


def test_a_history_without_events_is_not_evaluated():
    h = hung_rank()
    h.events = []
    r = one(h, "max_detection_seconds", max_detection_seconds=10)
    assert r.status == "not_evaluated"


# -- max_slowdown ----------------------------------------------------------------------------------
def test_slowdown_within_the_bound_passes_and_quotes_the_rates():
    r = one(straggler(rate_during=5.0), "max_slowdown", max_slowdown=3)
    assert (r.status, r.name, r.fault_id) == ("passed", "max_slowdown:f1", "f1")
    assert 1.9 <= r.observed <= 2.1
    assert "5.00 steps/s over its 10.0 s (injection to healed) vs 10.00 steps/s over the" in r.reason


def test_slowdown_over_the_bound_fails():
    r = one(straggler(rate_during=2.0), "max_slowdown", max_slowdown=3)
    assert r.status == "failed" and r.observed >= 4.5


def test_no_step_at_all_during_the_fault_fails():
    r = one(straggler(rate_during=0), "max_slowdown", max_slowdown=100)
    assert (r.status, r.observed) == ("failed", "no step") and "no step at all" in r.reason


def test_a_fault_never_healed_is_judged_until_the_run_stopped():
    h = straggler(rate_during=0, healed=False)
    h.events = [e for e in h.events if e["ts"] < T0 + 10.0]
    h.harness.update(stopped_at=T0 + 40.0, ending="stuck")
    r = one(h, "max_slowdown", max_slowdown=2)
    assert r.status == "failed" and "over its 30.0 s (injection to run stopped)" in r.reason


def test_many_ranks_reporting_the_same_steps_do_not_add_up():
    r = one(straggler(rate_during=2.0, ranks=8), "max_slowdown", max_slowdown=3)
    assert r.status == "failed"


def test_too_few_steps_before_the_fault_is_not_evaluated():
    r = one(straggler(rate_during=5.0, before_s=0.3), "max_slowdown", max_slowdown=3)
    assert r.status == "not_evaluated" and "the pre-fault rate needs 5" in r.reason


def test_a_window_too_short_to_measure_is_not_evaluated():
    r = one(straggler(rate_during=0, during_s=0.2), "max_slowdown", max_slowdown=3)
    assert r.status == "not_evaluated" and "too short to measure" in r.reason


def test_two_faults_on_together_are_each_judged_against_the_rate_before_both():
    # slow_storage: latency and bandwidth toxics injected at one step, healed together; the second
    # one's "before" once began at the first one's heal, after its own injection (a negative window)
    h = straggler(rate_during=5.0)
    (f1,) = h.faults
    h.faults = [f1, FaultWindow("f2", "link_toxic", "s3", {}, f1.injected_at + 0.01, f1.healed_at)]
    h.harness["faults_planned"].append({"id": "f2", "type": "link_toxic", "trigger": "at 10 s",
                                        "healable": True, "heal_after_s": 10})
    rs = {r.fault_id: r for r in results(h, "max_slowdown", max_slowdown=3)}
    assert [rs[f].status for f in ("f1", "f2")] == ["passed", "passed"], [r.reason for r in rs.values()]
    assert 1.9 <= rs["f2"].observed <= 2.1
    assert "before the fault(s) on at its injection (0.0 s earlier)" in rs["f2"].reason
    assert "before the fault" not in rs["f1"].reason


def test_a_planned_slowdown_fault_never_injected_fails():
    h = straggler(rate_during=10.0)
    h.faults = []
    r = one(h, "max_slowdown", max_slowdown=3)
    assert r.status == "failed" and "never injected" in r.reason


# -- scenario keys ---------------------------------------------------------------------------------
SCENARIO = """name: hung
faults:
  - id: f1
    at: {seconds: 5}
    freeze_worker: {node: node-1, local_rank: 0}
expect:
  reaches_step: 50
"""


@pytest.mark.parametrize("extra, where", [
    ("  max_detection_seconds: 0\n", ":8: expect.max_detection_seconds"),
    ("  max_slowdown: 0.5\n", ":8: expect.max_slowdown"),
    ("  max_detection_seconds: 5\n  detect_faults: [f9]\n", ":9: expect.detect_faults[0]: 'f9' names no fault"),
    ("  detect_faults: [f1]\n", "set max_detection_seconds too"),
])
def test_bad_values_are_refused_at_load_with_file_and_line(tmp_path, extra, where):
    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO + extra)
    with pytest.raises(ScenarioError) as err:
        load_scenario(p)
    assert where in str(err.value)


def test_the_keys_load_and_ask_for_their_checks(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO + "  max_detection_seconds: 10\n  detect_faults: [f1]\n  max_slowdown: 2\n"
                            "  optional: [max_slowdown]\n")
    e = load_scenario(p).expect
    assert (e.max_detection_seconds, e.detect_faults, e.max_slowdown) == (10, ["f1"], 2)


def test_a_run_directorys_scenario_gives_the_timeout(tmp_path):
    h = hung_rank(detected_after=None)
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "events-node-0-local0.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in h.events))
    (tmp_path / "faults.jsonl").write_text(json.dumps(
        {"ts": T0 + 5.0, "id": "f1", "fault": "freeze_worker", "action": "inject", "target": "node-1",
         "params": {"node": "node-1", "local_rank": 0}}) + "\n")
    (tmp_path / "harness.json").write_text(json.dumps(h.harness))
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(
        {"name": "x", "trainer": {"workdir": ".", "script": "t.py"}, "cluster": {"env": {"NCCL_TIMEOUT": "60"}}}))
    r = one(History.load(tmp_path), "max_detection_seconds", max_detection_seconds=10)
    assert r.status == "failed" and "it would wait for NCCL_TIMEOUT=60 (cluster.env)" in r.reason


def test_a_real_default_settings_job_under_freeze_worker_fails_detection_with_the_hang():
    """A stored docker run of examples/byo_ddp/scenarios/hung_rank_defaults.yaml (plain DDP on torch's
    defaults, node-1's worker frozen): the job never noticed; the harness stopped it as stuck and its
    teardown ended the workers, which must not count as the job noticing."""
    from pathlib import Path
    h = History.load(Path(__file__).parent / "data" / "byo_hung_rank_defaults")
    r = one(h, "max_detection_seconds", max_detection_seconds=10)
    # the peers finished the step they were in (step 31-32) before blocking: that is no "training went on"
    assert r.status == "failed" and r.reason.startswith("hung 20.5 s after the fault f1 (freeze_worker)"), r.reason
    assert "1800 s on gloo" in r.reason
