"""Checkpoint storage on real filesystems: a file where a dir belongs, read-only and full tmpfs mounts."""
import copy

import pytest
import yaml

from chaosbench.doctor import Status, Target
from chaosbench.doctor.checks_storage import storage_checks
from chaosbench.doctor.estimate import checkpoint_bytes, param_count

from .conftest import REPO, tmpfs

TINY = yaml.safe_load((REPO / "trainer/configs/tiny.yaml").read_text())
MEDIUM = yaml.safe_load((REPO / "trainer/configs/medium_50mb.yaml").read_text())


def _target(cfg, **ck):
    cfg = copy.deepcopy(cfg)
    cfg["checkpoint"].update(ck)
    return Target(source="env", trainer_config=cfg, trainer_config_file="cfg.yaml")


def _by_name(results):
    return {r.name.split(" ")[1] if r.name.startswith("checkpoint ") else r.name: r for r in results}


@pytest.mark.parametrize("cfg", [TINY, MEDIUM], ids=["tiny", "medium_50mb"])
def test_param_estimate_matches_the_reference_model(cfg):
    from trainer.model import build_model
    model = build_model(cfg["training"]["model"])
    assert param_count(cfg["training"]["model"]) == sum(p.numel() for p in model.parameters())


def test_writable_dirs_pass(tmp_path):
    res = _by_name(storage_checks(_target(TINY, nvme_dir=str(tmp_path / "nvme"), memory_dir=str(tmp_path / "m"))))
    assert res["nvme_dir"].status == Status.PASS and "writable" in res["nvme_dir"].evidence
    assert "expected checkpoint ~" in res["nvme_dir"].evidence


def test_file_where_dir_expected_fails(tmp_path):
    f = tmp_path / "nvme"
    f.write_text("not a dir")
    r = _by_name(storage_checks(_target(TINY, nvme_dir=str(f))))["nvme_dir"]
    assert r.status == Status.FAIL and "exists but is not a directory" in r.evidence
    assert "checkpoint.nvme_dir" in r.fix


def test_read_only_mount_fails():
    with tmpfs("4m", "ro") as d:
        r = _by_name(storage_checks(_target(TINY, nvme_dir=str(d))))["nvme_dir"]
        assert r.status == Status.FAIL
        assert "EROFS" in r.evidence and "Read-only file system" in r.evidence
        assert "mounted read-only: mount it read-write" in r.fix


def test_full_mount_fails_and_small_mount_warns():
    size = checkpoint_bytes(MEDIUM["training"]["model"])
    with tmpfs("1m") as d:   # far below one ~180 MB checkpoint
        r = _by_name(storage_checks(_target(MEDIUM, nvme_dir=str(d))))["nvme_dir"]
        assert r.status == Status.FAIL and "not even one checkpoint fits" in r.evidence
        assert "need >=" in r.fix
        assert not list(d.iterdir()), "the write probe must clean up after itself"
    with tmpfs(f"{int(size * 1.5)}") as d:  # one fits, retention (keep_last + 1 in flight) does not
        r = _by_name(storage_checks(_target(MEDIUM, nvme_dir=str(d))))["nvme_dir"]
        assert r.status == Status.WARN and "retained + 1 in flight" in r.evidence and "ENOSPC" in r.fix


def test_memory_limit_below_snapshot_fails():
    r = _by_name(storage_checks(_target(MEDIUM, max_memory_mb=16)))["shared memory /dev/shm"]
    assert r.status == Status.FAIL and "MemoryLimitExceeded" in r.evidence
    assert "raise checkpoint.max_memory_mb" in r.fix


def test_missing_model_fields_reported_not_guessed(tmp_path):
    cfg = copy.deepcopy(TINY)
    del cfg["training"]["model"]["d_model"]
    t = Target(source="env", trainer_config=cfg, trainer_config_file="cfg.yaml")
    t.trainer_config["checkpoint"]["nvme_dir"] = str(tmp_path)
    r = _by_name(storage_checks(t))["nvme_dir"]
    assert r.status == Status.WARN and "model.d_model missing" in r.evidence


def test_really_full_mount_fails_with_enospc():
    with tmpfs("512k") as d:
        try:
            with open(d / "filler", "wb") as f:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
        except OSError:
            pass   # ENOSPC: the mount is now full
        r = _by_name(storage_checks(_target(TINY, nvme_dir=str(d))))["nvme_dir"]
        assert r.status == Status.FAIL
        assert "ENOSPC" in r.evidence and "No space left on device" in r.evidence
        assert "the filesystem is full" in r.fix
