"""clock_skew: parameters, the control file's content, the preload env and where it is set."""
import pytest
from pydantic import ValidationError

from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.node.clock import (FAKETIME_LIB, SHIM_REL, control_text, node_clock, preload_env,
                                             prepare, write)
from chaosbench.cluster.launch import node_plan
from chaosbench.faults.capabilities import needs_of
from chaosbench.faults.registry import validate_params


def test_exactly_one_of_offset_or_drift_and_never_zero():
    assert validate_params("clock_skew", {"node": "node-1", "offset_s": 30}).offset_s == 30
    assert validate_params("clock_skew", {"drift_ppm": -500}).drift_ppm == -500
    for bad, says in (({}, "exactly one of offset_s"), ({"offset_s": 1, "drift_ppm": 1}, "exactly one of offset_s"),
                      ({"offset_s": 0}, "moves nothing"), ({"drift_ppm": 600_000}, "drift_ppm"),
                      ({"offset_s": 30, "clocks": "wall"}, "clocks"), ({"offset_s": 30, "node": "node 1"}, "node")):
        with pytest.raises(ValidationError, match=says):
            validate_params("clock_skew", bad)


def test_clocks_all_needs_a_primitive_no_backend_has():
    from chaosbench.cluster.docker.backend import DockerCluster
    from chaosbench.cluster.local.backend import LocalCluster
    assert needs_of("clock_skew", {"offset_s": 30}) == {"skew_clock", "restore_clock"}
    assert "skew_monotonic" in needs_of("clock_skew", {"offset_s": 30, "clocks": "all"})
    for cls in (DockerCluster, LocalCluster):
        assert {"skew_clock", "restore_clock"} <= cls.supported_faults
        assert "skew_monotonic" not in cls.supported_faults


def test_control_file_text_for_offsets_and_drift():
    assert control_text(30.0) == "+30 x1" and control_text(-30.0) == "-30 x1" and control_text(1.5) == "+1.5 x1"
    assert control_text(drift_ppm=100) == "+0 x1.000100000"     # libfaketime's rate syntax
    assert control_text(drift_ppm=-500) == "+0 x0.999500000"


def test_the_control_file_holds_plus_zero_from_the_start_and_is_kept(tmp_path):
    path = prepare(tmp_path / "clock" / "node-0")
    assert path.read_text() == "+0 x1\n"
    write(path, "+30 x1")
    assert prepare(tmp_path / "clock" / "node-0").read_text() == "+30 x1\n"   # a re-rendered node keeps its offset
    assert not list(path.parent.glob("*.tmp"))


def test_preload_env_and_node_plan(tmp_path):
    env = preload_env("/chaosbench/clock/faketime", "/opt/chaosbench")
    assert env == {"LD_PRELOAD": f"/opt/chaosbench/{SHIM_REL} {FAKETIME_LIB}",   # the fix first, then libfaketime
                   "FAKETIME_TIMESTAMP_FILE": "/chaosbench/clock/faketime", "FAKETIME_CACHE_DURATION": "0",
                   "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    spec = ClusterSpec(run_id="r", run_dir=tmp_path, fake_clock=True)
    args = dict(python="python", rdzv_endpoint="h:1", s3_url="http://s3", events_dir="/e", nvme_dir="/n",
                memory_dir="/m")
    assert node_plan(spec, "node-0", **args, clock_env=env).env["LD_PRELOAD"] == env["LD_PRELOAD"]
    assert "LD_PRELOAD" not in node_plan(spec, "node-0", **args).env


def test_compose_mounts_the_control_directory_only_with_clock_faults(tmp_path):
    import ipaddress
    from chaosbench.cluster.docker.compose_file import ComposePlan, node_service
    plan = ComposePlan(project="p", image="i", subnet=ipaddress.ip_network("10.200.0.0/24"), owner="o",
                       events_host_dir=str(tmp_path / "events"))
    off = node_service(plan, ClusterSpec(run_id="r", run_dir=tmp_path), "node-0")
    assert "LD_PRELOAD" not in off["environment"] and not any("clock" in v for v in off["volumes"])
    on = node_service(plan, ClusterSpec(run_id="r", run_dir=tmp_path, fake_clock=True), "node-0")
    assert f"{tmp_path}/clock/node-0:/chaosbench/clock:ro" in on["volumes"]
    assert on["environment"]["FAKETIME_TIMESTAMP_FILE"] == "/chaosbench/clock/faketime"
    assert (tmp_path / "clock" / "node-0" / "faketime").read_text() == "+0 x1\n"


def test_the_scenario_sets_the_preload_for_its_clock_faults(tmp_path):
    from pathlib import Path
    from chaosbench.scenario.cluster_spec import build_spec
    from chaosbench.scenario.loader import load_scenario
    lib = Path(__file__).resolve().parents[2] / "scenarios"
    assert build_spec(load_scenario(lib / "clock_jump.yaml"), "r", tmp_path, None).fake_clock
    assert not build_spec(load_scenario(lib / "worker_crash.yaml"), "r", tmp_path, None).fake_clock


def test_local_node_clock_is_under_the_run_directory(tmp_path):
    host, env = node_clock(tmp_path, "node-1", None, "/repo")
    assert host == tmp_path / "clock" / "node-1" / "faketime" and env["FAKETIME_TIMESTAMP_FILE"] == str(host)
