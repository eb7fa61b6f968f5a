"""Real storage faults: a filesystem that fills (ENOSPC) and one that is read-only."""
import os
import time

import pytest

from trainer.checkpoint import CheckpointManager, CheckpointSaveError
from ckpt_helpers import toy_state


def test_enospc_is_reported_and_training_goes_on(small_fs, shm_dir, events):
    # ~0.8 MB per checkpoint on a 2 MB filesystem: the third one cannot fit
    mgr = CheckpointManager({"memory_snapshot_interval": 1, "checkpoint_interval": 1, "keep_last": 5,
                             "memory_dir": shm_dir, "nvme_dir": small_fs}, node="n0", run_id="t", emit=events)
    for s in range(1, 5):
        mgr.maybe_save(s, lambda s=s: toy_state(s, n=200_000))  # never raises in the loop
        time.sleep(0.3)
    assert mgr.close(30)
    failed = [e for e in events.of("checkpoint_failed") if e["tier"] == "nvme"]
    assert failed, events.lines
    assert all(e["error"].startswith("[NVME] ") and "No space left on device" in e["error"] for e in failed)
    # the memory tier kept working, no temp dir was left behind, and what is on disk is valid
    assert {e["step"] for e in events.of("checkpoint_saved") if e["tier"] == "memory"} == {1, 2, 3, 4}
    assert not [n for n in os.listdir(small_fs) if n.startswith(".tmp-")]
    # a restore on a node whose memory tier is gone (a fresh directory) finds the newest nvme one
    fresh = CheckpointManager({"memory_dir": os.path.join(shm_dir, "lost"), "nvme_dir": small_fs}, node="n0", run_id="t")
    assert fresh.restore()["step"] == max(
        e["step"] for e in events.of("checkpoint_saved") if e["tier"] == "nvme")
    with pytest.raises(CheckpointSaveError, match=r"^\[NVME\] .*No space left on device \(ENOSPC\)"):
        mgr.save(toy_state(9, n=600_000), tier="nvme")


def test_readonly_filesystem_is_reported(readonly_fs, shm_dir, events):
    mgr = CheckpointManager({"memory_dir": shm_dir, "nvme_dir": readonly_fs}, node="n0", run_id="t", emit=events)
    with pytest.raises(CheckpointSaveError, match=r"^\[NVME\] .*Read-only file system \(EROFS\)"):
        mgr.save(toy_state(4), tier="nvme")
    assert events.of("checkpoint_failed")[0]["error"].startswith("[NVME]")
