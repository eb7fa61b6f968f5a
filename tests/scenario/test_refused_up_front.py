"""Bad input found by a review of real runs: each category is refused by `chaosbench validate` and
`chaosbench run` with exit 2 and `file:line: field: what is wrong; the fix`, before anything starts
(docs/scenarios.md, "Refused up front"). One test per category."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chaosbench.cli import app
from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.launch import observed_argv
from chaosbench.scenario import load_scenario
from chaosbench.scenario.cluster_spec import build_spec

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

BASE = """\
name: demo
cluster: {nodes: 3, elastic: {min_nodes: 2, max_nodes: 3}}
faults:
  - id: kill
    at: {step: 40}
    kill_node: {node: node-2}
expect: {recovered_from: memory, max_lost_steps: 5, world_size_after: 2, reaches_step: 120}
"""


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(ROOT)


def refused(tmp_path, text: str, where: str, *words: str, name: str = "s.yaml") -> str:
    """Both commands exit 2 naming `file:line: field:` and the words; returns validate's output."""
    path = tmp_path / name
    path.write_text(text)
    res = runner.invoke(app, ["validate", str(path)])
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())   # rich may fold a long line
    assert f"{path}:{where}" in out, out
    for w in words:
        assert w in out, (w, out)
    reports = tmp_path / "reports"
    res = runner.invoke(app, ["run", str(path), "--report-dir", str(reports), "--quiet"])
    assert res.exit_code == 2 and f"{path}:{where}" in " ".join(res.output.split()), res.output
    assert not reports.exists()
    return out


def test_base_scenario_is_valid(tmp_path):
    (tmp_path / "s.yaml").write_text(BASE)
    load_scenario(tmp_path / "s.yaml")


@pytest.mark.parametrize("old,new,where", [
    ("step: 40", "step: true", "5: faults[0].at.step:"),
    ("world_size_after: 2", "world_size_after: true", "7: expect.world_size_after:"),
])
def test_a_yaml_boolean_is_no_number(tmp_path, old, new, where):
    refused(tmp_path, BASE.replace(old, new), where, "YAML boolean, not a number")


def test_a_yaml_boolean_in_fault_parameters_is_no_number(tmp_path):
    text = BASE.replace("kill_node: {node: node-2}", "memory_pressure: {node: node-2, mb: true}\n    duration_s: 5")
    refused(tmp_path, text, "6: faults[0].memory_pressure.mb:", "YAML boolean")


@pytest.mark.parametrize("old,new,where", [
    ("kill_node: {node: node-2}", "pause_node: {node: node-2}\n    duration_s: .inf", "7: faults[0].duration_s:"),
    ("max_lost_steps: 5", "max_recovery_seconds: .inf", "7: expect.max_recovery_seconds:"),
    ("max_lost_steps: 5", "max_recovery_seconds: .nan", "7: expect.max_recovery_seconds:"),
    ("nodes: 3,", "nodes: 3, rdzv_timeouts: {join_timeout: .inf},", "2: cluster.rdzv_timeouts:"),
])
def test_an_infinite_duration_or_bound_is_refused(tmp_path, old, new, where):
    refused(tmp_path, BASE.replace(old, new), where, "not a finite number")


@pytest.mark.parametrize("old,new,where", [
    ("nodes: 3,", "nodes: 3, nvme_size_mb: 1e12,", "2: cluster.nvme_size_mb:"),
    ("nodes: 3,", "nodes: 3, shm_size_mb: 1000000000000,", "2: cluster.shm_size_mb:"),
    ("at: {step: 40}", "at: {step: 40}\n    repeat: {times: 100000, every_s: 1}", "6: faults[0].repeat.times:"),
    ("reaches_step: 120", "reaches_step: 99999999999", "7: expect.reaches_step:"),
    ("kill_node: {node: node-2}", "preempt_node: {node: node-2, grace_s: 100000}", "6: faults[0].preempt_node.grace_s:"),
    ("kill_node: {node: node-2}", "freeze_worker: {node: node-2, local_rank: 5000}\n    duration_s: 2",
     "6: faults[0].freeze_worker.local_rank:"),
])
def test_absurd_sizes_and_counts_are_refused_with_the_maximum(tmp_path, old, new, where):
    refused(tmp_path, BASE.replace(old, new), where, "above the largest accepted value", "give at most")


def test_a_duplicate_key_is_refused_with_both_lines(tmp_path):
    text = BASE.replace("expect: {recovered_from: memory,", "expect:\n  recovered_from: memory\n  recovered_from: nvme\n"
                        "  max_lost_steps: 5\n  world_size_after: 2\n  reaches_step: 120\n#")
    refused(tmp_path, text, "9: expect.recovered_from:", "duplicate key 'recovered_from' (first on line 8)")


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    laughs = "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n" for i in range(1, 10))
    text = BASE.replace("faults:", "description: &l0 lol\nx_laughs:\n" + "".join("  " + x + "\n" for x in
                                                                                 laughs.splitlines()) + "faults:")
    t0 = time.monotonic()
    refused(tmp_path, text, "3: ", "anchors and aliases are not accepted", "&l0")
    assert time.monotonic() - t0 < 10   # was a traceback after 12 s and 2.4 GB
    under_where = BASE.replace("faults:", "description: &t nvme\nfaults:").replace(
        "at: {step: 40}", "at: {event: checkpoint_saved, where: {tier: *t}}")
    refused(tmp_path, under_where, "3: ", "anchors and aliases are not accepted")


@pytest.mark.parametrize("old,new,where,words", [
    ("step: 40", "step: 250", "5: faults[0].at.step:", ("beyond the trainer's training.max_steps (200)",)),
    ("at: {step: 40}", "at: {event: step, where: {step: 250}}", "5: faults[0].at.where.step:",
     ("beyond the trainer's training.max_steps (200)", "never fires")),
    ("step: 40", "step: 130", "5: faults[0].at.step:", ("not before expect.reaches_step",)),
    ("step: 40", "seconds: 900", "5: faults[0].at.seconds:", ("run.timeout_s (600)", "never fire")),
    ("  - id: kill\n    at: {step: 40}\n    kill_node: {node: node-2}",
     "  - id: a\n    at: {after_fault: b}\n    pause_node: {node: node-1}\n    duration_s: 1\n"
     "  - id: b\n    at: {after_fault: a}\n    pause_node: {node: node-2}\n    duration_s: 1",
     "5: faults[0].at.after_fault:", ("a -> b -> a", "none ever fires")),
])
def test_a_trigger_that_can_never_fire_is_refused(tmp_path, old, new, where, words):
    text = BASE.replace(old, new)
    if "250" in new:   # reaches_step 120 would be refused first
        text = text.replace("reaches_step: 120", "trains_after_settle: 10")
    refused(tmp_path, text, where, *words)


def test_a_kill_and_another_fault_on_one_node_at_one_instant_are_refused(tmp_path):
    text = BASE.replace("    kill_node: {node: node-2}\n", "    kill_node: {node: node-2}\n"
                        "  - at: {step: 40}\n    pause_node: {node: node-2}\n    duration_s: 3\n")
    refused(tmp_path, text, "7: faults[1].at:", "at the same instant", "on node-2", "delay_s")
    ok = text.replace("pause_node: {node: node-2}", "pause_node: {node: node-1}")   # another node: fine
    (tmp_path / "ok.yaml").write_text(ok)
    load_scenario(tmp_path / "ok.yaml")


def test_world_size_after_below_min_nodes_is_refused(tmp_path):
    refused(tmp_path, BASE.replace("world_size_after: 2", "world_size_after: 1"), "7: expect.world_size_after:",
            "1 can never be seen", "min_nodes")


def test_recovery_expectations_without_a_fault_are_refused(tmp_path):
    text = BASE.replace("faults:\n  - id: kill\n    at: {step: 40}\n    kill_node: {node: node-2}\n", "")
    out = refused(tmp_path, text.replace(", world_size_after: 2", ""), "3: expect.recovered_from:", "injects none")
    assert "expect.max_lost_steps" in out
    refused(tmp_path, BASE.replace("reaches_step: 120", "reaches_step: 120, saved_within_grace: true"),
            "7: expect.saved_within_grace:", "preempt_node")


@pytest.mark.parametrize("sizes,where,words", [
    ("[]", "7: expect.world_sizes:", ("empty list",)),
    ("[3, 7]", "7: expect.world_sizes[1]:", ("7 can never be seen",)),
    ("[3, 3, 2]", "7: expect.world_sizes[1]:", ("twice in a row",)),
])
def test_empty_or_impossible_world_sizes_are_refused(tmp_path, sizes, where, words):
    refused(tmp_path, BASE.replace("world_size_after: 2", f"world_sizes: {sizes}"), where, *words)


def test_a_where_value_that_is_no_scalar_is_refused(tmp_path):
    text = BASE.replace("at: {step: 40}", "at: {event: checkpoint_saved, where: {tier: [nvme, s3]}}")
    refused(tmp_path, text, "5: faults[0].at.where:", "where.tier is a list")


@pytest.mark.parametrize("value,words", [("-5", "give seconds above 0"), (".inf", "not a finite number")])
def test_a_negative_or_infinite_rendezvous_timeout_is_refused(tmp_path, value, words):
    refused(tmp_path, BASE.replace("nodes: 3,", f"nodes: 3, rdzv_timeouts: {{join_timeout: {value}}},"),
            "2: cluster.rdzv_timeouts:", words)


@pytest.mark.parametrize("script", ["../outside.py", "ABS"])
def test_a_script_outside_the_workdir_is_refused(tmp_path, script):
    (tmp_path / "project").mkdir()
    (tmp_path / "outside.py").write_text("print('hi')\n")
    script = str(tmp_path / "outside.py") if script == "ABS" else script
    text = (f"name: byo\ntrainer:\n  workdir: project\n  script: {script}\n"
            "  progress: {regex: 'step (?P<step>\\d+)'}\nexpect: {reaches_step: 10}\n")
    refused(tmp_path, text, "4: trainer.script:", "leads out of trainer.workdir")


def test_a_name_too_long_for_the_run_directory_is_refused(tmp_path):
    refused(tmp_path, BASE.replace("name: demo", "name: " + "a" * 300), "1: name:", "at most 128")
    # a name within bounds under a report directory so deep that the run's files would not fit PATH_MAX
    path = tmp_path / "s.yaml"
    path.write_text(BASE.replace("name: demo", "name: " + "a" * 120))
    deep = tmp_path.joinpath(*["d" * 200] * 18)
    res = runner.invoke(app, ["run", str(path), "--report-dir", str(deep), "--quiet"])
    assert res.exit_code == 2 and "--report-dir: the run directory" in res.output and "path limit" in res.output
    assert not deep.exists()


@pytest.mark.parametrize("pattern", ["(a+)+$", "(\\\\w*,)*x", "(a|aa)+$"])
def test_a_catastrophic_regex_is_refused(tmp_path, pattern):
    text = BASE.replace("reaches_step: 120}", f"reaches_step: 120, log_regex: [{{pattern: '{pattern}'}}]}}")
    refused(tmp_path, text, "7: expect.log_regex[0].pattern:", "backtrack exponentially")
    byo = (f"name: byo\ntrainer:\n  workdir: {ROOT / 'examples' / 'byo_ddp'}\n  script: train_plain.py\n"
           f"  progress: {{regex: 'step (?P<step>\\d+) {pattern}'}}\nexpect: {{reaches_step: 10}}\n")
    refused(tmp_path, byo, "5: trainer.progress.regex:", "backtrack exponentially", name="byo.yaml")


def test_a_progress_regex_starting_with_a_dash_reaches_the_node_watcher(tmp_path):
    """Valid, but `--progress -step...` made the watcher's argparse take it for an option and exit."""
    spec = ClusterSpec(run_id="r", run_dir=tmp_path, progress_regex="-step:(?P<step>\\d+)")
    argv = observed_argv(sys.executable, spec, [sys.executable, "-c", "print('-step:3')"])
    env = {**os.environ, "CHAOSBENCH_EVENTS_DIR": str(tmp_path / "events"), "CHAOSBENCH_NODE": "node-0",
           "PYTHONPATH": str(ROOT)}
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert "-step:3" in r.stdout
    agent = [json.loads(x) for x in (tmp_path / "events" / "agent-node-0.jsonl").read_text().splitlines()]
    assert agent[-1]["event"] == "launcher_exit" and agent[-1]["exit_code"] == 0


def test_an_error_about_another_file_never_prints_its_lines(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$salt$SECRETHASH:19000:0:99999:7:::\nbob: $6$xyz$BOBHASH\n")
    text = BASE.replace("faults:", f"trainer: {{config: {secret}}}\nfaults:")
    out = refused(tmp_path, text, "3: trainer.config:", str(secret), "not a reference-trainer config")
    assert "SECRET" not in out and "BOBHASH" not in out and "bob" not in out
    broken = tmp_path / "broken.yaml"
    broken.write_text("training: {max_steps: 5}\npassword: [hunter2\n")
    out = refused(tmp_path, text.replace(str(secret), str(broken)), "3: trainer.config:", "not valid YAML (line")
    assert "hunter2" not in out


def test_a_cluster_wider_than_the_trainer_config_is_handed_to_the_trainer(tmp_path):
    """tiny.yaml says elastic.max_nodes: 4; a 6-node cluster crash-looped on TopologyChangeError. The
    cluster's range now goes to the trainer; only an explicit narrower override is refused."""
    from chaosbench.reference_trainer import check_config
    path = tmp_path / "six.yaml"
    path.write_text(BASE.replace("nodes: 3, elastic: {min_nodes: 2, max_nodes: 3}",
                                 "nodes: 6, elastic: {min_nodes: 2, max_nodes: 6}"))
    s = load_scenario(path)
    spec = build_spec(s, "r", tmp_path / "run", path)
    assert spec.trainer_overrides["elastic.max_nodes"] == 6 and spec.trainer_overrides["elastic.min_nodes"] == 2
    answer = check_config(ROOT / spec.trainer_config, [f"{k}={json.dumps(v)}" for k, v in spec.trainer_overrides.items()])
    assert answer.valid and answer.config["elastic"]["max_nodes"] == 6
    narrower = path.read_text().replace("faults:", "trainer: {overrides: {elastic.max_nodes: 4}}\nfaults:")
    refused(tmp_path, narrower, "3: trainer.overrides.elastic.max_nodes:", "contradicts cluster.elastic.max_nodes (6)")
