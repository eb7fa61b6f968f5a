"""The Ray backend without a cluster: its compose document, the driver it runs, its capabilities and the
scenario input it refuses up front."""
import ipaddress
from pathlib import Path

import pytest

from chaosbench.cluster import backend_primitives, create_cluster
from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.docker.compose_file import ComposePlan, render
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.ray.backend import RayCluster
from chaosbench.cluster.ray.compose import HEAD, OBJECT_STORE_BYTES, with_ray
from chaosbench.cluster.ray.job import RAY_REQUIREMENT, RayJob, driver_argv
from chaosbench.scenario import ScenarioError, load_scenario


def spec(tmp_path, **kw) -> ClusterSpec:
    return ClusterSpec(run_id="r1", run_dir=tmp_path, nodes=3, min_nodes=2, max_nodes=3,
                       trainer_config="trainer/configs/tiny.yaml", **kw)


def doc(tmp_path, s: ClusterSpec) -> tuple[dict, ComposePlan]:
    plan = ComposePlan(project="cbtest", image="img", subnet=ipaddress.ip_network("10.201.3.0/24"), owner="o",
                       events_host_dir=str(tmp_path / "events"))
    nodes = ["node-0", "node-1", "node-2"]
    return with_ray(render(plan, s, nodes), plan, nodes, 1, None), plan


def test_nodes_are_ray_workers_and_the_head_has_no_cpus(tmp_path):
    d, plan = doc(tmp_path, spec(tmp_path))
    node = d["services"]["node-1"]
    cmd = " ".join(node["command"])
    assert "ray start --address=10.201.3.5:6379" in cmd and "--num-cpus=1" in cmd
    assert f"--object-store-memory={OBJECT_STORE_BYTES}" in cmd and "--include-dashboard" not in cmd
    head = d["services"][HEAD]
    assert head["networks"]["net"]["ipv4_address"] == "10.201.3.5"
    assert "--head" in head["command"] and "--num-cpus=0" in head["command"]
    assert head["labels"]["io.chaosbench.project"] == "cbtest"   # swept with the run, by owner token
    assert not any("/nvme" in v for v in head["volumes"]) and "tmpfs" not in head
    assert node["environment"]["CHAOSBENCH_NODE"] == "node-1" and head["environment"]["CHAOSBENCH_NODE"] == HEAD


def test_the_reference_loop_gets_the_trainer_config_and_the_scaling_range(tmp_path):
    s = spec(tmp_path, trainer_overrides={"training.max_steps": 50}, ray={"max_failures": 3, "storage": "s3"})
    argv = driver_argv(s, RayJob.of(s), "/st")
    joined = " ".join(argv)
    assert "--workers 2:3" in joined and "--max-failures 3" in joined and "--storage s3://chaosbench/ray/r1" in joined
    assert "--set training.max_steps=50" in joined and "--pg-timeout-s 30" in joined


def test_a_user_module_names_the_loop(tmp_path):
    s = spec(tmp_path, job_argv=["-m", "train_loop"], ray={"function": "train_loop_no_resume", "config": {"steps": 9}},
             progress_regex=r"step (?P<step>\d+)")
    argv = driver_argv(s, RayJob.of(s), "/st")
    assert argv[argv.index("--loop") + 1] == "train_loop:train_loop_no_resume"
    assert argv[argv.index("--loop-config") + 1] == '{"steps": 9}' and "--config" not in argv
    assert argv[argv.index("--storage") + 1] == "/st/r1"


def test_ray_is_the_jobs_requirement_and_raw_commands_are_refused(tmp_path):
    assert RAY_REQUIREMENT in RayCluster(spec(tmp_path)).spec.requirements
    with pytest.raises(ClusterError, match="trainer.command"):
        RayCluster(spec(tmp_path, command=["python", "x.py"]))
    with pytest.raises(ClusterError, match="--backend ray"):
        create_cluster("docker", spec(tmp_path, ray={"max_failures": 1}))


def test_capabilities_say_what_ray_can_and_cannot_do():
    ray = backend_primitives()["ray"]
    assert {"kill_node", "kill_worker", "freeze_worker", "kill_raylet", "kill_head", "partition"} <= ray
    assert "fault_disk" not in ray and "kill_raylet" not in backend_primitives()["docker"]
    assert "ray start" in RayCluster.unsupported_why["fault_disk"]


BASE = """name: r
cluster: {backend: %s, nodes: 2}
trainer:
  ray: {max_failures: 1, storage: %s}
faults: []
expect: {reaches_step: 20}
"""


def load(tmp_path, text: str):
    (tmp_path / "s.yaml").write_text(text)
    return load_scenario(tmp_path / "s.yaml")


def test_trainer_ray_on_another_backend_is_refused_with_its_line(tmp_path):
    with pytest.raises(ScenarioError, match=r"s\.yaml:4: trainer\.ray: .*set cluster\.backend: ray"):
        load(tmp_path, BASE % ("docker", "shared"))


def test_a_storage_path_that_is_neither_shared_s3_nor_absolute_is_refused(tmp_path):
    with pytest.raises(ScenarioError, match=r"s\.yaml:4: trainer\.ray\.storage"):
        load(tmp_path, BASE % ("ray", "relative/dir"))
    assert load(tmp_path, BASE % ("ray", "/nvme/ray")).trainer.ray.storage == "/nvme/ray"
