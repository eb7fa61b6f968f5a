"""freeze_worker, throttle_node, preempt_node: the cluster calls they make, their fault-log records,
and the parameters a scenario cannot give them."""
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from chaosbench.faults import get_fault, validate_params
from chaosbench.scenario import ScenarioError, load_scenario
from tests.faults.recording import RecordingCluster, make_fault

ROOT = Path(__file__).resolve().parents[2]


def records(path):
    return [(r["action"], r["fault"], r["target"]) for r in map(json.loads, path.read_text().splitlines())]


def test_freeze_worker_stops_one_worker_and_thaws_the_same_one(tmp_path):
    c = RecordingCluster(tmp_path)
    f = make_fault("freeze_worker", {"node": "node-1", "local_rank": 1}, c, tmp_path / "faults.jsonl")
    f.inject()
    f.heal()
    assert c.calls == [("freeze_worker", ("node-1", 1)), ("thaw_worker", ("node-1", 1))]
    assert records(tmp_path / "faults.jsonl") == [("inject", "freeze_worker", "node-1"),
                                                 ("heal", "freeze_worker", "node-1")]


def test_a_random_frozen_worker_is_thawed_on_the_node_that_was_picked(tmp_path):
    c = RecordingCluster(tmp_path)
    f = make_fault("freeze_worker", {}, c, tmp_path / "faults.jsonl")
    f.inject()
    f.heal()
    (_, (frozen, rank)), (_, (thawed, _)) = c.calls
    assert frozen == thawed in c.node_names() and rank == 0


def test_throttle_node_keeps_a_fraction_and_lifts_it(tmp_path):
    c = RecordingCluster(tmp_path)
    f = make_fault("throttle_node", {"node": "node-0", "cpu_fraction": 0.25}, c, tmp_path / "faults.jsonl")
    f.inject()
    f.heal()
    assert c.calls == [("throttle_node", ("node-0", 0.25)), ("unthrottle_node", ("node-0",))]
    assert [a for a, _, _ in records(tmp_path / "faults.jsonl")] == ["inject", "heal"]


def test_preempt_node_is_one_shot(tmp_path):
    c = RecordingCluster(tmp_path)
    f = make_fault("preempt_node", {"node": "node-1"}, c, tmp_path / "faults.jsonl")
    f.inject()
    assert f.heal() is None                      # the node is gone; nothing to undo, nothing logged
    assert c.calls == [("preempt_node", ("node-1", 10.0))]
    (line,) = map(json.loads, (tmp_path / "faults.jsonl").read_text().splitlines())
    assert line["action"] == "inject" and line["params"]["grace_s"] == 10.0
    assert get_fault("preempt_node").healable is False
    assert get_fault("freeze_worker").healable and get_fault("throttle_node").healable


def test_add_node_from_a_standby_boots_it_first_and_releases_it_when_it_fires(tmp_path):
    c = RecordingCluster(tmp_path)
    f = make_fault("add_node", {"standby": True}, c, tmp_path / "faults.jsonl")
    f.prepare()                                  # when training starts: the standby boots, held
    assert c.calls == [("add_standby", ())]
    f.inject()
    assert c.calls[1:] == [("release_standby", ("node-2",))] and f.target == "node-2"
    assert records(tmp_path / "faults.jsonl") == [("inject", "add_node", "node-2")]
    plain = make_fault("add_node", {}, RecordingCluster(tmp_path), tmp_path / "plain.jsonl")
    plain.prepare()
    assert plain.cluster.calls == []             # a cold add boots nothing ahead
    plain.inject()
    assert plain.cluster.calls == [("add_node", ())]


def test_the_local_backend_refuses_a_standby_by_name():
    from chaosbench.cluster.local.backend import LocalCluster
    from chaosbench.faults.capabilities import missing_primitives
    from chaosbench.cluster import backend_primitives
    entry = type("E", (), {"id": "grow", "kind": "add_node", "params": {"standby": True}})()
    missing = missing_primitives([entry], LocalCluster.supported_faults, LocalCluster.unsupported_why,
                                 backend_primitives())
    assert missing and "grow (add_node) needs add_standby" in missing[0]
    assert "add_standby" in backend_primitives()["docker"]


@pytest.mark.parametrize("kind,params,field", [
    ("freeze_worker", {"local_rank": -1}, "local_rank"),
    ("throttle_node", {"cpu_fraction": 0}, "cpu_fraction"),
    ("throttle_node", {"cpu_fraction": 1.5}, "cpu_fraction"),
    ("throttle_node", {}, "cpu_fraction"),                 # required: no silent default slowdown
    ("preempt_node", {"grace_s": 0}, "grace_s"),
    ("preempt_node", {"grace_s": -3}, "grace_s"),
    ("freeze_worker", {"node": "node-1; reboot"}, "node"),
])
def test_bad_parameters_are_refused(kind, params, field):
    with pytest.raises(ValidationError) as ei:
        validate_params(kind, params)
    assert [e["loc"] for e in ei.value.errors()] == [(field,)]


def test_good_parameters_pass():
    assert validate_params("throttle_node", {"cpu_fraction": 1}).cpu_fraction == 1.0
    assert validate_params("preempt_node", {"grace_s": 0.5}).grace_s == 0.5
    assert validate_params("freeze_worker", {"local_rank": 3}).local_rank == 3


def scenario_problems(tmp_path, monkeypatch, fault: str) -> tuple[Path, list[str]]:
    """Load a scenario whose one fault (line 5) is `fault`, healed after 10 s; the problems it has."""
    monkeypatch.chdir(ROOT)
    path = tmp_path / "s.yaml"
    path.write_text(f"name: s\ncluster: {{nodes: 2}}\nfaults:\n  - at: {{step: 5}}\n    {fault}\n"
                    "    duration_s: 10\nexpect: {reaches_step: 20}\n")
    with pytest.raises(ScenarioError) as ei:
        load_scenario(path)
    return path, ei.value.problems


def test_a_scenario_with_a_bad_fraction_names_file_line_and_bound(tmp_path, monkeypatch):
    path, (p,) = scenario_problems(tmp_path, monkeypatch, "throttle_node: {node: node-1, cpu_fraction: 1.5}")
    assert f"{path}:5: faults[0].throttle_node.cpu_fraction" in p and "give at most 1.0" in p


def test_preempt_node_takes_no_duration(tmp_path, monkeypatch):
    _, (p,) = scenario_problems(tmp_path, monkeypatch, "preempt_node: {node: node-1, grace_s: 5}")
    assert "preempt_node is a one-shot fault with nothing to heal; remove duration_s" in p


def test_a_frozen_worker_must_exist_on_the_node(tmp_path, monkeypatch):
    _, (p,) = scenario_problems(tmp_path, monkeypatch, "freeze_worker: {node: node-1, local_rank: 1}")
    assert ":5: faults[0].freeze_worker.local_rank: local_rank 1 does not exist" in p and "valid: 0-0" in p
