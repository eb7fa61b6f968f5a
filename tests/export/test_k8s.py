"""The Kubernetes export, validated against the official client's API models (kubernetes.client)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes.client import ApiClient

from chaosbench.export.k8s import ExportError, load_scenario, render

REPO = Path(__file__).resolve().parents[2]
MODELS = {("v1", "Service"): "V1Service", ("v1", "ConfigMap"): "V1ConfigMap",
          ("batch/v1", "Job"): "V1Job", ("apps/v1", "Deployment"): "V1Deployment"}


class _Resp:
    def __init__(self, obj):
        self.data = json.dumps(obj)


def to_model(obj: dict):
    """Deserialize like the client does for API responses, then serialize back: a field the API does not
    know (a typo) is dropped by deserialization, so the round trip must give the same object."""
    client = ApiClient()
    model = client.deserialize(_Resp(obj), MODELS[(obj["apiVersion"], obj["kind"])])
    assert client.sanitize_for_serialization(model) == obj, f"{obj['kind']} has fields the API does not know"
    return model


def scenario(tmp_path, **cluster):
    base = yaml.safe_load((REPO / "scenarios/node_loss.yaml").read_text())
    base["cluster"].update(cluster)
    base["trainer"]["config"] = str(REPO / "trainer/configs/tiny.yaml")
    p = tmp_path / "sc.yaml"
    p.write_text(yaml.safe_dump(base))
    return load_scenario(str(p))


def by_kind(objs):
    return {(o["kind"], o["metadata"]["name"]): to_model(o) for o in objs}


def env_of(container):
    return {e.name: e for e in container.env}


def test_c10d_scenario_valid_models(tmp_path):
    objs = render(scenario(tmp_path, rendezvous="c10d", rdzv_timeouts={"join_timeout": 60, "last_call_timeout": 1}))
    m = by_kind(objs)
    svc = m[("Service", "node-loss-nodes")]
    assert svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses
    assert {p.port for p in svc.spec.ports} == {29400, 29500}
    job = m[("Job", "node-loss-nodes")]
    assert job.spec.completion_mode == "Indexed" and job.spec.completions == 3 == job.spec.parallelism
    pod = job.spec.template.spec
    assert pod.subdomain == svc.metadata.name
    assert svc.spec.selector.items() <= job.spec.template.metadata.labels.items()
    c = pod.containers[0]
    env = env_of(c)
    assert env["NODE_RANK"].value_from.field_ref.field_path == \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert env["CHAOSBENCH_NODE"].value == "node-$(NODE_RANK)"
    assert env["GLOO_SOCKET_IFNAME"].value == "eth0" and env["NCCL_SOCKET_IFNAME"].value == "eth0"
    assert env["PET_RDZV_CONF"].value == "join_timeout=60,last_call_timeout=1"
    assert "--nnodes=2:3" in c.command and "--rdzv-backend=c10d" in c.command
    # warm start, as the cluster backends run it: the node server first, workers forked from it
    assert c.command[:5] == ["python", "-m", "trainer.warm_start", "node", "--"]
    assert c.command[c.command.index("run") - 2:c.command.index("run") + 3] == \
        ["-m", "trainer.warm_start", "run", "-m", "trainer.train"]
    # node 0 of the Indexed Job is <job>-0 under the headless service: the c10d store's address
    assert f"--rdzv-endpoint={job.metadata.name}-0.{svc.metadata.name}:29400" in c.command
    vols = {v.name: v for v in pod.volumes}
    assert vols["shm"].empty_dir.medium == "Memory" and vols["shm"].empty_dir.size_limit == "512Mi"
    assert {m.name: m.mount_path for m in c.volume_mounts}["shm"] == "/dev/shm"
    assert int(c.resources.limits["memory"][:-2]) > 512          # the tmpfs counts against the pod's memory
    cfg = yaml.safe_load(m[("ConfigMap", "node-loss-config")].data["trainer.yaml"])
    assert cfg["checkpoint"]["memory_snapshot_interval"] == 5    # scenario override applied
    assert cfg["checkpoint"]["nvme_dir"] == "/var/lib/chaosbench/nvme"
    assert ("Deployment", "node-loss-proxy") in m and ("Deployment", "node-loss-etcd") not in m


@pytest.mark.parametrize("backend,v2", [("etcd-v3", False), ("etcd", True)])
def test_etcd_backends_route_through_proxy(tmp_path, backend, v2):
    sc = scenario(tmp_path, rendezvous=backend, gpus_per_node=2)
    sc["trainer"]["overrides"]["checkpoint.s3"] = {"enabled": True, "endpoint_url": "http://10.0.0.5:9000",
                                                   "bucket": "b"}
    m = by_kind(render(sc, namespace="chaos"))
    etcd = m[("Deployment", "node-loss-etcd")].spec.template.spec.containers[0]
    assert ("--enable-v2" in etcd.command) is v2
    assert m[("Service", "node-loss-etcd")].spec.ports[0].port == 2379
    routes = json.loads(m[("ConfigMap", "node-loss-config")].data["proxies.json"])
    assert {r["name"]: r["upstream"] for r in routes} == {"etcd": "node-loss-etcd:2379", "s3": "10.0.0.5:9000"}
    proxy_svc = m[("Service", "node-loss-proxy")]
    assert {p.name: p.port for p in proxy_svc.spec.ports} == {"api": 8474, "etcd": 22379, "s3": 29000}
    c = m[("Job", "node-loss-nodes")].spec.template.spec.containers[0]
    assert "--rdzv-endpoint=node-loss-proxy:22379" in c.command
    assert c.resources.limits["nvidia.com/gpu"] == "2"
    cfg = yaml.safe_load(m[("ConfigMap", "node-loss-config")].data["trainer.yaml"])
    assert cfg["checkpoint"]["s3"]["endpoint_url"] == "http://node-loss-proxy:29000"
    assert all(o.metadata.namespace == "chaos" for o in m.values())


def test_cli_writes_files_and_rejects_bad_input(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = tmp_path / "k8s"
    p = subprocess.run([sys.executable, "-m", "chaosbench.export", "k8s", "scenarios/node_loss.yaml", "-o", str(out)],
                       capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert p.returncode == 0, p.stderr
    files = sorted(out.glob("*.yaml"))
    assert len(files) == len(p.stdout.split()) >= 5
    kinds = [to_model(yaml.safe_load(f.read_text())).kind for f in files]
    assert {"Job", "Service", "ConfigMap", "Deployment"} <= set(kinds)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ncluster: {nodes: 2, rendezvous: zookeeper}\ntrainer: {config: trainer/configs/tiny.yaml}\n")
    p = subprocess.run([sys.executable, "-m", "chaosbench.export", "k8s", str(bad)], capture_output=True, text=True,
                       timeout=60, cwd=REPO, env=env)
    assert p.returncode == 2
    assert f"{bad}: cluster.rendezvous 'zookeeper' invalid; choose c10d, c10d-links, etcd-v3 or etcd" in p.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    p = subprocess.run([sys.executable, "-m", "chaosbench.export", "k8s", "scenarios/node_loss.yaml", "-o",
                        str(blocker / "k8s")], capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert p.returncode == 2 and f"--output {blocker / 'k8s'}: cannot write there" in p.stderr, p.stderr


def test_missing_trainer_config_names_file(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: x\ncluster: {nodes: 1}\ntrainer: {config: nowhere.yaml}\n")
    with pytest.raises(ExportError, match=r"s.yaml: trainer.config 'nowhere.yaml' not found"):
        render(load_scenario(str(p)))


def test_validator_catches_unknown_fields_and_missing_required(tmp_path):
    objs = render(scenario(tmp_path))
    job = next(o for o in objs if o["kind"] == "Job")
    job["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []   # typo of volumeMounts
    with pytest.raises(AssertionError, match="fields the API does not know"):
        to_model(job)
    del job["spec"]["template"]["spec"]["containers"][0]["volumeMount"]
    del job["spec"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(ValueError, match="name"):
        to_model(job)


def test_users_own_script_runs_under_torchrun_in_their_image_with_the_chaosbench_env(tmp_path):
    byo = REPO / "examples/byo_ddp/scenarios/node_loss_instrumented.yaml"
    sc = yaml.safe_load(byo.read_text())
    sc["trainer"]["args"] = ["--ckpt-dir", "$CHAOSBENCH_CHECKPOINT_DIR", "--tag", "${CHAOSBENCH_NODE}-x", "$HOME"]
    sc["trainer"]["image"] = "me/train:1"
    p = tmp_path / "byo.yaml"
    p.write_text(yaml.safe_dump(sc))
    m = by_kind(render(load_scenario(str(p))))
    name = "byo-node-loss-instrumented"
    c = m[("Job", f"{name}-nodes")].spec.template.spec.containers[0]
    assert c.image == "me/train:1" and c.working_dir == "/workspace"
    assert c.command[0] == "torchrun" and "--rdzv-backend=etcd-v3" in c.command
    # the kubelet expands $(VAR) in a command; other $ words are left as written
    assert c.command[c.command.index("train_instrumented.py"):] == \
        ["train_instrumented.py", "--ckpt-dir", "$(CHAOSBENCH_CHECKPOINT_DIR)", "--tag", "$(CHAOSBENCH_NODE)-x", "$HOME"]
    env = env_of(c)
    assert env["CHAOSBENCH_CHECKPOINT_DIR"].value == "/var/lib/chaosbench/nvme/checkpoints"
    assert env["CHAOSBENCH_RDZV_ENDPOINT"].value == f"{name}-proxy:22379" and env["CHAOSBENCH_NNODES"].value == "2:3"
    assert "trainer.yaml" not in m[("ConfigMap", f"{name}-config")].data   # no reference trainer config
    # the user's image need not hold chaosbench: the proxy runs from chaosbench's image
    assert m[("Deployment", f"{name}-proxy")].spec.template.spec.containers[0].image == "chaosbench/trainer:latest"


def test_a_library_scenario_exports_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)             # a user outside the checkout: trainer/configs/... is chaosbench's own
    objs = render(load_scenario(str(REPO / "scenarios/checkpoint_corruption.yaml")))
    assert any(o["kind"] == "Job" for o in objs)
