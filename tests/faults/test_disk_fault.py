"""disk_fault and lose_unsynced_writes: their parameters (by field, with file:line from the loader), the
calls and records they make, where the layer is mounted (ClusterSpec.disk_layers, the compose file),
and the refusal with its reason on backends without the layer."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.docker.compose_file import with_disk_layer
from chaosbench.cluster.local.backend import LocalCluster
from chaosbench.cluster.slurm.backend import SlurmCluster
from chaosbench.faults import validate_params
from chaosbench.faults.capabilities import missing_primitives
from chaosbench.faults.disks import disk_layers
from chaosbench.scenario import ScenarioError, load_scenario
from tests.faults.recording import RecordingCluster, make_fault

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("params, field", [
    ({"op": "write", "errno": "EIO", "probability": 0}, "probability"),
    ({"op": "write", "errno": "EIO", "probability": 1.5}, "probability"),
    ({"op": "write", "errno": "EAGAIN"}, "errno"),
    ({"op": "mmap", "errno": "EIO"}, "op"),
    ({"tier": "ssd", "op": "write", "errno": "EIO"}, "tier"),
    ({"op": "read", "latency_ms": -5}, "latency_ms"),
    ({"bitflip_on_read": "oldest"}, "bitflip_on_read"),
    ({"node": "etcd", "op": "write", "errno": "EIO"}, "node"),
])
def test_bad_params_are_refused_by_field(params, field):
    with pytest.raises(ValidationError) as ei:
        validate_params("disk_fault", params)
    assert [e["loc"][0] for e in ei.value.errors()] == [field]


@pytest.mark.parametrize("params, says", [
    ({}, "give at least one effect"),
    ({"errno": "EIO"}, "need op"),
    ({"latency_ms": 50}, "need op"),
    ({"op": "fsync", "bitflip_on_read": "all"}, "does nothing"),
])
def test_a_fault_that_does_nothing_or_hits_no_op_is_refused(params, says):
    with pytest.raises(ValidationError, match=says):
        validate_params("disk_fault", params)


def test_a_scenario_names_file_line_and_field_of_each_bad_parameter(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    path = tmp_path / "s.yaml"
    faults = ["disk_fault: {node: node-1, op: write, errno: EIO, probability: 2}",
              "disk_fault: {node: node-1, op: write, errno: EBADF}",
              "kill_node: {node: node-1, lose_unsynced_writes: maybe}"]
    path.write_text("name: s\ncluster: {nodes: 2}\nfaults:\n"
                    + "".join(f"  - at: {{step: {5 + i}}}\n    {f}\n" for i, f in enumerate(faults))
                    + "expect: {reaches_step: 20}\n")
    with pytest.raises(ScenarioError) as ei:
        load_scenario(path)
    found = {f: [p for p in ei.value.problems if f in p]
             for f in ("faults[0].disk_fault.probability", "faults[1].disk_fault.errno",
                       "faults[2].kill_node.lose_unsynced_writes")}
    assert all(len(v) == 1 and v[0].startswith(f"{path}:") for v in found.values()), ei.value.problems


def test_inject_sets_the_layers_fault_and_heal_records_what_it_did(tmp_path):
    cluster = RecordingCluster(tmp_path)
    cluster._answer = lambda name, args: {"injected": {"write": 3}, "delayed": 0, "bitflips": 0} \
        if name == "heal_disk" else None
    fault = make_fault("disk_fault", {"node": "node-1", "op": "write", "errno": "EIO", "probability": 0.5},
                       cluster, tmp_path / "faults.jsonl")
    fault.inject()
    fault.heal()
    assert cluster.calls == [("fault_disk", ("node-1", "nvme", {"op": "write", "errno": "EIO", "probability": 0.5})),
                             ("heal_disk", ("node-1", "nvme"))]
    inject, heal = [json.loads(line) for line in (tmp_path / "faults.jsonl").read_text().splitlines()]
    assert inject["params"]["mechanism"] == heal["params"]["mechanism"] == "fuse passthrough (mfusepy)"
    assert heal["params"]["counts"] == {"injected": {"write": 3}, "delayed": 0, "bitflips": 0}


def test_bitflip_newest_names_the_newest_checkpoints_data_file(tmp_path):
    cluster = RecordingCluster(tmp_path)   # its nvme_dir holds step-10/state.pt
    fault = make_fault("disk_fault", {"node": "node-0", "bitflip_on_read": "newest"}, cluster, tmp_path / "f.jsonl")
    fault.inject()
    assert cluster.calls[-1] == ("fault_disk", ("node-0", "nvme", {"bitflip_on_read": ["step-10/state.pt"]}))


def test_lose_unsynced_writes_records_the_bytes_each_node_held(tmp_path):
    cluster = RecordingCluster(tmp_path)
    cluster._answer = lambda name, args: {"pending_bytes": 4096} if name == "disk_stats" else None
    fault = make_fault("kill_node", {"node": "node-1", "lose_unsynced_writes": True}, cluster, tmp_path / "f.jsonl")
    fault.inject()
    assert [c[0] for c in cluster.calls] == ["disk_stats", "kill_node"]   # read before the kill loses it
    rec = json.loads((tmp_path / "f.jsonl").read_text())
    assert rec["params"]["unsynced_bytes_lost"] == {"node-1": 4096} and "writeback" in rec["params"]["mechanism"]


def _entry(kind, **params):
    return SimpleNamespace(kind=kind, params=params)


def test_the_layer_runs_where_the_scenarios_faults_need_it():
    nodes = ["node-0", "node-1", "node-2"]
    assert disk_layers([_entry("kill_node", node="node-1")], nodes) == {}          # a plain kill needs none
    assert disk_layers([_entry("disk_fault", node="node-1", tier="memory", op="read", errno="EIO"),
                        _entry("kill_node", node="node-1", lose_unsynced_writes=True)], nodes) == {
        "node-1": {"tiers": ["memory", "nvme"], "writeback": True}}
    everywhere = disk_layers([_entry("kill_all", lose_unsynced_writes=True)], nodes)
    assert sorted(everywhere) == nodes and all(v == {"tiers": ["nvme"], "writeback": True} for v in everywhere.values())
    assert sorted(disk_layers([_entry("disk_fault", bitflip_on_read="all")], nodes)) == nodes   # node: random


def test_the_compose_file_gives_fuse_to_that_node_only(tmp_path):
    spec = ClusterSpec(run_id="r", run_dir=tmp_path, disk_layers={"node-1": {"tiers": ["nvme"], "writeback": True}})
    extra = {"cap_add": ["NET_ADMIN"]}
    argv = with_disk_layer(spec, "node-1", ["torchrun", "x"], extra)
    assert argv[2:] == ["start", "--writeback", "nvme=/nvme", "--", "torchrun", "x"]
    assert argv[1].endswith("chaosbench/cluster/node/disk_layer.py")
    assert extra["cap_add"] == ["NET_ADMIN", "SYS_ADMIN"] and extra["devices"] == ["/dev/fuse"]
    other = {"cap_add": ["NET_ADMIN"]}
    assert with_disk_layer(spec, "node-0", ["torchrun"], other) == ["torchrun"] and other == {"cap_add": ["NET_ADMIN"]}
    spec.trainer_image = "mine:1"
    with pytest.raises(ClusterError, match="drop trainer.image"):
        with_disk_layer(spec, "node-1", ["torchrun"], {})


def test_local_has_the_layer_exactly_where_fuse_can_be_mounted(monkeypatch):
    from chaosbench.cluster.local import backend as local_backend
    prims = {"fault_disk", "heal_disk", "disk_stats"}
    assert (prims <= LocalCluster.supported_faults) == (local_backend._no_fuse() is None)
    monkeypatch.setattr(local_backend, "_no_fuse", lambda: "needs root, /dev/fuse and fusermount3 on this host")
    assert prims <= LocalCluster.withheld()   # read at each call: a host without FUSE refuses


@pytest.mark.parametrize("backend", [SlurmCluster])
def test_backends_without_the_layer_refuse_up_front_saying_why(backend):
    entries = [SimpleNamespace(id="d", kind="disk_fault", params={"op": "write", "errno": "EIO"}),
               SimpleNamespace(id="k", kind="kill_node", params={"lose_unsynced_writes": True}),
               SimpleNamespace(id="plain", kind="kill_node", params={})]
    missing = missing_primitives(entries, backend.supported_faults | {"kill_node", "start_node"},
                                 backend.unsupported_why)
    assert [m.split(" ")[0] for m in missing] == ["d", "k"]
    assert all("no disk layer" in m and "use the docker backend" in m for m in missing)


def test_the_stories_load():
    for name in ("nvme_eio", "bitflip_on_read", "lost_unsynced_writes"):
        s = load_scenario(ROOT / "scenarios" / f"{name}.yaml")
        assert disk_layers(s.faults, s.node_names()), f"{name} runs no disk layer"
