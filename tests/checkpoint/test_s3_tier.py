"""The S3 tier against a real moto S3 server over HTTP."""
import socket
import time

import boto3
import pytest

from chaosbench.services.s3 import S3Server
from trainer.checkpoint import CheckpointManager, CheckpointSaveError
from ckpt_helpers import toy_state


def s3_cfg(endpoint, bucket, tmp_path, shm_dir, **s3):
    return {"memory_snapshot_interval": 0, "checkpoint_interval": 0, "memory_dir": shm_dir,
            "nvme_dir": str(tmp_path / "nvme"),
            "s3": {"enabled": True, "interval": 1, "endpoint_url": endpoint, "bucket": bucket,
                   "prefix": "ckpt", "max_retries": 2, "retry_backoff_s": 0.2, **s3}}


def wait_for(pred, timeout=30):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_multipart_roundtrip_and_restore(s3_bucket, tmp_path, shm_dir, events):
    endpoint, bucket = s3_bucket
    cfg = s3_cfg(endpoint, bucket, tmp_path, shm_dir, multipart_chunk_mb=5)
    mgr = CheckpointManager(cfg, node="n0", run_id="r1", emit=events)
    mgr.save(toy_state(7, n=3_000_000), tier="s3")  # ~12 MB → 3 parts
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    etag = client.head_object(Bucket=bucket, Key="ckpt/r1/step-0000000007/state.pt")["ETag"]
    assert etag.strip('"').endswith("-3"), etag  # S3 marks multipart uploads with -<parts>
    state = CheckpointManager(cfg, node="other-node", run_id="r1", emit=events).restore()
    assert state["step"] == 7
    loaded = events.of("checkpoint_loaded")[-1]
    assert (loaded["tier"], loaded["source"]) == ("s3", "local")
    saved = events.of("checkpoint_saved")[-1]
    assert loaded["checksum"] == saved["checksum"] and loaded["checksum_ok"] is True   # computed on load


def test_corrupt_newest_s3_checkpoint_falls_back(s3_bucket, tmp_path, shm_dir, events):
    endpoint, bucket = s3_bucket
    mgr = CheckpointManager(s3_cfg(endpoint, bucket, tmp_path, shm_dir), node="n0", run_id="r2", emit=events)
    for s in (3, 6):
        mgr.save(toy_state(s), tier="s3")
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    key = "ckpt/r2/step-0000000006/state.pt"
    raw = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    raw[-10] ^= 0x01
    client.put_object(Bucket=bucket, Key=key, Body=bytes(raw))
    # an upload that died before its manifest is not a checkpoint
    client.put_object(Bucket=bucket, Key="ckpt/r2/step-0000000009/state.pt", Body=b"partial")
    assert mgr.restore()["step"] == 3
    assert [e["step"] for e in events.of("checkpoint_invalid")] == [6]


def test_403_reported_then_caught_up(tmp_path, shm_dir, events, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with S3Server(bucket="ckpt403") as server:
        server.set_fault("403")
        mgr = CheckpointManager(s3_cfg(server.endpoint_url, "ckpt403", tmp_path, shm_dir), node="n0",
                                run_id="r3", emit=events)
        with pytest.raises(CheckpointSaveError, match=r"^\[S3\] .*AccessDenied \(HTTP 403\)"):
            mgr.save(toy_state(1), tier="s3")
        mgr.maybe_save(2, lambda: toy_state(2))  # returns at once although S3 refuses
        assert wait_for(lambda: len(events.of("checkpoint_failed")) >= 3)
        server.set_fault("ok")
        assert wait_for(lambda: events.of("checkpoint_saved"))
        saved = events.of("checkpoint_saved")[0]
        assert saved["step"] == 2 and saved["caught_up"] is True
        assert mgr.close(10)


def test_unreachable_endpoint_then_back(tmp_path, shm_dir, events, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mgr = CheckpointManager(s3_cfg(f"http://127.0.0.1:{port}", "late", tmp_path, shm_dir), node="n0",
                            run_id="r4", emit=events)
    t0 = time.perf_counter()
    mgr.maybe_save(5, lambda: toy_state(5))
    assert time.perf_counter() - t0 < 0.5  # the loop never waits for S3
    assert wait_for(lambda: events.of("checkpoint_failed"))
    assert "endpoint unreachable" in events.of("checkpoint_failed")[0]["error"]
    with S3Server(port=port, bucket="late"):
        assert wait_for(lambda: events.of("checkpoint_saved"), timeout=40)
        assert events.of("checkpoint_saved")[0]["step"] == 5
        assert mgr.close(10)


def test_restore_takes_newest_step_across_tiers(s3_bucket, tmp_path, shm_dir, events):
    endpoint, bucket = s3_bucket
    cfg = s3_cfg(endpoint, bucket, tmp_path, shm_dir)
    mgr = CheckpointManager(cfg, node="n0", run_id="r5", emit=events)
    mgr.save(toy_state(10), tier=["nvme", "s3"])
    mgr.save(toy_state(20), tier="s3")  # e.g. this node's disk is older than the bucket
    assert mgr.restore()["step"] == 20 and events.of("checkpoint_loaded")[-1]["tier"] == "s3"
    mgr.save(toy_state(30), tier="nvme")
    assert mgr.restore()["step"] == 30 and events.of("checkpoint_loaded")[-1]["tier"] == "nvme"
