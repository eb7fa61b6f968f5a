"""clock_skew on a real docker cluster: the node's running processes (started under the libfaketime
preload) read the jumped wall clock within a second, their CLOCK_MONOTONIC does not move, time.sleep
keeps working (clockfix.c), a drift runs the clock fast, restore brings real time back (verified by a
fresh preloaded probe and by the running process), and after a SIGKILLed harness the sweep that
`chaosbench clean` runs removes the nodes and with them every preloaded process."""
import json
import os
import textwrap
import time

import pytest

from chaosbench.cluster import ClusterSpec, available_backends, create_cluster
from chaosbench.cluster.docker.cli import docker
from chaosbench.cluster.node.clock import CONTROL, NO_SKEW

from .helpers import harness_mid_fault, sigkill_then_clean

_why = available_backends()["docker"]
pytestmark = [pytest.mark.docker, pytest.mark.timeout(600),
              pytest.mark.skipif(_why is not None, reason=f"docker backend unusable: {_why}")]

# the node's own process: every 0.2 s (time.sleep: the clockfix path), its wall clock against the
# kernel's (a raw syscall libfaketime does not see) and its monotonic clock, to clock.json on its NVMe
WATCH = textwrap.dedent("""
    import ctypes, json, os, time
    class TS(ctypes.Structure): _fields_ = [('s', ctypes.c_long), ('ns', ctypes.c_long)]
    libc = ctypes.CDLL(None)
    def raw(clock):
        ts = TS(); libc.syscall(228, clock, ctypes.byref(ts)); return ts.s + ts.ns / 1e9
    while True:
        d = {'wall': time.time() - raw(0), 'mono': time.monotonic() - raw(1), 'at': time.monotonic()}
        out = os.environ['CHAOSBENCH_NVME_DIR'] + '/clock.json'
        open(out + '.tmp', 'w').write(json.dumps(d)); os.replace(out + '.tmp', out)
        time.sleep(0.2)
""")


@pytest.fixture(scope="module")
def image():
    from chaosbench.cluster.docker.images import node_image
    return node_image()


def _spec(tmp_path, run_id="clk"):
    return ClusterSpec(run_id=run_id, run_dir=tmp_path, nodes=2, min_nodes=1, max_nodes=2, fake_clock=True,
                       command=["python", "-c", WATCH])


def _seen(cluster, node: str) -> dict:
    return json.loads(docker("exec", f"{cluster.project}-{node}", "cat", "/nvme/clock.json"))


def _wait_seen(cluster, node, want_wall, within=3.0) -> dict:
    deadline = time.monotonic() + within
    while True:
        got = _seen(cluster, node)
        if abs(got["wall"] - want_wall) < 0.5 or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_skew_reaches_the_running_process_and_restore_brings_real_time_back(tmp_path, image):
    with create_cluster("docker", _spec(tmp_path), image=image) as cluster:
        cluster.start_training()
        time.sleep(2)
        before = _seen(cluster, "node-0")
        assert abs(before["wall"]) < 0.5, before                    # "+0" from the start: real time
        t = time.monotonic()
        assert abs(cluster.skew_clock("node-0", "+30 x1", 30.0)["seen_offset_s"] - 30) < 1
        got = _wait_seen(cluster, "node-0", 30.0)
        took = time.monotonic() - t
        assert abs(got["wall"] - 30) < 0.5, got                       # the running process: wall clock +30 s
        assert abs(got["mono"] - before["mono"]) < 0.5, got           # CLOCK_MONOTONIC unmoved
        assert abs(_seen(cluster, "node-1")["wall"]) < 0.5            # the other node untouched
        assert cluster.node_status("node-0") == "running"             # time.sleep kept working throughout
        # a drift: 100000 ppm = the wall clock runs 1.1x
        cluster.skew_clock("node-0", "+0 x1.100000000", 0.0)
        deadline = time.monotonic() + 3
        while abs(_seen(cluster, "node-0")["wall"] - 30) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)   # the +30 s step is over once the process read the drift
        time.sleep(0.3)
        a = _seen(cluster, "node-0"); time.sleep(2.0); b = _seen(cluster, "node-0")
        rate = 1 + (b["wall"] - a["wall"]) / (b["at"] - a["at"])
        assert 1.05 < rate < 1.15, (a, b)
        healed = cluster.restore_clock("node-0")
        assert abs(healed["seen_offset_s"]) < 1
        assert (tmp_path / "clock" / "node-0" / CONTROL).read_text().strip() == NO_SKEW
        assert abs(_wait_seen(cluster, "node-0", 0.0)["wall"]) < 0.5
        print(f"\n+30 s seen by the running process {took:.2f} s after skew_clock was called; drift x{rate:.3f}")
        # a stopped node: the file is what its next start reads; heal of a stopped node writes "+0"
        cluster.skew_clock("node-1", "-30 x1", -30.0)
        docker("stop", "-t", "1", f"{cluster.project}-node-1")
        assert cluster.restore_clock("node-1") == {"seen_offset_s": None}
        docker("start", f"{cluster.project}-node-1")
        time.sleep(2)
        assert abs(_seen(cluster, "node-1")["wall"]) < 0.5


def test_a_cluster_without_clock_faults_runs_without_the_preload(tmp_path, image):
    spec = ClusterSpec(run_id="noclk", run_dir=tmp_path, nodes=1, min_nodes=1, max_nodes=1,
                       command=["python", "-c", "import time; time.sleep(600)"])
    with create_cluster("docker", spec, image=image) as cluster:
        cluster.start_training()
        env = docker("exec", f"{cluster.project}-node-0", "env")
        assert "LD_PRELOAD" not in env and "FAKETIME" not in env
        with pytest.raises(Exception, match="without the libfaketime preload"):
            cluster.skew_clock("node-0", "+30 x1", 30.0)


HARNESS = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from chaosbench.cluster import ClusterSpec, create_cluster
    spec = ClusterSpec(run_id="clkkill", run_dir=Path(sys.argv[1]), nodes=1, max_nodes=1, fake_clock=True,
                       command=["python", "-c", "import time; time.sleep(600)"])
    with create_cluster("docker", spec) as c:
        c.start_training()
        c.skew_clock("node-0", "+30 x1", 30.0)
        print("READY", c.project, flush=True)
        time.sleep(600)
""")


def test_a_sigkilled_harness_mid_fault_leaves_no_preloaded_process_after_clean(tmp_path, image, monkeypatch):
    monkeypatch.setenv("CHAOSBENCH_NODE_IMAGE", image)
    p, project = harness_mid_fault(HARNESS, tmp_path)
    node0 = f"{project}-node-0"
    pid = docker("inspect", "-f", "{{.State.Pid}}", node0).strip()
    environ = open(f"/proc/{pid}/environ", "rb").read() if os.access(f"/proc/{pid}/environ", os.R_OK) else b""
    assert not environ or b"FAKETIME_TIMESTAMP_FILE" in environ, "the node's process runs without the preload"
    sigkill_then_clean(p, project, node0)   # the node's preloaded processes go with the container
