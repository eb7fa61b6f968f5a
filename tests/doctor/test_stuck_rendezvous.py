"""A run really stuck in rendezvous: a 2-node c10d torchrun job where only node-0 is started.

torchrun starts no worker until the rendezvous completes, so there are no events: the diagnosis must
come from the agent's log and the rendezvous store (which node-0's agent hosts)."""
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from chaosbench.doctor import diagnose_run, is_stuck
from chaosbench.doctor.rdzv_probe import c10d_state
from chaosbench.services.ports import free_port

from .conftest import REPO, run_doctor

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_one_node_never_started(tmp_path):
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    events = run / "events"
    port, rid = free_port(), f"stuck-{uuid.uuid4().hex[:6]}"
    env = dict(os.environ, LOGLEVEL="INFO", CHAOSBENCH_EVENTS_DIR=str(events), CHAOSBENCH_NODE="node-0",
               CHAOSBENCH_RUN_ID=rid, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={rid}",
           "--rdzv-conf=join_timeout=600", "--local-addr=127.0.0.1", str(Path(__file__).with_name("worker.py"))]
    started = time.time()
    with open(run / "logs" / "node-0.log", "wb") as log:
        agent = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
                                 start_new_session=True)
    try:
        state, deadline = None, time.monotonic() + 120
        while time.monotonic() < deadline:
            assert agent.poll() is None, (run / "logs" / "node-0.log").read_text()
            try:
                state = c10d_state("127.0.0.1", port, rid, timeout_s=2)
                if state["participants"]:
                    break
            except Exception:
                pass
            time.sleep(0.5)
        assert state and len(state["participants"]) == 1 and not state["complete"], state
        time.sleep(2.5)   # let the wait exceed the (tiny) no-progress timeout used below

        d = diagnose_run(run, expected_nodes=2, no_progress_timeout_s=2, rendezvous=state)
        assert d.stuck and d.phase == "rendezvous", d.to_dict()
        assert d.missing_nodes == ["node-1"]
        assert d.cause.startswith("stuck in rendezvous: 1 of 2 nodes started; node-1 never started")
        text = "\n".join(d.evidence)
        assert "node-0 has been in rendezvous for" in text and "Rendezvous'ing worker group" in text
        assert "rendezvous store shows 1 of 2 nodes joined round 0 (complete=False)" in text
        assert "node-1: no events and no agent log" in text
        assert "start node-1" in d.fix
        assert not list(events.glob("events-*.jsonl")), "no worker can have started"

        # the engine's view: no events at all since the start → stuck in rendezvous
        stuck, reason = is_stuck(events, 2, started_at=started)
        assert stuck and reason.startswith("stuck in rendezvous")

        # the CLI, reading the live store itself
        p = run_doctor("--run", str(run), "--nodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}",
                       "--run-id", rid, "--timeout", "2", "--json")
        assert p.returncode == 1, p.stderr
        out = json.loads(p.stdout)
        assert out["stuck"] and out["phase"] == "rendezvous"
        assert len(out["rendezvous"]["participants"]) == 1 and out["missing_nodes"] == ["node-1"]
    finally:
        try:
            os.killpg(agent.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        agent.wait(10)
