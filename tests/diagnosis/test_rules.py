"""Each rule on recorded runs of tests/diagnosis/jobs/job.py (local backend): one run that shows the
habit it looks for and one that must get no advice from it."""
from pathlib import Path

import pytest

from chaosbench.diagnosis import diagnose

DATA = Path(__file__).parent / "data"


def rules(name: str) -> dict:
    return {f.rule: f for f in diagnose(DATA / name).findings}


# rule -> (a run that has the habit, a run that has not)
CASES = {
    "write_to_workdir": ("readonly_cwd", "missing_dir"),
    "checkpoint_dir_missing": ("missing_dir", "readonly_cwd"),
    "checkpoint_on_some_nodes": ("rank0_local", "node_loss_plain"),
    "rank0_only_local_save": ("rank0_local", "node_loss_plain"),
    "epoch_restart": ("epoch_restart", "keepalive_default"),
    "checkpoint_interval": ("keepalive_default", "node_loss_plain"),
    "no_save_on_preemption": ("preempt_no_save", "preempt_save"),
    "rdzv_keepalive_default": ("keepalive_default", "node_loss_plain"),
    "collective_timeout_default": ("hang_default_timeout", "hang_short_timeout"),
}


def _need(name: str) -> None:
    if not (DATA / name).is_dir():
        pytest.fail(f"fixture {name} missing")


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_fires_on_the_run_with_the_habit(rule):
    yes, _ = CASES[rule]
    _need(yes)
    found = rules(yes)
    assert rule in found, f"{rule} silent on {yes}: {sorted(found)}"
    f = found[rule]
    assert f.evidence and f.fix and f.title, f


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_is_silent_on_the_run_without_it(rule):
    _, no = CASES[rule]
    _need(no)
    found = rules(no)
    assert rule not in found, found.get(rule)


def test_no_rule_fails_to_run_on_any_recorded_run():
    for d in sorted(p for p in DATA.iterdir() if p.is_dir()):
        broken = [f.title for f in diagnose(d).findings if f.severity == "error"]
        assert not broken, (d.name, broken)


def test_keepalive_finding_reads_the_launch_config_and_cites_the_measured_alternative():
    f = rules("keepalive_default")["rdzv_keepalive_default"]
    assert f.evidence[0].source.startswith("logs/node-") and "rdzv_configs" in f.evidence[0].text
    assert "keep-alive 5 s x 3, last call 30 s" in f.title
    assert f.measured == "docs/recovery.md" and "docs/recovery.md" in f.effect and " s" in f.effect


def test_interval_finding_names_the_interval_that_meets_the_bound():
    f = rules("keepalive_default")["checkpoint_interval"]
    # job.py ran with --every 20 and the scenario's max_lost_steps is 5
    assert "every 20 steps" in f.title and "every 5 steps" in f.fix


def test_a_rule_without_its_evidence_says_nothing_on_an_empty_run_dir(tmp_path):
    d = diagnose(tmp_path)
    assert d.root_cause is None and d.findings == []


def test_plain_byo_example_on_torchruns_defaults_gets_the_keepalive_finding_with_the_measured_alternative():
    """examples/byo_ddp/train_plain.py as a user first runs it (c10d, no rdzv_timeouts), one node of three lost."""
    f = rules("byo_plain_defaults")["rdzv_keepalive_default"]
    assert "keep-alive 5 s x 3, last call 30 s" in f.title and "docs/recovery.md" in f.effect


def test_plain_byo_example_as_shipped_is_tuned_and_gets_no_keepalive_advice():
    """examples/byo_ddp/scenarios/node_loss_plain.yaml runs etcd-v3 with keep-alive 1 s x 3, last call 2 s."""
    assert "rdzv_keepalive_default" not in rules("node_loss_plain")


def test_a_healthy_job_that_prints_from_rank_0_only_gets_no_advice():
    """tests/diagnosis/jobs/print_rank0.yaml: tuned rendezvous, every node saves, one node lost."""
    d = diagnose(DATA / "print_rank0")
    assert d.findings == [] and d.root_cause is None, d.findings
