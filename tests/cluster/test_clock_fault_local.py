"""clock_skew on the local backend: the node's processes are host processes the harness started with
the preload env; they read the jumped wall clock, restore brings real time back, and after a SIGKILLed
harness the sweep that `chaosbench clean` runs leaves no process carrying the preload."""
import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from chaosbench.cluster import ClusterSpec, create_cluster
from chaosbench.cluster.local.backend import sweep

from .helpers import harness_mid_fault
from .test_clock_fault_docker import WATCH

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _seen(cluster, node: str) -> dict:
    for _ in range(50):
        try:
            return json.loads((cluster.nvme_dir(node) / "clock.json").read_text())
        except (OSError, ValueError):
            time.sleep(0.1)
    raise AssertionError(f"{node} wrote no clock.json")


def _preloaded(run_dir) -> list[int]:
    """Host processes whose preload reads a control file of this run."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = open(f"/proc/{pid}/environ", "rb").read()
        except OSError:
            continue
        if f"FAKETIME_TIMESTAMP_FILE={run_dir}/clock/".encode() in env:
            out.append(int(pid))
    return out


def test_local_nodes_run_preloaded_and_see_the_skew(tmp_path):
    spec = ClusterSpec(run_id="clkloc", run_dir=tmp_path, nodes=2, min_nodes=1, max_nodes=2, fake_clock=True,
                       command=[sys.executable, "-c", WATCH])
    with create_cluster("local", spec) as cluster:
        cluster.start_training()
        assert abs(_seen(cluster, "node-0")["wall"]) < 0.5
        assert abs(cluster.skew_clock("node-0", "-30 x1", -30.0)["seen_offset_s"] + 30) < 1
        deadline = time.monotonic() + 3
        while abs(_seen(cluster, "node-0")["wall"] + 30) > 0.5 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert abs(_seen(cluster, "node-0")["wall"] + 30) < 0.5
        assert abs(_seen(cluster, "node-1")["wall"]) < 0.5
        assert abs(cluster.restore_clock("node-0")["seen_offset_s"]) < 1
        time.sleep(1)
        assert abs(_seen(cluster, "node-0")["wall"]) < 0.5
        assert _preloaded(tmp_path), "the node's processes run without the preload"
        roots = list(cluster._clock_roots)
        assert roots and all(Path(f"/dev/shm/faketime_shm_{pid}").exists() for pid in roots)
    assert _preloaded(tmp_path) == []
    left = _shm_files(roots)
    assert not left, f"libfaketime's shared memory left in /dev/shm: {left}"


HARNESS = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from chaosbench.cluster import ClusterSpec, create_cluster
    spec = ClusterSpec(run_id="clklockill", run_dir=Path(sys.argv[1]), nodes=1, max_nodes=1, fake_clock=True,
                       command=[sys.executable, "-c", "import time; time.sleep(600)"])
    with create_cluster("local", spec) as c:
        c.start_training()
        time.sleep(1)
        c.skew_clock("node-0", "+30 x1", 30.0)
        print("READY", c.project, flush=True)
        time.sleep(600)
""")


def _shm_files(pids: list[int]) -> list[str]:
    """libfaketime's files in /dev/shm of these processes (it names them by the root of a preloaded tree)."""
    return [f for pid in pids for f in (f"faketime_shm_{pid}", f"sem.faketime_sem_{pid}") if Path("/dev/shm", f).exists()]


def test_a_sigkilled_harness_mid_fault_leaves_no_preloaded_process_nor_shm_file_after_clean(tmp_path):
    p, _ = harness_mid_fault(HARNESS, tmp_path)
    preloaded = _preloaded(tmp_path)
    assert preloaded, "expected the node's preloaded processes mid-fault"
    files = _shm_files(preloaded)
    assert files, "expected libfaketime's files in /dev/shm for the node's preloaded tree"
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    sweep()                    # what `chaosbench clean` runs for the local backend
    deadline = time.monotonic() + 15
    while _preloaded(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert _preloaded(tmp_path) == [], "a preloaded process outlived clean"
    left = [f for f in files if Path("/dev/shm", f).exists()]
    assert not left, f"libfaketime's shared memory of the killed harness's node left in /dev/shm: {left}"
