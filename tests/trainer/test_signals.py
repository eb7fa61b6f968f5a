"""torchrun stops workers with SIGTERM on membership changes, and a preemption notice is a SIGTERM
too: the worker finishes its step, saves it (checkpoint.save_on_stop), says so in its events and
exits promptly with 128+SIGTERM; with no stop tiers it leaves at once."""
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.trainer.procs import free_port, kill_tree
from trainer.events import read_events

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.mark.parametrize("save_on_stop", ["[memory]", "[]"])
def test_sigterm_is_reported_as_shutdown(tmp_path, save_on_stop):
    env = dict(os.environ, CHAOSBENCH_EVENTS_DIR=str(tmp_path / "events"), CHAOSBENCH_NODE="node-0")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=1",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}", "-m", "trainer.train",
           "--config", "trainer/configs/tiny.yaml", "--set", "training.max_steps=100000",
           "--set", "training.step_sleep_s=0.05", "--set", f"checkpoint.memory_dir={tmp_path / 'shm'}",
           "--set", f"checkpoint.nvme_dir={tmp_path / 'nvme'}",
           "--set", f"checkpoint.save_on_stop={save_on_stop}"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    path = tmp_path / "events" / "events-node-0-local0.jsonl"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            steps = [e for e in read_events(path) if e["event"] == "step"] if path.exists() else []
            if len(steps) >= 3:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the trainer never reached step 3")
        os.kill(steps[-1]["pid"], signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
        proc.wait(timeout=10)
    events = read_events(path)
    last = events[-1]
    assert (last["event"], last["phase"], last["reason"]) == ("phase", "shutdown", "SIGTERM")
    assert "exitcode  : 143" in err
    if save_on_stop == "[]":
        assert "saved_step" not in last
        return
    step = max(e["step"] for e in events if e["event"] == "step")
    assert (last["saved_step"], last["saved_tiers"]) == (step, ["memory"])      # the last finished step
    assert any(e["event"] == "checkpoint_saved" and (e["tier"], e["step"]) == ("memory", step) for e in events)
