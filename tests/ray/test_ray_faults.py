"""Ray's faults without a cluster: fill_object_store's parameters refused with file, field and fix, the
fault offered by the Ray backend only (and why not elsewhere), its primitive's handling of the filler
job's output; a partition of a Ray node that cuts it off from the head."""
import subprocess
import sys

import pytest

from chaosbench.cluster import backend_primitives
from chaosbench.cluster.docker.backend import DockerCluster
from chaosbench.cluster.errors import ClusterError, UnsupportedFault
from chaosbench.cluster.ray.backend import RayCluster
from chaosbench.cluster.ray.faults import RayFaults
from chaosbench.faults.capabilities import missing_primitives, support
from chaosbench.scenario import ScenarioError, load_scenario

SCENARIO = """name: fill
cluster: {backend: ray, nodes: 3, elastic: {min_nodes: 2, max_nodes: 3}}
trainer:
  config: trainer/configs/tiny.yaml
  ray: {max_failures: 1, storage: shared}
faults:
  - at: {step: 10}
    fill_object_store: %s
expect: {trains_after_settle: 20}
"""


def load(tmp_path, params: str):
    (tmp_path / "s.yaml").write_text(SCENARIO % params)
    return load_scenario(tmp_path / "s.yaml")


def test_a_fill_by_mb_or_by_fraction_loads_and_holds_thirty_seconds_by_default(tmp_path):
    f = load(tmp_path, "{node: node-1, mb: 240}").faults[0]
    assert f.params == {"node": "node-1", "mb": 240, "fraction": None}
    assert load(tmp_path, "{node: node-2, fraction: 3}").faults[0].params["fraction"] == 3.0
    from chaosbench.faults.ray import FillObjectStore
    assert FillObjectStore.default_duration_s == 30.0 and FillObjectStore.healable


@pytest.mark.parametrize("params, why", [
    ("{node: node-1, mb: 5000}", r"s\.yaml:8: faults\[0\]\.fill_object_store\.mb: .*5000 MiB is more than 1024.*give mb <= 1024"),
    ("{node: node-1, fraction: 10}", r"s\.yaml:8: faults\[0\]\.fill_object_store\.fraction: .*give fraction <= 4"),
    ("{node: node-1, mb: 0}", r"s\.yaml:8: faults\[0\]\.fill_object_store\.mb: .*greater than or equal to 1"),
    ("{node: node-1}", r"s\.yaml:8: faults\[0\]\.fill_object_store: .*give exactly one of mb .* or fraction"),
    ("{node: node-1, mb: 100, fraction: 0.5}", r"faults\[0\]\.fill_object_store: .*give exactly one of mb"),
    ("{node: node-7, mb: 100}", r"s\.yaml:8: faults\[0\]\.fill_object_store\.node: no node 'node-7' in a 3-node "
                                r"cluster; valid: node-0, node-1, node-2, random"),
    ("{node: ray-head, mb: 100}", r"faults\[0\]\.fill_object_store\.node: "),
    ("{node: node-1, mb: true}", r"faults\[0\]\.fill_object_store\.mb: true is a YAML boolean"),
])
def test_bad_parameters_are_refused_with_file_line_field_and_fix(tmp_path, params, why):
    with pytest.raises(ScenarioError, match=why):
        load(tmp_path, params)


def test_only_the_ray_backend_offers_it_and_the_others_say_why():
    prims = backend_primitives()
    assert support("fill_object_store", prims["ray"]) == "yes"
    for backend in set(prims) - {"ray"}:
        assert support("fill_object_store", prims[backend]) == "-", backend

    class Entry:
        id, kind, params = "f0", "fill_object_store", {"node": "node-1", "mb": 100}
    line, = missing_primitives([Entry()], prims["docker"], DockerCluster.unsupported_why, prims)
    assert "only a Ray cluster (--backend ray) has an object store" in line and line.endswith("have them: ray")
    assert "fill_object_store" in RayCluster.implementations() and "release_object_store" in RayCluster.implementations()


class FakeRay(RayFaults):
    """RayFaults over a stand-in for `docker exec -i <head> python -c SRC ...`: a local python that plays
    the filler job's part (its lines, its hold on stdin)."""

    def __init__(self, tmp_path, script: str):
        self.run_dir, self.script, self._nodes = tmp_path, script, ["node-0", "node-1"]

        class Plan:
            ip = staticmethod(lambda node: "10.0.0.11")
            container = staticmethod(lambda name: f"p-{name}")
        self.plan = Plan()

    def _node(self, node):
        if node not in self._nodes:
            raise ClusterError(f"unknown node {node!r}")
        return node


@pytest.fixture
def popen_local(monkeypatch):
    """subprocess.Popen of the filler runs `python -c <the fake's script> <args...>` here instead."""
    real = subprocess.Popen

    def fake(argv, **kw):
        assert argv[:4] == ["docker", "exec", "-i", "p-ray-head"] and argv[4:6] == ["python", "-c"]
        return real([sys.executable, "-c", fake.script, *argv[7:]], **kw)
    monkeypatch.setattr(subprocess, "Popen", fake)
    return fake


FILLER = """import json, sys
ip, mb, fraction, tag = sys.argv[1:5]
print(json.dumps({"tag": tag, "phase": "filled", "on_node": %s, "put_mb": float(mb), "capacity_mb": 80.0,
                  "store": {"used_mb": 80.0, "spilled_mb": float(mb) - 80}}), flush=True)
sys.stdin.read()
print(json.dumps({"tag": tag, "phase": "released", "store": {"used_mb": 0.0}}), flush=True)
"""


def test_the_fill_holds_until_released_and_reports_what_ray_did(tmp_path, popen_local):
    popen_local.script = FILLER % "True"
    c = FakeRay(tmp_path, "")
    got = c.fill_object_store("node-1", 240)
    assert got["put_mb"] == 240.0 and got["store"]["spilled_mb"] == 160.0
    p = c._fillers["node-1"][0]
    assert p.poll() is None   # held: the objects stay while the job's stdin is open
    with pytest.raises(ClusterError, match="already being filled"):
        c.fill_object_store("node-1", 10)
    assert c.release_object_store("node-1") == {"released": {"used_mb": 0.0}}
    assert p.returncode == 0 and not c._fillers
    assert c.release_object_store("node-1") == {"released": None}   # nothing held: nothing to free
    log = (tmp_path / "logs" / "node-1-fill_object_store.log").read_text()
    assert '"phase": "filled"' in log and '"phase": "released"' in log


def test_a_filler_that_lands_elsewhere_or_fails_is_an_error_and_is_ended(tmp_path, popen_local):
    popen_local.script = FILLER % "False"
    c = FakeRay(tmp_path, "")
    with pytest.raises(ClusterError, match="ran on another node"):
        c.fill_object_store("node-1", 100)
    assert not c._fillers
    popen_local.script = ("import json, sys; print(json.dumps({'tag': sys.argv[4], 'error': 'no live Ray node at "
                          "10.0.0.11'})); sys.exit(2)")
    with pytest.raises(ClusterError, match="could not fill its object store: no live Ray node at 10.0.0.11"):
        c.fill_object_store("node-1", 100)
    with pytest.raises(ClusterError, match="unknown node"):
        c.fill_object_store("node-9", 100)
    assert not c._fillers


def test_teardown_frees_a_fill_the_run_left_in_place(tmp_path, popen_local):
    popen_local.script = FILLER % "True"

    class Base:
        def _stop(self):
            return ["stopped"]

    class Cluster(FakeRay, Base):
        pass
    c = Cluster(tmp_path, "")
    c.fill_object_store("node-0", 100)
    p = c._fillers["node-0"][0]
    assert c._stop() == ["stopped"] and p.returncode == 0 and not c._fillers


def test_on_another_backend_the_primitive_raises_with_the_reason(tmp_path):
    from chaosbench.cluster.base import ClusterSpec
    c = DockerCluster(ClusterSpec(run_id="r", run_dir=tmp_path))
    with pytest.raises(UnsupportedFault, match="has an object store"):
        c.fill_object_store("node-0", 10)


def test_a_partition_cuts_a_ray_node_off_from_the_head_unless_peers_are_named(tmp_path):
    import ipaddress

    from chaosbench.cluster.base import ClusterSpec
    from chaosbench.cluster.docker.compose_file import ComposePlan
    c = RayCluster(ClusterSpec(run_id="r", run_dir=tmp_path, nodes=3, min_nodes=2, max_nodes=3,
                               trainer_config="trainer/configs/tiny.yaml"))
    c.plan = ComposePlan(project="cbt", image="img", subnet=ipaddress.ip_network("10.201.3.0/24"), owner="o",
                         events_host_dir=str(tmp_path / "events"))
    c._nodes = ["node-0", "node-1", "node-2"]
    every = c._cut_targets("node-2", None)
    assert "10.201.3.5" in every and c.plan.ip("node-0") in every and c.plan.ip("node-2") not in every
    assert "10.201.3.5" not in c._cut_targets("node-2", ["node-0", "node-1"])
