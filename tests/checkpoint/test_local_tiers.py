"""Memory and NVMe tiers on real directories (/dev/shm and tmp_path)."""
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from trainer.checkpoint import (CheckpointConfigError, CheckpointLoadError,
                                CheckpointManager, CheckpointSaveError, MemoryLimitExceeded)
from ckpt_helpers import toy_state


def make(tmp_path, shm_dir, events, **over):
    cfg = {"memory_snapshot_interval": 2, "checkpoint_interval": 4, "keep_last": 2, "max_snapshots": 2,
           "memory_dir": shm_dir, "nvme_dir": str(tmp_path / "nvme"), **over}
    return CheckpointManager(cfg, node="n0", run_id="t", emit=events)


def test_async_saves_land_in_both_tiers_with_retention(tmp_path, shm_dir, events):
    mgr = make(tmp_path, shm_dir, events)
    for s in range(1, 13):
        mgr.maybe_save(s, lambda s=s: toy_state(s))
        time.sleep(0.05)  # let each save finish so none is coalesced
    assert mgr.close(30)
    assert [r.step for r in mgr.stores["memory"].list()] == [12, 10]
    assert [r.step for r in mgr.stores["nvme"].list()] == [12, 8]
    saved = events.of("checkpoint_saved")
    assert {(e["tier"], e["step"]) for e in saved} >= {("memory", 12), ("nvme", 12), ("nvme", 4)}
    for e in saved:
        assert e["bytes"] > 4000 and 0 <= e["stall_s"] <= e["total_s"]


def test_restore_prefers_memory_then_nvme(tmp_path, shm_dir, events):
    mgr = make(tmp_path, shm_dir, events)
    for s in range(1, 11):
        mgr.maybe_save(s, lambda s=s: toy_state(s))
        time.sleep(0.05)
    mgr.close(30)
    state = make(tmp_path, shm_dir, events).restore()
    assert state["step"] == 10 and torch.equal(state["model"]["w"], toy_state(10)["model"]["w"])
    loaded = events.of("checkpoint_loaded")[-1]
    assert (loaded["tier"], loaded["source"], loaded["step"]) == ("memory", "local", 10)
    import json
    manifest = json.loads((Path(shm_dir) / "step-0000000010" / "manifest.json").read_text())
    assert loaded["checksum"] == manifest["checksum"] and loaded["checksum_ok"] is True   # computed on load
    shutil.rmtree(shm_dir)  # the node lost its shared memory: nvme has step 8
    state = make(tmp_path, shm_dir, events).restore()
    assert state["step"] == 8 and events.of("checkpoint_loaded")[-1]["tier"] == "nvme"


@pytest.mark.parametrize("algo", ["crc32", "sha256", "blake2b"])
def test_corrupt_byte_falls_back_to_previous_valid(tmp_path, shm_dir, events, algo):
    mgr = make(tmp_path, shm_dir, events, memory_snapshot_interval=0, checksum=algo)
    for s in (4, 8):
        mgr.save(toy_state(s), tier="nvme")
    newest = tmp_path / "nvme" / "step-0000000008" / "state.pt"
    raw = bytearray(newest.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    newest.write_bytes(bytes(raw))
    state = make(tmp_path, shm_dir, events, memory_snapshot_interval=0).restore()
    assert state["step"] == 4
    bad = events.of("checkpoint_invalid")
    assert bad and bad[0]["step"] == 8 and f"checksum {algo}:" in bad[0]["error"]


def test_truncated_or_bad_manifest_rejected(tmp_path, shm_dir, events):
    mgr = make(tmp_path, shm_dir, events, keep_last=3)
    for s in (4, 8, 12):
        mgr.save(toy_state(s), tier="nvme")
    root = tmp_path / "nvme"
    (root / "step-0000000012" / "manifest.json").write_text("{not json")
    with open(root / "step-0000000008" / "state.pt", "r+b") as f:
        f.truncate(100)
    assert mgr.restore()["step"] == 4   # only nvme holds checkpoints
    errors = {e["step"]: e["error"] for e in events.of("checkpoint_invalid")}
    assert "not valid JSON" in errors[12] and "size 100" in errors[8]


def test_partial_and_temp_files_never_loaded(tmp_path, shm_dir, events):
    mgr = make(tmp_path, shm_dir, events)
    mgr.save(toy_state(4), tier="nvme")
    root = tmp_path / "nvme"
    # a writer killed mid-save leaves a temp dir; a dir without manifest is incomplete
    tmp = root / ".tmp-step-0000000099-123"
    tmp.mkdir()
    (tmp / "state.pt").write_bytes(b"partial")
    (root / "step-0000000050").mkdir()
    (root / "step-0000000050" / "state.pt").write_bytes(b"x" * 10)
    assert mgr.restore()["step"] == 4
    # a new manager on the node's writer rank removes the stale temp dir
    make(tmp_path, shm_dir, events)
    assert not tmp.exists()


def test_memory_limit_exceeded(tmp_path, shm_dir, events):
    mgr = make(tmp_path, shm_dir, events, max_memory_mb=0.001)
    with pytest.raises(MemoryLimitExceeded, match=r"\[MEMORY\] MemoryLimitExceeded: .*max_memory_mb"):
        mgr.save(toy_state(2), tier="memory")
    mgr.maybe_save(2, lambda: toy_state(2))
    mgr.close(30)
    failed = events.of("checkpoint_failed")
    assert failed and all("MemoryLimitExceeded" in f["error"] and f["tier"] == "memory" for f in failed)


def test_memory_budget_evicts_oldest(tmp_path, shm_dir, events):
    one = len(open(make(tmp_path, shm_dir, events).save(toy_state(1), tier="memory")["memory"]
                   + "/state.pt", "rb").read())
    mgr = make(tmp_path, shm_dir, events, max_snapshots=5, max_memory_mb=2.5 * one / 2**20)
    for s in (2, 3, 4):
        mgr.save(toy_state(s), tier="memory")
    assert [r.step for r in mgr.stores["memory"].list()] == [4, 3]


def test_coalescing_emits_skipped(tmp_path, shm_dir, events):
    mgr = make(tmp_path, shm_dir, events, memory_snapshot_interval=0, checkpoint_interval=1)
    real = mgr.stores["nvme"].save

    def slow_save(*a, **k):
        time.sleep(0.3)
        return real(*a, **k)

    mgr.stores["nvme"].save = slow_save
    for s in range(1, 6):
        mgr.maybe_save(s, lambda s=s: toy_state(s))
    mgr.close(30)
    saved = [e["step"] for e in events.of("checkpoint_saved")]
    skipped = events.of("checkpoint_skipped")
    # one save running and one pending at most: of five quick saves, at most two are written,
    # the newest always is, and every other one is reported as skipped
    assert len(saved) <= 2 and saved[-1] == 5, saved
    assert skipped and all(e["tier"] == "nvme" and "coalesced" in e["reason"] for e in skipped)
    assert sorted(saved + [e["step"] for e in skipped]) == [1, 2, 3, 4, 5]


def test_fresh_start_when_nothing(tmp_path, shm_dir, events):
    assert make(tmp_path, shm_dir, events).restore() is None
    assert events.of("checkpoint_fresh_start")[0]["reason"].startswith("no valid checkpoint")


def test_nvme_path_not_a_directory_reported(tmp_path, shm_dir, events):
    (tmp_path / "file").write_text("not a directory")
    mgr = make(tmp_path, shm_dir, events, nvme_dir=str(tmp_path / "file" / "sub"))
    with pytest.raises(CheckpointSaveError, match=r"^\[NVME\] write of step 4 .* failed: Not a directory"):
        mgr.save(toy_state(4), tier="nvme")
    assert events.of("checkpoint_failed")[0]["error"].startswith("[NVME]")


def test_unsafe_pickle_refused_unless_trusted(tmp_path, shm_dir, events):
    mgr = make(tmp_path, shm_dir, events)
    mgr.save({"step": 3, "model": {}, "obj": Custom()}, tier="nvme")
    with pytest.raises(CheckpointLoadError, match="trusted_source"):
        mgr.restore()
    state = make(tmp_path, shm_dir, events, trusted_source=True).restore()
    assert isinstance(state["obj"], Custom)


class Custom:
    pass


@pytest.mark.parametrize("bad, field", [({"checkpoint_interval": -1}, "checkpoint.checkpoint_interval"),
                                        ({"keep_last": 0}, "checkpoint.keep_last"),
                                        ({"bogus": 1}, "unknown field"),
                                        ({"s3": {"interval": 0}}, "checkpoint.s3.interval"),
                                        ({"checksum": "md5"}, "checkpoint.checksum")])
def test_config_errors_name_the_field(bad, field):
    with pytest.raises(CheckpointConfigError, match=field.replace(".", r"\.")):
        CheckpointManager(bad, node="n", run_id="x")
