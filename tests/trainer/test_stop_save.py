"""CheckpointManager.save_on_stop: the save a stopping worker makes of its last finished step."""
import time

import torch

from trainer.checkpoint import CheckpointManager


def _state(step):
    return {"step": step, "model": {"w": torch.full((100,), float(step))}, "optimizer": {}}


def _manager(tmp_path, events, **cfg):
    base = {"memory_snapshot_interval": 5, "checkpoint_interval": 20, "memory_dir": str(tmp_path / "shm"),
            "nvme_dir": str(tmp_path / "nvme")}
    return CheckpointManager({**base, **cfg}, node="n0", emit=lambda e, f: events.append((e, f)))


def test_the_stop_step_is_saved_to_the_memory_tier_between_snapshots(tmp_path):
    events = []
    mgr = _manager(tmp_path, events)
    assert mgr.save_on_stop(7, lambda: _state(7)) == ["memory"]
    saved = [f for e, f in events if e == "checkpoint_saved"]
    assert [(f["tier"], f["step"]) for f in saved] == [("memory", 7)]
    assert [r.step for r in mgr.stores["memory"].list()] == [7]
    mgr.close()


def test_a_step_maybe_save_already_submitted_is_waited_for_not_saved_twice(tmp_path):
    events = []
    mgr = _manager(tmp_path, events, save_on_stop=["memory", "nvme"])
    mgr.maybe_save(20, lambda: _state(20))                 # both tiers due at step 20
    assert sorted(mgr.save_on_stop(20, lambda: _state(20))) == ["memory", "nvme"]
    saved = sorted((f["tier"], f["step"]) for e, f in events if e == "checkpoint_saved")
    assert saved == [("memory", 20), ("nvme", 20)]         # done when it returns, each once
    mgr.close()


def test_no_stop_tiers_means_no_save(tmp_path):
    events = []
    mgr = _manager(tmp_path, events, save_on_stop=[])
    assert mgr.save_on_stop(7, lambda: _state(7)) == []
    assert not [e for e, _ in events if e == "checkpoint_saved"]
    mgr.close()


def test_a_save_that_outlasts_the_timeout_is_not_reported_as_done(tmp_path):
    events = []
    mgr = _manager(tmp_path, events)
    slow_write = mgr.writers["memory"]._write_fn
    mgr.writers["memory"]._write_fn = lambda snap, attempt: (time.sleep(1.0), slow_write(snap, attempt))[1]
    t0 = time.monotonic()
    assert mgr.save_on_stop(7, lambda: _state(7), timeout=0.2) == []
    assert time.monotonic() - t0 < 0.8
    mgr.close()
