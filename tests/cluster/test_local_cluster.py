"""The local backend end to end: real etcd, proxy, moto S3 and torchrun with the reference trainer."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from chaosbench.cluster import ClusterSpec, UnsupportedFault, create_cluster, proctree
from chaosbench.cluster.local.backend import CLUSTER_ENV, sweep
from chaosbench.cluster.owner import OWNER_ENV

from .helpers import train_kill_recover, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
# Generous collective timeouts: CI machines are small and shared; these tests check the cluster's
# mechanics (kill, recovery, teardown), not detection speed.
OVERRIDES = {"training.max_steps": 100000, "training.step_sleep_s": 0.05,
             "checkpoint.memory_snapshot_interval": 5, "checkpoint.checkpoint_interval": 10,
             "elastic.pg_timeout_s": 180.0, "elastic.health_check_timeout_s": 60.0}
# the scenarios' fast rendezvous (torch's defaults: keep-alive 5 s x 3, last call 30 s): 13 s a run, not 55
RDZV_TIMEOUTS = {"keep_alive_interval": 1, "keep_alive_max_attempt": 3, "last_call_timeout": 2}


def _alive(markers):
    return [p for p in proctree.find(markers) if not proctree.zombie(p)]


@pytest.mark.parametrize("rdzv", ["c10d"])
def test_local_train_kill_recover_teardown(tmp_path, rdzv):
    spec = ClusterSpec(run_id=f"loc{rdzv}".replace("-", ""), run_dir=tmp_path, nodes=2, min_nodes=1,
                       max_nodes=2, rendezvous=rdzv, trainer_overrides=OVERRIDES,
                       rdzv_timeouts=RDZV_TIMEOUTS)
    cluster = create_cluster("local", spec)
    with cluster:
        assert cluster.node_names() == ["node-0", "node-1"]
        with pytest.raises(UnsupportedFault, match="partition"):
            cluster.partition("node-0")
        out = train_kill_recover(cluster)
        first = out["first_alone"]
        # recovery proven by the events: a new incarnation, world size 1, restored state
        assert first["restart_count"] >= 1
        loaded = [e for e in out["events"] if e["event"] == "checkpoint_loaded" and e["node"] == "node-0"
                  and e["ts"] > out["killed_at"]]
        assert loaded and loaded[-1]["step"] > 0, "the survivor did not restore a checkpoint"
        assert first["step"] > loaded[-1]["step"]
        etcd_pid = cluster.services.etcd.proc.pid
        project = cluster.project
    # nothing left behind: node processes, services, shm, run logs collected
    assert _alive({CLUSTER_ENV: project}) == []
    assert not os.path.exists(f"/proc/{etcd_pid}") or proctree.zombie(etcd_pid)
    assert not (cluster.shm_dir("node-0")).exists()
    assert (tmp_path / "exits.json").exists() and (tmp_path / "logs" / "node-0.log").stat().st_size > 0


HARNESS = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from chaosbench.cluster import ClusterSpec, create_cluster
    py = sys.executable if sys.argv[2] == "local" else "python"   # the node's own python
    spec = ClusterSpec(run_id="orphan", run_dir=Path(sys.argv[1]), nodes=1, max_nodes=1,
                       command=[py, "-c", "import time; time.sleep(300)"])
    with create_cluster(sys.argv[2], spec) as c:
        c.start_training()
        print("READY", c.project, flush=True)
        time.sleep(300)
""")


def _start_harness(tmp_path, backend):
    p = subprocess.Popen([sys.executable, "-c", HARNESS, str(tmp_path), backend], stdout=subprocess.PIPE,
                         text=True, start_new_session=True)
    line = p.stdout.readline()
    assert line.startswith("READY"), f"harness did not come up: {line!r}"
    return p, line.split()[1]


def test_local_ctrl_c_and_crash_leave_nothing(tmp_path):
    # Ctrl-C: the harness tears down itself
    p, project = _start_harness(tmp_path / "a", "local")
    wait_for("node process", lambda: _alive({CLUSTER_ENV: project}), 30)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    assert _alive({CLUSTER_ENV: project}) == []
    # SIGKILLed harness: its processes are orphans until the next sweep removes them
    p, project = _start_harness(tmp_path / "b", "local")
    wait_for("node process", lambda: _alive({CLUSTER_ENV: project}), 30)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    orphans = [pid for pid, tok in proctree.find_with_key(OWNER_ENV).items()
               if tok.split(":")[1] == str(p.pid)]
    assert orphans, "expected the killed harness to leave orphans (etcd, services, node)"
    sweep()
    wait_for("orphans gone", lambda: not [q for q in orphans if os.path.exists(f"/proc/{q}")
                                          and not proctree.zombie(q)], 15)
