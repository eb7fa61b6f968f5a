"""The examples/byo_ddp jobs under real torchrun (2 workers, --standalone): the plain one resumes
from its own snapshot; the instrumented one does the same and says so in events that follow
docs/events.md; outside chaosbench the instrumented one writes no events."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chaosbench.jsonl import read_jsonl

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "byo_ddp"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


def torchrun(cwd: Path, script: str, steps: int, env: dict | None = None) -> str:
    """Runs the example as a user would, from a copy outside this checkout; returns its output."""
    job = cwd / script
    if not job.exists():
        shutil.copy(EXAMPLE / script, job)
    base = {k: v for k, v in os.environ.items() if not k.startswith("CHAOSBENCH_")}
    proc = subprocess.run(TORCHRUN + [str(job), "--steps", str(steps), "--every", "5", "--step-time", "0.01"],
                          cwd=cwd, env={**base, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def steps_printed(out: str) -> list[int]:   # both ranks print to one stdout: lines may interleave
    return sorted({int(m) for m in re.findall(r"step (\d+) loss ", out)})


def test_plain_job_resumes_and_the_instrumented_one_outside_chaosbench_writes_no_events(tmp_path):
    assert steps_printed(torchrun(tmp_path, "train_plain.py", 7)) == list(range(1, 8))
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["snapshot-5.pt"]
    # the instrumented job picks up the plain job's snapshot; without $CHAOSBENCH_EVENTS_DIR it only adds a manifest
    assert steps_printed(torchrun(tmp_path, "train_instrumented.py", 11)) == [6, 7, 8, 9, 10, 11]
    assert sorted(os.listdir(tmp_path / "ckpt")) == ["manifest.json", "snapshot-10.pt"]
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "train_instrumented.py", "train_plain.py"]


def test_instrumented_job_says_where_it_resumed(tmp_path):
    nvme = tmp_path / "nvme"
    env = {"CHAOSBENCH_EVENTS_DIR": str(tmp_path / "ev"), "CHAOSBENCH_NODE": "node-0", "CHAOSBENCH_RUN_ID": "r1",
           "CHAOSBENCH_NVME_DIR": str(nvme), "CHAOSBENCH_CHECKPOINT_DIR": str(nvme / "checkpoints")}
    torchrun(tmp_path, "train_instrumented.py", 7, env)
    out = torchrun(tmp_path, "train_instrumented.py", 9, env)
    assert steps_printed(out) == [6, 7, 8, 9]
    for local in (0, 1):
        ev = read_jsonl(tmp_path / "ev" / f"events-node-0-local{local}.jsonl")
        names = [e["event"] for e in ev]
        assert names[:2] == ["checkpoint_fresh_start", "phase"], names
        assert [e["step"] for e in ev if e["event"] == "step"] == [1, 2, 3, 4, 5, 6, 7, 6, 7, 8, 9]
        loaded = [e for e in ev if e["event"] == "checkpoint_loaded"]
        assert [(e["tier"], e["step"], e["checksum_ok"], e["world_size"]) for e in loaded] == [("nvme", 5, True, 2)]
        assert [e["step"] for e in ev if e["event"] == "run_complete"] == [7, 9]
        saved = [(e["tier"], e["step"]) for e in ev if e["event"] == "checkpoint_saved"]
        assert saved == ([("nvme", 5)] if local == 0 else [])   # local rank 0 keeps the node's copy
        assert all(e["run_id"] == "r1" and e["node"] == "node-0" and e["local_rank"] == local for e in ev)
    assert not (tmp_path / "ckpt").exists()          # it wrote where $CHAOSBENCH_CHECKPOINT_DIR said

