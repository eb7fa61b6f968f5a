"""trainer/ray_observe.py around a loop, with `ray.train` stood in for (no Ray here: it is never installed
in the harness's venv): the events a user's loop leaves, and its own get_checkpoint calls seen."""
import json
import sys
import types

import pytest

import trainer.ray_loop
from trainer.ray_observe import observed


@pytest.fixture
def fake_ray(monkeypatch, tmp_path):
    train = types.ModuleType("ray.train")
    ctx = types.SimpleNamespace(get_world_rank=lambda: 1, get_local_rank=lambda: 0, get_world_size=lambda: 2)
    train.get_context = lambda: ctx
    train.get_checkpoint = lambda: types.SimpleNamespace(path="/st/checkpoint_000003")
    ray = types.ModuleType("ray")
    ray.train = train
    monkeypatch.setitem(sys.modules, "ray", ray)
    monkeypatch.setitem(sys.modules, "ray.train", train)
    monkeypatch.setattr(trainer.ray_loop, "group_start", lambda counter: 2)
    monkeypatch.setenv("CHAOSBENCH_EVENTS_DIR", str(tmp_path))
    monkeypatch.setenv("CHAOSBENCH_NODE", "node-1")
    return tmp_path


def events(d) -> list[dict]:
    return [json.loads(ln) for ln in (d / "events-node-1-local0-observed.jsonl").read_text().splitlines()]


def test_a_loop_that_asks_for_its_checkpoint_and_prints_progress(fake_ray):
    def loop(config):
        import ray.train
        assert ray.train.get_checkpoint().path.endswith("000003")
        print("step 4 loss 0.5")
        print("step 5 loss 0.25")
    observed(loop, r"step (?P<step>\d+) loss (?P<loss>[\d.]+)")({"counter": None})
    evs = events(fake_ray)
    assert [e["event"] for e in evs] == ["worker_start", "ray_checkpoint_offered", "ray_get_checkpoint", "step", "step",
                                        "worker_exit"]
    assert evs[0]["restart_count"] == 2 and evs[0]["rank"] == 1 and all(e["observed"] for e in evs)
    assert evs[3]["step"] == 4 and evs[4]["loss"] == 0.25 and evs[-1]["exit_code"] == 0


def test_a_loop_that_never_asks_and_fails(fake_ray):
    def loop(config):
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError):
        observed(loop, None)({"counter": None})
    evs = events(fake_ray)
    assert "ray_get_checkpoint" not in [e["event"] for e in evs]
    assert evs[-1]["event"] == "worker_exit" and evs[-1]["exit_code"] == 1 and "boom" in evs[-1]["error"]


def test_a_print_that_ray_logs_is_one_step(fake_ray):
    import builtins
    import logging

    def logged_print(*objects, **kw):   # Ray Train's print: a log record of the line
        logging.getLogger("ray.train").warning(" ".join(map(str, objects)))
    old = builtins.print
    builtins.print = logged_print
    try:
        observed(lambda config: print("step 3 loss 1.0"), r"step (?P<step>\d+)")({"counter": None})
    finally:
        builtins.print = old
    assert [e["step"] for e in events(fake_ray) if e["event"] == "step"] == [3]
