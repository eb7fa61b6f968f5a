"""A frozen (silent) peer is detected by the health check within its short timeout, not after
gloo's default 30 minutes. Real processes, a real gloo group; the peer is frozen with SIGSTOP."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.trainer.procs import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_silent_peer_detected_within_timeout():
    port, timeout_s = free_port(), 2.0
    procs = []
    try:
        for rank in (0, 1):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            procs.append(subprocess.Popen([sys.executable, "tests/trainer/health_peer.py", str(timeout_s)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          start_new_session=True))
        out, err = procs[0].communicate(timeout=90)
        assert procs[0].returncode == 0, err[-3000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert result["healthy_first"], result
        assert result["detected"], result
        assert result["detect_s"] < timeout_s + 3.0, result
        print(f"silent peer detected after {result['detect_s']:.2f}s (timeout {timeout_s}s)")
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.communicate(timeout=10)
