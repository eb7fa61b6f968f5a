"""The heartbeat: a frozen (silent) peer is detected within the short timeout, not after gloo's
default 30 minutes; ranks that finish at different times stop it together without a false alarm.
Real processes and a real gloo group; the peer is frozen with SIGSTOP."""
import json
import os
import signal
import subprocess
import sys

import pytest

from tests.trainer.procs import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def run_pair(mode: str, timeout_s: float) -> list[dict | None]:
    port, procs = free_port(), []
    try:
        for rank in (0, 1):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(subprocess.Popen([sys.executable, "tests/trainer/health_peer.py", mode, str(timeout_s)],
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          start_new_session=True))
        results = []
        for p in procs if mode == "stop" else procs[:1]:
            out, err = p.communicate(timeout=90)
            assert p.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=10)


def test_silent_peer_detected_within_timeout():
    timeout_s = 2.0
    (result,) = run_pair("freeze", timeout_s)
    assert result["healthy_first"], result
    assert result["detected"], result
    assert result["detect_s"] < timeout_s + 0.5 + 2.0, result     # timeout + one interval + slack
    print(f"silent peer detected after {result['detect_s']:.2f}s (timeout {timeout_s}s)")


def test_ranks_finishing_apart_stop_together():
    for result in run_pair("stop", 2.0):
        assert result["healthy_first"] and result["stopped"] and not result["failures"], result
        assert result["beats"] >= 6, result                          # heartbeats went on while rank 1 worked
