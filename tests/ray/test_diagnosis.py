"""The Ray Train rule on the observed worker events of a run (the record a user's loop leaves)."""
from types import SimpleNamespace

from chaosbench.diagnosis.rules import ray_train


def ev(event, restart, rank=0, **kw):
    return {"event": event, "restart_count": restart, "rank": rank, "node": f"node-{rank}", "local_rank": 0,
            "observed": True, "ts": 1.0, **kw}


def rec(events, ray=None, verdict="failed", faults=({"id": "f1", "type": "kill_node"},)):
    return SimpleNamespace(events=events, trainer={"ray": ray or {"max_failures": 3}}, faults=list(faults),
                           result={"verdict": verdict}, scenario={"cluster": {"nodes": 3}})


RUN = [ev("worker_start", 0), ev("ray_checkpoint_offered", 0, path=None), *[ev("step", 0, step=s) for s in (1, 2, 15)],
       ev("worker_start", 1), ev("ray_checkpoint_offered", 1, path="/st/r/checkpoint_000002")]


def test_a_loop_offered_a_checkpoint_that_starts_over_is_the_cause():
    found = ray_train.check(rec([*RUN, ev("step", 1, step=1), ev("step", 1, step=2)]))
    assert [f.rule for f in found] == ["ray_ignores_get_checkpoint"]
    assert found[0].severity == "cause" and "checkpoint_000002" in found[0].title and "step 1" in found[0].title


def test_a_loop_that_asked_for_its_checkpoint_gets_no_finding():
    resumed = [*RUN, ev("ray_get_checkpoint", 1, path="/st/r/checkpoint_000002"), ev("step", 1, step=16)]
    assert ray_train.check(rec(resumed)) == []


def test_max_failures_zero_and_node_local_storage_are_named():
    no_retry = ray_train.check(rec(RUN[:5], ray={"max_failures": 0, "storage": "/nvme/ray"}))
    assert [f.rule for f in no_retry] == ["ray_max_failures_zero", "ray_node_local_storage"]
    assert all(f.severity == "cause" for f in no_retry)


def test_a_run_that_is_no_ray_job_is_left_alone():
    assert ray_train.check(SimpleNamespace(events=[ev("step", 0, step=1)], trainer={}, faults=[], result={},
                                           scenario={})) == []


def test_a_lost_head_is_named_with_the_step_it_ended_at():
    steps = [ev("step", 0, step=s, ts=float(s)) for s in (1, 2, 40, 41)]
    found = ray_train.check(rec(steps, verdict="passed",
                                faults=[{"id": "f1", "type": "kill_ray_head", "injected_at": 40.5}]))
    assert [f.rule for f in found] == ["ray_head_lost"]
    assert found[0].severity == "warning" and "at step 40" in found[0].title and "RunConfig(name, storage_path)" in found[0].fix
    assert ray_train.check(rec(steps)) == []   # a node loss is no head loss
