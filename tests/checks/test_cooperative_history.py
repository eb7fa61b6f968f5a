"""A cooperative fault happened when the job said `fault_fired`, not when its command was delivered;
without that event it never happened, and no check may take it as injected. Histories are stored
run directories (faults.jsonl + events/ + harness.json), read back the way the runner does."""
import json
from pathlib import Path

from chaosbench.checks import evaluate
from chaosbench.checks.history import History
from chaosbench.scenario.model import Expect

from .synth import T0, ev


def run_dir(tmp_path: Path, kind="worker_error", params=None, fired=None, refused=None, extra=(), target="rank 1",
            delivered=5.0, fid="f1") -> Path:
    """2 ranks step at 10 steps/s for 20 s; the command for `fid` is delivered at `delivered` s.
    `fired`: (t, step) of the job's fault_fired on rank 1; `refused`: (t, step, reason); `extra`: more events."""
    params = {"kind": "cuda", "rank": 1, "step": 30} if params is None else params
    events = [ev(0.1 * s, "step", n, r, 2, step=s, loss=2.0) for s in range(1, 201)
              for r, n in enumerate(["node-0", "node-1"])]
    if fired:
        events.append(ev(fired[0], "fault_fired", "node-1", 1, 2, fault_id=fid, fault=kind, step=fired[1],
                         detail="RuntimeError: CUDA error: an illegal memory access was encountered"))
    if refused:
        events.append(ev(refused[0], "fault_refused", "node-1", 1, 2, fault_id=fid, fault=kind, step=refused[1],
                         reason=refused[2]))
    events += list(extra)
    (tmp_path / "events").mkdir()
    for node in ("node-0", "node-1"):
        with open(tmp_path / "events" / f"events-{node}-local0.jsonl", "w") as f:
            for e in sorted((e for e in events if e["node"] == node), key=lambda e: e["ts"]):
                f.write(json.dumps(e) + "\n")
    (tmp_path / "faults.jsonl").write_text(json.dumps({"ts": T0 + delivered, "id": fid, "fault": kind,
                                                       "action": "inject", "target": target, "params": params,
                                                       "took_s": 0.001}) + "\n")
    (tmp_path / "scenario.yaml").write_text("cluster: {backend: local}\n")   # one host clock: skew taken as 0
    (tmp_path / "harness.json").write_text(json.dumps({
        "training_started_at": T0, "stopped_at": T0 + 20.5, "stop_reason": "reached step", "ending": "reached_step",
        "faults_planned": [{"id": fid, "type": kind, "trigger": "at 5 s", "healable": False, "heal_after_s": None}]}))
    return tmp_path


def results(h: History, **expect):
    return {r.name: r for r in evaluate(h, Expect(**expect))[1]}


def test_the_fault_is_timed_by_fault_fired_not_by_the_delivery(tmp_path):
    h = History.load(run_dir(tmp_path, fired=(8.0, 30),
                             extra=[ev(8.5, "fatal", "node-0", 0, 2, error="peer closed", error_type="DistBackendError")]))
    (w,) = h.faults
    assert w.injected_at == T0 + 8.0 and h.unfired == {}
    r = results(h, max_detection_seconds=1)["max_detection_seconds:f1"]
    assert (r.status, r.observed) == ("passed", 0.5)   # 3.5 s if timed by the delivery: would fail


def test_a_delivered_fault_the_job_never_reached_is_not_injected_for_any_check(tmp_path):
    """Delivered at 5 s; a fatal 3 s later and a steady step rate would pass max_detection_seconds and
    max_slowdown, and the fault's own check, if the delivery counted as the fault."""
    h = History.load(run_dir(tmp_path, fired=None,
                             extra=[ev(8.0, "fatal", "node-0", 0, 2, error="x", error_type="RuntimeError")]))
    assert h.faults == []
    why = ("f1 (worker_error) was delivered to the job but never fired: the job never reached the fault point "
           "(no cb.step/cb.fault_point at step >= 30 on rank 1)")
    assert h.unfired == {"f1": why.split("never fired: ")[1]}
    out = results(h, max_detection_seconds=10, max_slowdown=2)
    for name in ("max_detection_seconds:f1", "max_slowdown:f1", "fault:f1"):
        assert (out[name].status, out[name].observed) == ("failed", "not injected"), name
        assert out[name].reason.startswith(why), out[name].reason


def test_a_fault_without_a_step_says_it_waited_for_the_next_step(tmp_path):
    h = History.load(run_dir(tmp_path, params={"rank": 1, "step": None, "hold_s": None}, kind="gil_hang"))
    assert h.unfired["f1"] == ("the job never reached the fault point (no cb.step/cb.fault_point on rank 1 after "
                               "the command was delivered)")


def test_a_refused_fault_did_not_happen_and_says_why(tmp_path):
    reason = "no model to corrupt: call cb.watch(model) once after building it"
    h = History.load(run_dir(tmp_path, kind="corrupt_replica", refused=(6.0, 30, reason),
                             params={"rank": 1, "step": 30, "target": "param", "bits": 1}))
    assert h.faults == []
    r = results(h, max_slowdown=2)["max_slowdown:f1"]
    assert r.status == "failed"
    assert r.reason.startswith(f"f1 (corrupt_replica) was delivered to the job but never fired: the job refused it at step "
                        f"30 on rank 1: {reason}")


def test_another_faults_fired_event_does_not_count(tmp_path):
    other = ev(7.0, "fault_fired", "node-1", 1, 2, fault_id="f1#2", fault="worker_error", step=30, detail="x")
    h = History.load(run_dir(tmp_path, extra=[other]))
    assert h.faults == [] and "f1" in h.unfired


def test_faults_that_act_from_outside_keep_their_inject_record(tmp_path):
    h = History.load(run_dir(tmp_path, kind="kill_worker", params={"node": "node-1", "local_rank": 0},
                             target="node-1"))
    (w,) = h.faults
    assert w.injected_at == T0 + 5.0 and h.unfired == {}
