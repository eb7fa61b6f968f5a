"""constant_batch keeps the optimisation independent of the world size: the same global batch,
split over 1 or 2 workers with recomputed gradient accumulation, gives the same losses."""
import os
import subprocess
import sys

import pytest

from tests.trainer.procs import free_port
from trainer.events import read_events

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def losses(tmp_path, nproc: int) -> list[tuple[int, float, int]]:
    run = tmp_path / f"w{nproc}"
    env = dict(os.environ, CHAOSBENCH_EVENTS_DIR=str(run / "events"), CHAOSBENCH_NODE="node-0", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={nproc}",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", "-m", "trainer.train",
           "--config", "trainer/configs/tiny.yaml", "--set", "training.max_steps=8",
           "--set", "scaling.strategy=constant_batch", "--set", "scaling.target_global_batch_size=24",
           "--set", f"checkpoint.memory_dir={run / 'shm'}", "--set", f"checkpoint.nvme_dir={run / 'nvme'}"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    events = read_events(run / "events" / "events-node-0-local0.jsonl")
    return [(e["step"], e["loss"], e["accum_steps"]) for e in events if e["event"] == "step"]


def test_constant_batch_losses_match_across_world_sizes(tmp_path):
    one, two = losses(tmp_path, 1), losses(tmp_path, 2)
    assert [s for s, _, _ in one] == [s for s, _, _ in two] == list(range(1, 9))
    assert {a for _, _, a in one} == {3} and {a for _, _, a in two} == {2}   # 24 = 1 x 3 x 8 = 2 x 2 x 6
    for (_, l1, _), (_, l2, _) in zip(one, two):
        assert l1 == pytest.approx(l2, rel=1e-4)
