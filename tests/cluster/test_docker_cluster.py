"""The docker backend end to end: generated compose project, real containers, the reference trainer."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from chaosbench.cluster import ClusterSpec, available_backends, create_cluster

from chaosbench.cluster.node import scripts
from chaosbench.cluster.docker.cli import docker, leftovers, sweep

from .helpers import events, max_step, train_kill_recover, wait_for
from .test_local_cluster import HARNESS, OVERRIDES, RDZV_TIMEOUTS

_why = available_backends()["docker"]
pytestmark = [pytest.mark.docker, pytest.mark.timeout(900),
              pytest.mark.skipif(_why is not None, reason=f"docker backend unusable: {_why}")]


def _stopped_in_node(project: str) -> set[str]:
    """pids of node-0's container in state T (stopped)."""
    script = ("import os\nfor p in filter(str.isdigit, os.listdir('/proc')):\n"
              "    try: s = open(f'/proc/{p}/stat').read()\n    except OSError: continue\n"
              "    if s.rsplit(')', 1)[1].split()[0] == 'T': print(p)\n")
    return set(docker("exec", f"{project}-node-0", "python", "-c", script).split())


@pytest.fixture(scope="module")
def image():
    from chaosbench.cluster.docker.images import node_image
    return node_image()   # reuses the tag when nothing changed (seconds)


@pytest.mark.parametrize("s3", [False, True], ids=["memory-nvme", "with-s3"])
def test_docker_train_kill_recover_teardown(tmp_path, image, s3):
    spec = ClusterSpec(run_id="dock", run_dir=tmp_path, nodes=2, min_nodes=1, max_nodes=2,
                       rendezvous="c10d", trainer_overrides={**OVERRIDES, "checkpoint.s3.enabled": s3},
                       nvme_size_mb=64, rdzv_timeouts=RDZV_TIMEOUTS)
    cluster = create_cluster("docker", spec, image=image)
    with cluster:
        project = cluster.project
        # up() starts the nodes too; they wait for the go file (launch.gated), nothing trains yet
        assert set(leftovers(project)["containers"]) == {f"{project}-{s}" for s in
                                                         ("etcd", "s3", "toxiproxy", "node-0", "node-1")}
        assert not list(cluster.events_dir.glob("*.jsonl"))
        # the NVMe mount is size-limited and really fills
        cluster.start_training()
        cluster.fill_nvme("node-1")
        r = subprocess.run(["docker", "exec", f"{project}-node-1", "dd", "if=/dev/zero", "of=/nvme/more",
                            "bs=1M", "count=1"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "No space left" in r.stderr
        cluster.free_nvme("node-1")
        # iptables works inside the node (NET_ADMIN): a silent partition, then heal
        cluster.partition("node-1", peers=["s3"])
        rules = docker("exec", f"{project}-node-1", "iptables", "-S", "CHAOSBENCH")
        assert f"-d {cluster.plan.ip('s3')}/32 -j DROP" in rules
        cluster.heal_network("node-1")
        assert "CHAOSBENCH" not in docker("exec", f"{project}-node-1", "iptables", "-S")
        # freeze one worker (warm-started: the fork that trains, and its client), never the agent
        wait_for("a worker on node-0", lambda: max_step(events(cluster.events_dir), node="node-0") > 0, 240)
        listed = cluster._run_in_node("node-0", scripts.PROCS, "workers", "0", "0").split()
        cluster.freeze_worker("node-0", 0)
        stopped = _stopped_in_node(project)
        assert len(listed) >= 2 and stopped == set(listed), (listed, stopped)   # agent, server run on
        cluster.thaw_worker("node-0", 0)
        assert not _stopped_in_node(project)
        # a straggler: a CFS quota on the container (cgroup v1 here), lifted by unthrottle
        cpus = int(docker("info", "--format", "{{.NCPU}}"))
        cluster.throttle_node("node-0", 0.5)
        assert int(docker("inspect", "-f", "{{.HostConfig.CpuQuota}}", f"{project}-node-0")) == 50_000 * cpus
        cluster.unthrottle_node("node-0")
        assert int(docker("inspect", "-f", "{{.HostConfig.CpuQuota}}", f"{project}-node-0")) <= 0
        out = train_kill_recover(cluster)
        assert cluster.node_status("node-1") == "exited:137"
        first = out["first_alone"]
        assert first["restart_count"] >= 1
        loaded = [e for e in out["events"] if e["event"] == "checkpoint_loaded" and e["node"] == "node-0"
                  and e["ts"] > out["killed_at"]]
        assert loaded and first["step"] > loaded[-1]["step"] > 0
        # preemption: SIGTERM to every process of the node now, SIGKILL of the rest after the grace
        cluster.preempt_node("node-0", grace_s=2)
        wait_for("node-0 gone after its preemption", lambda: cluster.node_status("node-0").startswith("exited"), 30)
    assert leftovers(project) == {"containers": [], "networks": [], "volumes": []}
    assert (tmp_path / "logs" / "node-0.log").stat().st_size > 0 and (tmp_path / "exits.json").exists()
    # every container's log and exit, collected in parallel: the killed node-1 and preempted node-0 as such
    exits = json.loads((tmp_path / "exits.json").read_text())
    assert set(exits) == {"etcd", "toxiproxy", "s3", "node-0", "node-1"}, exits
    assert exits["node-1"]["exit_code"] == 137 and exits["etcd"]["status"] == "running"
    assert all((tmp_path / "logs" / f"{n}.log").is_file() for n in exits)
    assert not os.path.exists(f"/var/tmp/chaosbench-disks/{project}")


def _start_harness(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", HARNESS, str(tmp_path), "docker"], stdout=subprocess.PIPE,
                         text=True, start_new_session=True)
    line = p.stdout.readline()
    assert line.startswith("READY"), f"harness did not come up: {line!r}"
    return p, line.split()[1]


def test_docker_ctrl_c_and_crash_leave_nothing(tmp_path, image, monkeypatch):
    monkeypatch.setenv("CHAOSBENCH_NODE_IMAGE", image)   # inherited by the harness subprocess
    p, project = _start_harness(tmp_path / "a")
    assert len(leftovers(project)["containers"]) == 4
    p.send_signal(signal.SIGINT)          # Ctrl-C: the harness tears down itself
    p.wait(timeout=120)
    assert leftovers(project) == {"containers": [], "networks": [], "volumes": []}
    p, project = _start_harness(tmp_path / "b")
    os.kill(p.pid, signal.SIGKILL)        # a crashed harness runs no cleanup at all ...
    p.wait(timeout=10)
    assert leftovers(project)["containers"], "expected leftovers from the killed harness"
    assert project in sweep()             # ... the next start's sweep removes them
    assert leftovers(project) == {"containers": [], "networks": [], "volumes": []}


def test_a_users_image_is_checked_before_the_cluster_starts(image):
    """trainer.image: missing, or without torch, is named with the fix instead of every node exiting 1."""
    from chaosbench.cluster.errors import ClusterError
    from chaosbench.cluster.docker.backend import check_trainer_image
    from chaosbench.cluster.docker.images import build_base
    with pytest.raises(ClusterError, match=r"trainer.image 'me/absent:1' is not among the local docker images"):
        check_trainer_image("me/absent:1", "c10d")
    with pytest.raises(ClusterError, match=r"cannot import torch, etcd3 \(ModuleNotFoundError.*'torch'\).*FROM"):
        check_trainer_image(build_base(), "etcd-v3")     # python3 without torch
    check_trainer_image(image, "etcd-v3")                 # torch and etcd3: passes


def test_a_standby_boots_outside_the_rendezvous_until_released(tmp_path, image):
    """Cluster.add_standby: the node's container runs (torch imported) while training goes on at
    world 2 without it; release_standby lets it join the next round (world 3). A node added with
    add_node trained ~6 s after it was added (node_join): 12 s without a join shows the hold."""
    from chaosbench.cluster.errors import ClusterError
    spec = ClusterSpec(run_id="stby", run_dir=tmp_path, nodes=2, min_nodes=2, max_nodes=3,
                       rendezvous="etcd-v3", trainer_overrides=OVERRIDES, nvme_size_mb=64,
                       rdzv_timeouts=RDZV_TIMEOUTS)
    with create_cluster("docker", spec, image=image) as cluster:
        cluster.start_training()
        wait_for("step 10 at world 2", lambda: max_step(events(cluster.events_dir), world_size=2) >= 10, 240)
        node = cluster.add_standby()
        assert node == "node-2" and cluster.node_status(node) == "running"
        shares = lambda: docker("inspect", "-f", "{{.HostConfig.CpuShares}}", cluster.plan.container(node)).strip()
        assert shares() == "2"             # it boots from what the training leaves idle
        held_from = max_step(events(cluster.events_dir))
        time.sleep(12)
        evs = events(cluster.events_dir)
        assert not [e for e in evs if e.get("node") == node], "the standby joined before its release"
        assert max_step(evs, world_size=2) > held_from + 20          # the others trained on, undisturbed
        assert max_step(evs, world_size=3) == 0
        cluster.release_standby(node)
        assert shares() == "1024"          # released: an equal share
        wait_for("the released standby training at world 3",
                 lambda: max_step(events(cluster.events_dir), world_size=3, node=node) > 0, 120)
        with pytest.raises(ClusterError, match="not a held standby"):
            cluster.release_standby(node)
        extra = cluster.add_standby()      # three nodes train = max_nodes: a fourth must wait for a loss
        with pytest.raises(ClusterError, match=r"release_standby: 3 nodes running = max_nodes=3 .*once a node is gone"):
            cluster.release_standby(extra)
        assert extra not in cluster.node_names() and cluster.node_status(extra) == "running"   # still held
