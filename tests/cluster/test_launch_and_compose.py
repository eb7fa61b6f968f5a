"""Unit tests: what each node runs, and the generated compose project."""
import ipaddress

import pytest
import yaml

from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.docker.compose_file import ComposePlan, dump, render, render_gpu_override
from chaosbench.cluster.launch import node_plan, unprepared, validate


def _spec(tmp_path, **kw):
    return ClusterSpec(run_id="r1", run_dir=tmp_path, **kw)


def _plan(spec, node="node-1"):
    return node_plan(spec, node, python="py", rdzv_endpoint="h:1", s3_url="http://p:5000",
                     events_dir="/ev", nvme_dir="/nvme", memory_dir="/shm")


def test_torchrun_argv_carries_spec_and_overrides(tmp_path):
    spec = _spec(tmp_path, nodes=3, min_nodes=2, max_nodes=4, procs_per_node=2, rendezvous="etcd-v3",
                 max_restarts=7, trainer_overrides={"training.max_steps": 50, "checkpoint.s3.enabled": False},
                 rdzv_timeouts={"join_timeout": 30}, warm_start=False)
    p = _plan(spec)
    assert p.argv[:3] == ["py", "-m", "torch.distributed.run"]
    assert p.argv[p.argv.index("-m", 3):][:2] == ["-m", "trainer.train"]
    for arg in ("--nnodes=2:4", "--nproc-per-node=2", "--rdzv-backend=etcd-v3", "--rdzv-endpoint=h:1",
                "--rdzv-id=r1", "--max-restarts=7", "--rdzv-conf=join_timeout=30"):
        assert arg in p.argv
    sets = [p.argv[i + 1] for i, a in enumerate(p.argv) if a == "--set"]
    assert "checkpoint.nvme_dir=/nvme" in sets and "checkpoint.memory_dir=/shm" in sets
    assert "checkpoint.s3.endpoint_url=http://p:5000" in sets
    assert "training.max_steps=50" in sets
    assert "checkpoint.s3.enabled=false" in sets and "checkpoint.s3.enabled=true" not in sets  # user wins
    assert p.env["CHAOSBENCH_NODE"] == "node-1" and p.env["CHAOSBENCH_RUN_ID"] == "r1"
    assert p.env["CHAOSBENCH_EVENTS_DIR"] == "/ev" and p.env["AWS_ACCESS_KEY_ID"]


def test_warm_start_wraps_the_agent_and_the_worker(tmp_path):
    p = _plan(_spec(tmp_path))     # warm start is the default for the reference trainer
    assert p.argv[:5] == ["py", "-m", "trainer.warm_start", "node", "--"]
    assert p.argv[5:8] == ["py", "-m", "torch.distributed.run"]
    worker = p.argv[p.argv.index("trainer.warm_start", 5) - 1:]
    assert worker[:5] == ["-m", "trainer.warm_start", "run", "-m", "trainer.train"]


def test_c10d_store_host_is_node0_only(tmp_path):
    spec = _spec(tmp_path)
    assert any("is_host=true" in a for a in _plan(spec, "node-0").argv)
    assert any("is_host=false" in a for a in _plan(spec, "node-1").argv)


def test_own_command_replaces_torchrun(tmp_path):
    spec = _spec(tmp_path, command=["python", "my_trainer.py"], env={"X": "1"})
    p = _plan(spec)
    # run as written, under the node watcher that records what it sees of a job without events
    assert p.argv[-3:] == ["--", "python", "my_trainer.py"] and p.env["X"] == "1"
    assert unprepared(p.argv)[1:3] == ["-m", "chaosbench.observer.node_watch"]


@pytest.mark.parametrize("kw,needle", [({"rendezvous": "zk"}, "rendezvous='zk'"),
                                       ({"min_nodes": 3, "max_nodes": 2}, "min_nodes=3"),
                                       ({"nvme_size_mb": 1}, "nvme_size_mb")])
def test_bad_spec_is_named(tmp_path, kw, needle):
    with pytest.raises(ClusterError, match=needle):
        validate(_spec(tmp_path, **kw))


def _compose_plan(tmp_path, **kw):
    return ComposePlan(project="cbtestabc", image="img:1", subnet=ipaddress.ip_network("10.222.5.0/24"),
                       owner="h:1:2", events_host_dir=str(tmp_path / "events"), **kw)


def test_compose_project_is_isolated_and_labelled(tmp_path):
    spec = _spec(tmp_path, nodes=2, shm_size_mb=128, nvme_size_mb=64)
    plan = _compose_plan(tmp_path, nvme_host_dirs={"node-0": "/disks/n0", "node-1": None})
    doc = yaml.safe_load(dump(render(plan, spec, ["node-0", "node-1"])))
    svcs = doc["services"]
    assert set(svcs) == {"etcd", "s3", "toxiproxy", "node-0", "node-1"}
    ips = {s["networks"]["net"]["ipv4_address"] for s in svcs.values()}
    assert len(ips) == 5 and all(ipaddress.ip_address(i) in plan.subnet for i in ips)
    for name, s in svcs.items():
        assert s["container_name"] == f"cbtestabc-{name}"
        assert s["labels"]["io.chaosbench.project"] == "cbtestabc" and "ports" not in s
    assert doc["networks"]["net"]["labels"]["io.chaosbench.owner"] == "h:1:2"
    n0, n1 = svcs["node-0"], svcs["node-1"]
    assert "/disks/n0:/nvme" in n0["volumes"] and "tmpfs" not in n0
    assert all(any(v.endswith(":/opt/chaosbench:ro") for v in s["volumes"]) for s in svcs.values())
    assert n1["tmpfs"] == ["/nvme:size=64m"]
    # tmpfs + shm count against the memory limit, so the limit must exceed both
    assert int(n1["mem_limit"][:-1]) > 64 + 128
    assert n0["cap_add"] == ["NET_ADMIN"] and n0["shm_size"] == "128m"
    # trainers reach etcd and S3 through the proxy
    assert f"checkpoint.s3.endpoint_url=http://{plan.ip('toxiproxy')}:5000" in n0["command"]


def test_etcd_rendezvous_goes_through_proxy(tmp_path):
    spec = _spec(tmp_path, rendezvous="etcd")
    plan = _compose_plan(tmp_path)
    node = render(plan, spec, ["node-0"])["services"]["node-0"]
    assert f"--rdzv-endpoint={plan.ip('toxiproxy')}:2379" in node["command"]


def test_gpu_override_reserves_gpus_for_every_node(tmp_path):
    doc = yaml.safe_load(dump(render_gpu_override(_compose_plan(tmp_path), ["node-0", "node-1"])))
    assert set(doc) == {"services"} and set(doc["services"]) == {"node-0", "node-1"}
    for n in ("node-0", "node-1"):
        svc = doc["services"][n]
        assert set(svc) == {"deploy", "environment"}
        # the compose spec's device reservation: capabilities required; count an int or "all",
        # never together with device_ids; docker's GPU request is driver nvidia + capability gpu
        (dev,) = svc["deploy"]["resources"]["reservations"]["devices"]
        assert dev == {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}
        env = svc["environment"]
        assert all(isinstance(v, str) for v in env.values()) and env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert env["NCCL_IB_DISABLE"] == "1"


def test_keep_alive_attempts_below_three_are_refused(tmp_path):
    with pytest.raises(ClusterError, match="keep_alive_max_attempt=2: must be >= 3 with etcd-v3"):
        validate(_spec(tmp_path, rendezvous="etcd-v3", rdzv_timeouts={"keep_alive_max_attempt": 2}))
    validate(_spec(tmp_path, rendezvous="etcd", rdzv_timeouts={"keep_alive_max_attempt": 2}))  # v2 ignores it
    validate(_spec(tmp_path, rdzv_timeouts={"keep_alive_max_attempt": 3}))


def test_venv_volume_is_mounted_read_only_on_our_containers_only(tmp_path):
    spec = _spec(tmp_path, nodes=1)
    doc = render(_compose_plan(tmp_path, venv_volume="chaosbench-venv-abc"), spec, ["node-0"])
    assert doc["volumes"] == {"chaosbench-venv-abc": {"external": True}}   # never created/removed by the run
    assert all("chaosbench-venv-abc:/opt/venv:ro" in s["volumes"] for s in doc["services"].values())
    # a user's trainer image has its own python: nothing of ours over it
    user = render(_compose_plan(tmp_path, venv_volume="chaosbench-venv-abc"),
                  _spec(tmp_path, nodes=1, trainer_image="me/trainer:1"), ["node-0"])
    assert not any(v.endswith(":/opt/venv:ro") for v in user["services"]["node-0"]["volumes"])
    assert "volumes" not in render(_compose_plan(tmp_path), spec, ["node-0"])
