"""Ray Train's controller log as agent events (observer/ray_controller.py), and what the checks make of them.

The fixtures under data/controller/ are real runs' `ray-train-sys-controller-*.log` (Ray 2.60.0), trimmed: the
periodic DEBUG lines dropped, ids dropped, a failure's message cut after its first rank's snippet. Each
folder holds that run's faults.jsonl; partition/ also holds its workers' record as trainer/ray_observe.py
writes it for a loop without events (worker_start, ray_checkpoint_offered, step), rebuilt from that run's
own events with their own times."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaosbench.checks import evaluate
from chaosbench.checks.detection import first_sign
from chaosbench.checks.history import History, fault_windows
from chaosbench.checks.recovery import recoveries
from chaosbench.observer.ray_controller import controller_events, event_of, is_controller_log
from chaosbench.scenario.model import Expect

DATA = Path(__file__).parent / "data" / "controller"
LOG = "ray/ray-head/train/ray-train-sys-controller-0.log"
RUN = {"worker_crash": "ray_worker_crash-20261207-163959-da1f", "partition": "ray_partition-20261207-171050-35f4",
       "node_join": "ray_node_join-20261207-171343-049a"}


def _log(name: str) -> str:
    return (DATA / name / "ray-train-sys-controller-0.log").read_text()


def _history(name: str, *, logs: bool = True) -> History:
    """A loop without events on Ray: the observer's lines only, the controller's log beside them."""
    lines = [json.loads(x) for x in (DATA / name / "faults.jsonl").read_text().splitlines()]
    obs = DATA / name / "events-observed.jsonl"
    events = [json.loads(x) for x in obs.read_text().splitlines()] if obs.is_file() else []
    return History(events=events, faults=fault_windows(lines), logs={LOG: _log(name)} if logs else {},
                   run_id=RUN[name], harness={"run_id": RUN[name]})


def _rel(h: History, ts: float) -> float:
    return round(ts - h.faults[0].injected_at, 3)


def test_a_worker_crash_reads_as_the_controllers_failure_restart_and_group_start():
    evs = controller_events({LOG: _log("worker_crash")}, RUN["worker_crash"])
    assert [e["event"] for e in evs] == ["worker_group_restart", "rendezvous_start", "rendezvous_done",
                                         "worker_group_failed", "worker_group_restart", "rendezvous_start",
                                         "rendezvous_done"]
    failed = evs[3]
    assert failed["ts"] == 1796661641462923205 / 1e9   # the controller's own timestamp_ns
    assert (failed["decision"], failed["error_count"], failed["hosts"]) == ("retry", 1, ["node-2"])
    assert (failed["node"], failed["launcher"], failed["source"]) == ("ray-head", "ray", f"logs/{LOG}")
    assert evs[4]["world_size"] == 3 and evs[6]["world_size"] == 3 and evs[6]["pids"] == [176, 202, 163]


def test_the_same_line_in_the_sys_and_app_logs_is_read_once():
    text = _log("worker_crash")
    both = {LOG: text, LOG.replace("-sys-", "-app-"): text}
    assert len(controller_events(both, RUN["worker_crash"])) == len(controller_events({LOG: text}, RUN["worker_crash"]))


def test_another_runs_controller_lines_are_left_out():
    """A site cluster's session keeps every job's controller log: only this run's lines count."""
    other = _log("worker_crash").replace(RUN["worker_crash"], "someone-elses-run")
    assert controller_events({LOG: other}, RUN["worker_crash"]) == []
    assert len(controller_events({LOG: other}, None)) == 7   # no run id to hold them to: all read


@pytest.mark.parametrize("line", ["not json", "{broken", json.dumps({"message": "[FailurePolicy] RETRY"}),
                                  json.dumps({"message": "[FailurePolicy] RETRY", "timestamp_ns": "12"}),
                                  json.dumps({"message": "[FailurePolicy] RETRY", "timestamp_ns": 1,
                                              "component": "worker"})])
def test_lines_without_the_controllers_shape_are_ignored(line):
    assert controller_events({LOG: line + "\n"}, None) == []


def test_matching_is_case_blind_and_loose_on_spaces_and_unknown_lines_make_nothing():
    assert event_of("[failurepolicy]  raise\n Error count: 4")[1]["decision"] == "raise"
    assert event_of("Detected changes in the cluster resources. Deciding to resize the worker group "
                    "from 3 ->  2 workers.")[1] | {"line": ""} == {"from": 3, "world_size": 2, "line": ""}
    assert event_of("Error in control loop iteration: The worker group startup timed out after 20.0 seconds "
                    "waiting for 3 workers.")[1]["timeout_s"] == 20.0
    snapshot = event_of("A run snapshot was found in storage folder at: '/s3/run'\nThis snapshot ...")
    assert snapshot[0] == "ray_snapshot_found" and snapshot[1]["path"] == "/s3/run"
    assert event_of("Requesting resources: {'CPU': 1} * 3") is None
    assert is_controller_log("ray/10.0.0.2/train/ray-train-app-controller-ab12.log")
    assert not is_controller_log("ray/node-0/train/ray-train-sys-worker-ab12.log")


def test_a_loop_without_events_gets_its_detection_from_the_controller():
    """Partition of node-2 (real run): the loop's workers hang in a collective and Ray kills them, so the
    observer records nothing until the new group's workers start, 33.7 s after the injection. The
    controller judged the group failed 6.0 s after it. Without its log the check fails the 10 s bound."""
    h = _history("partition")
    (r,) = [c for c in evaluate(h, Expect(max_detection_seconds=10))[1] if c.name == "max_detection_seconds:f1"]
    assert (r.status, r.observed) == ("passed", 6.017), r.reason
    assert "Ray Train controller worker_group_failed on ray-head" in r.reason
    (blind,) = [c for c in evaluate(_history("partition", logs=False), Expect(max_detection_seconds=10))[1]
                if c.name == "max_detection_seconds:f1"]
    assert blind.status == "failed" and blind.observed == 33.725, blind.reason


def test_the_breakdown_takes_the_controllers_detection_and_its_restart_of_the_group_that_trained():
    h = _history("partition")
    (rec,) = recoveries(h)
    assert _rel(h, rec.detected_at) == 6.017 and rec.detection_s == 6.017
    # the first restart (3 workers) timed out after 20 s; the group that trained was started at +26.1 s (2 workers)
    assert _rel(h, rec.group_restart_at) == 26.1
    assert rec.detection_s + rec.rendezvous_s == pytest.approx(_rel(h, rec.rendezvous_done_at))
    (blind,) = recoveries(_history("partition", logs=False))
    assert blind.detected_at is None and blind.group_restart_at is None


def test_a_controller_failure_before_the_fault_is_no_sign_of_it():
    """The same record with the fault injected after the controller's failure: that failure (another
    fault's, or the run's own before it) detects nothing of this one."""
    h = _history("partition")
    failed = next(e for e in controller_events(h.logs, h.run_id) if e["event"] == "worker_group_failed")
    h.faults[0].injected_at = failed["ts"] + 0.5
    sign = first_sign(h, h.faults[0], None)
    # the next sign is the controller's own later one: the 3-worker restart timing out after 20 s
    assert sign is not None and sign[0] > h.faults[0].injected_at and sign[0] != failed["ts"], sign


def test_a_node_join_is_noticed_when_the_controller_decides_to_resize():
    """add_node: Ray Train resizes no sooner than elastic_resize_monitor_interval_s (60 s) after the last
    group start; the decision came 55.3 s after the node joined."""
    h = _history("node_join")
    sign = first_sign(h, h.faults[0], None)
    assert sign is not None and _rel(h, sign[0]) == 55.331
    assert sign[1] == "Ray Train controller worker_group_restart on ray-head"
