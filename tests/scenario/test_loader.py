"""Scenario files: good ones load, bad ones name file, line, field and the valid choices."""
from pathlib import Path

import pytest

from chaosbench.scenario import ScenarioError, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]

GOOD = """\
name: demo
cluster: {nodes: 3, elastic: {min_nodes: 2, max_nodes: 3}, rendezvous: etcd-v3}
trainer: {config: trainer/configs/tiny.yaml, overrides: {checkpoint.memory_snapshot_interval: 5}}
faults:
  - at: {step: 40}
    kill_node: {node: node-2}
  - id: cut
    at: {event: checkpoint_saved, where: {tier: nvme}}
    link_toxic: {link: s3, toxic: latency, attributes: {latency: 500}}
    duration_s: 5
  - at: {after_fault: cut, delay_s: 1}
    s3_error: {mode: 403}
expect: {recovered_from: memory, max_lost_steps: 5, world_size_after: 2, reaches_step: 120}
"""


def write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def problems(tmp_path, text) -> list[str]:
    with pytest.raises(ScenarioError) as ei:
        load_scenario(write(tmp_path, text))
    return ei.value.problems


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_good_scenario_loads(tmp_path):
    s = load_scenario(write(tmp_path, GOOD))
    assert [f.kind for f in s.faults] == ["kill_node", "link_toxic", "s3_error"]
    assert [f.id for f in s.faults] == ["f1", "cut", "f3"]
    assert s.faults[2].params == {"mode": "403"}       # YAML number read as the mode text
    assert s.faults[1].params["stream"] == "downstream"  # defaults filled by the fault's own schema
    assert s.cluster.elastic.max_nodes == 3 and s.expect.recovered_from == "memory"


def test_library_scenario_validates():
    s = load_scenario(ROOT / "scenarios" / "node_loss.yaml")
    assert s.expect.recovered_from == "memory"


def test_wrong_tier_names_line_field_and_choices(tmp_path):
    text = GOOD.replace("recovered_from: memory", "recovered_from: ram")
    (p,) = problems(tmp_path, text)
    assert ":13:" in p and "expect.recovered_from" in p
    assert "'memory', 'nvme' or 's3'" in p


def test_unknown_fault_type_suggests_and_lists(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("kill_node:", "kil_node:"))
    assert ":5:" in p and "faults[0]" in p
    assert "did you mean 'kill_node'" in p and "partition" in p and "s3_outage" in p


def test_unknown_key_lists_valid_keys(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("reaches_step: 120", "reach_step: 120"))
    assert "expect.reach_step" in p and "did you mean 'reaches_step'" in p and "max_lost_steps" in p


def test_bad_fault_param_points_into_the_fault(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("toxic: latency", "toxic: lag"))
    assert ":9:" in p and "faults[1].link_toxic.toxic" in p and "'bandwidth'" in p


def test_unknown_node_and_negative_toxic(tmp_path):
    ps = problems(tmp_path, GOOD.replace("node: node-2", "node: node-7").replace("latency: 500", "latency: -5"))
    assert any("no node 'node-7'" in p and "node-0, node-1, node-2, random" in p and ":6:" in p for p in ps)
    assert any("must not be negative: latency" in p for p in ps)


def test_trigger_needs_exactly_one_condition(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("at: {step: 40}", "at: {step: 40, seconds: 3}"))
    assert "faults[0].at" in p and "exactly one of: seconds, step, event, after_fault" in p


def test_after_fault_must_name_a_fault(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("after_fault: cut", "after_fault: nope"))
    assert "after_fault 'nope' names no other fault" in p and "cut, f1, f3" in p


def test_elastic_bounds(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("min_nodes: 2, max_nodes: 3", "min_nodes: 3, max_nodes: 2"))
    assert ":2:" in p and "max_nodes (2) must be >= elastic.min_nodes (3)" in p


def test_step_after_target_never_fires(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("step: 40", "step: 400"))
    assert "faults[0].at.step" in p and "would never fire" in p


def test_missing_trainer_config_file(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("trainer/configs/tiny.yaml", "trainer/configs/nope.yaml"))
    assert ":3:" in p and "trainer.config" in p and "not found" in p


def test_trainer_override_rejected_by_trainer_validator(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("checkpoint.memory_snapshot_interval: 5",
                                            "checkpoint.memory_snapshot_interval: -1"))
    assert "trainer.overrides" in p and "memory_snapshot_interval" in p


def test_reaches_step_beyond_max_steps(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("reaches_step: 120", "reaches_step: 5000"))
    assert "training.max_steps" in p and "5000" in p


def test_invalid_yaml_and_wrong_top_level(tmp_path):
    (p,) = problems(tmp_path, "name: x\nfaults: [\n")
    assert "not valid YAML" in p and str(tmp_path) in p
    with pytest.raises(ScenarioError, match="top level must be a mapping"):
        parse_scenario(["a"], "x.yaml")


def test_unknown_optional_check(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("reaches_step: 120}", "reaches_step: 120, optional: [tier]}"))
    assert "unknown check 'tier'" in p and "recovered_from" in p


def test_bad_log_regex(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("reaches_step: 120}", "reaches_step: 120, log_regex: [{pattern: '(['}]}"))
    assert "expect.log_regex[0].pattern" in p and "not a valid regular expression" in p


def test_duration_on_one_shot_fault(tmp_path):
    (p,) = problems(tmp_path, GOOD.replace("    kill_node: {node: node-2}\n",
                                            "    kill_worker: {node: node-2}\n    duration_s: 5\n"))
    assert ":7:" in p and "faults[0].duration_s" in p and "kill_worker is a one-shot fault" in p


def test_keep_alive_attempts_below_three_are_refused(tmp_path):
    bad = GOOD.replace("rendezvous: etcd-v3}",
                       "rendezvous: etcd-v3, rdzv_timeouts: {keep_alive_interval: 1, keep_alive_max_attempt: 2}}")
    assert bad != GOOD
    (p,) = problems(tmp_path, bad)
    assert "keep_alive_max_attempt=2" in p and "must be >= 3" in p and "use 3" in p
    ok = bad.replace("keep_alive_max_attempt: 2", "keep_alive_max_attempt: 3")
    load_scenario(write(tmp_path, ok))   # 3 is accepted


def test_file_that_is_not_utf8_names_file_and_line(tmp_path):
    p = tmp_path / "latin1.yaml"
    p.write_bytes(GOOD.encode().replace(b"name: demo", b"name: demo\ndescription: caf\xe9"))
    with pytest.raises(ScenarioError) as ei:
        load_scenario(p)
    assert ei.value.problems == [f"{p}:2: not UTF-8 text (byte 0xe9 at offset 27); save the file as UTF-8"]


def test_fault_rank_beyond_the_cluster_shape_is_refused(tmp_path):
    text = GOOD.replace("kill_node: {node: node-2}", "kill_worker: {node: node-1, local_rank: 2}")
    text = text.replace("rendezvous: etcd-v3}", "rendezvous: etcd-v3, procs_per_node: 2}").replace(
        "world_size_after: 2", "world_size_after: 4")   # 2 nodes x 2 ranks
    [p] = problems(tmp_path, text)
    assert "faults[0].kill_worker.local_rank: local_rank 2 does not exist" in p and "valid: 0-1" in p
    assert load_scenario(write(tmp_path, text.replace("local_rank: 2", "local_rank: 1"), "ok.yaml"))


@pytest.mark.parametrize("expect", ["expect: {}", "expect: {no_restart: false, checkpoints_valid: false}", ""])
def test_scenario_without_any_check_is_refused(tmp_path, expect):
    text = GOOD.replace("faults:", "run: {timeout_s: 60}\nfaults:").split("expect:")[0] + expect + "\n"
    text = text.replace("  - at: {step: 40}\n", "  - at: {seconds: 40}\n")
    [p] = problems(tmp_path, text)
    assert "expect: no check to evaluate" in p and "reaches_step" in p
