import json
import os
import subprocess
import sys

from trainer.distributed import DistEnv, check_topology, read_env
from trainer.errors import LaunchError, TopologyChangeError
from trainer.events import EventWriter, read_events

import pytest


def test_event_lines_carry_the_common_fields(tmp_path, monkeypatch):
    for k, v in {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "TORCHELASTIC_RESTART_COUNT": "2",
                 "CHAOSBENCH_NODE": "node-7", "CHAOSBENCH_RUN_ID": "r1"}.items():
        monkeypatch.setenv(k, v)
    w = EventWriter(tmp_path / "ev")
    w.emit("step", {"step": 5, "loss": 1.5})
    w.emit("fatal", {"error": "boom", "error_type": "RuntimeError"})
    w.close()
    path = tmp_path / "ev" / "events-node-7-local1.jsonl"
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert {k: first[k] for k in ("event", "node", "rank", "local_rank", "world_size", "restart_count", "run_id", "step")} == \
        {"event": "step", "node": "node-7", "rank": 3, "local_rank": 1, "world_size": 4, "restart_count": 2,
         "run_id": "r1", "step": 5}
    assert first["pid"] == os.getpid() and isinstance(first["ts"], float)


def test_appends_across_incarnations_and_reader_skips_torn_line(tmp_path):
    EventWriter(tmp_path, node="n", rank=0, local_rank=0, world_size=1, restart_count=0).emit("phase", {"phase": "config"})
    w = EventWriter(tmp_path, node="n", rank=0, local_rank=0, world_size=1, restart_count=1)
    w.emit("phase", {"phase": "training"})
    path = tmp_path / "events-n-local0.jsonl"
    with open(path, "a") as f:
        f.write('{"event": "st')  # a writer killed mid-line
    events = read_events(path)
    assert [e["restart_count"] for e in events] == [0, 1]


def test_env_and_topology_errors():
    with pytest.raises(LaunchError, match=r"Missing required environment variables: \['LOCAL_WORLD_SIZE', 'MASTER_ADDR'"):
        read_env({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"})
    env = DistEnv(rank=0, local_rank=0, world_size=2, local_world_size=2, restart_count=0)  # one node
    with pytest.raises(TopologyChangeError, match="below elastic.min_nodes=2"):
        check_topology(env, 2, 4)
    with pytest.raises(TopologyChangeError, match="above elastic.max_nodes=1"):
        check_topology(DistEnv(0, 0, 4, 2, 0), 1, 1)
    check_topology(env, 1, 2)


def test_device_is_one_gpu_per_local_rank_else_cpu(monkeypatch):
    import torch
    from trainer.distributed import select_device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert select_device(DistEnv(1, 1, 2, 2, 0)) == ("gloo", torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert select_device(DistEnv(0, 0, 2, 1, 0)) == ("nccl", torch.device("cuda", 0))
    # measured on an H100: a second local rank on the only GPU died with "CUDA error: invalid device ordinal"
    with pytest.raises(LaunchError, match=r"local rank 1 has no GPU: 2 workers per node .* 1 GPU\(s\) visible"
                                          r".*--nproc-per-node to 1 or set CUDA_VISIBLE_DEVICES="):
        select_device(DistEnv(1, 1, 2, 2, 0))


@pytest.mark.integration
def test_started_without_torchrun_reports_and_emits_fatal(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                                           "MASTER_ADDR", "MASTER_PORT")}
    env.update(CHAOSBENCH_EVENTS_DIR=str(tmp_path), CHAOSBENCH_NODE="solo")
    proc = subprocess.run([sys.executable, "-m", "trainer.train", "--config", "trainer/configs/tiny.yaml"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "Missing required environment variables: ['RANK', 'LOCAL_RANK'" in proc.stderr
    events = read_events(tmp_path / "events-solo-local0.jsonl")
    assert [e["event"] for e in events] == ["phase", "phase", "fatal"]
    assert events[-1]["error_type"] == "LaunchError"
