"""Two real gloo ranks restore together: a checksum mismatch on the bytes one rank received makes
both reject that checkpoint and fall back together (no rank left waiting out the PG timeout), and
replicas that differ after the restore stop every rank with the same error."""
import datetime
import os
import socket

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from trainer.checkpoint import CheckpointLoadError, CheckpointManager, agreement
from ckpt_helpers import toy_state

pytestmark = pytest.mark.timeout(120)


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, port, root, out, case):
    import json
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    lines = []
    cfg = {"memory_snapshot_interval": 5, "checkpoint_interval": 0, "max_snapshots": 2,
           "memory_dir": os.path.join(root, f"mem{rank}"), "nvme_dir": os.path.join(root, f"nvme{rank}")}
    mgr = CheckpointManager(cfg, node=f"n{rank}", rank=rank, local_rank=0, world_size=2, run_id="t",
                            emit=lambda e, f: lines.append({"event": e, **f}))
    if rank == 0:   # only rank 0 holds snapshots: rank 1 receives them from it
        for step in (5, 10):
            mgr.save(toy_state(step), tier="memory")
    if case == "flip" and rank == 1:
        real, calls = agreement.broadcast_bytes, []

        def flip_first(data, size, src):   # the first transfer arrives damaged on this rank
            got = real(data, size, src)
            calls.append(1)
            return bytes([got[0] ^ 0xFF]) + got[1:] if len(calls) == 1 else got
        agreement.broadcast_bytes = flip_first
    error = None
    state = mgr.restore()
    if case == "diverge":
        model = toy_state(state["step"] + rank)["model"]   # rank 1 applied something else
        try:
            mgr.check_replicas({"model": model})
        except CheckpointLoadError as e:
            error = str(e)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"step": state and state["step"], "events": lines, "error": error}, f, default=str)
    dist.destroy_process_group()


def run(tmp_path, case):
    import json
    mp.spawn(_rank, args=(_port(), str(tmp_path), str(tmp_path), case), nprocs=2, join=True)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_mismatch_on_received_bytes_falls_back_on_every_rank(tmp_path):
    r0, r1 = run(tmp_path, "flip")
    assert r0["step"] == r1["step"] == 5
    for r in (r0, r1):
        (bad,) = [e for e in r["events"] if e["event"] == "checkpoint_invalid"]
        assert bad["step"] == 10 and "on rank(s) 1; every rank falls back" in bad["error"]
        (ok,) = [e for e in r["events"] if e["event"] == "checkpoint_loaded"]
        assert ok["step"] == 5 and ok["checksum_ok"] is True
    assert [e["source"] for e in r1["events"] if e["event"] == "checkpoint_loaded"] == ["peer"]


def test_replicas_that_differ_after_restore_stop_every_rank(tmp_path):
    r0, r1 = run(tmp_path, "diverge")
    for r in (r0, r1):
        assert "rank(s) 1 disagree with rank 0" in r["error"]
        assert any(e["event"] == "checkpoint_invalid" and "differs across ranks" in e["error"] for e in r["events"])
