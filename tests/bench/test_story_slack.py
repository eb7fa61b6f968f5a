"""bench/story_slack.py: when a run's last fault settled and how long it trained after. No cluster."""
import json

import pytest

from .loader import import_bench


@pytest.fixture(scope="module")
def slack():
    yield from import_bench("story_slack")


def _steps(n, t0=100.0, dt=0.5):
    return [{"ts": t0 + i * dt, "step": i + 1} for i in range(n)]


def test_a_recovery_settles_later_than_its_fault_heal(slack):
    result = {"scenario": {"name": "s"}, "verdict": "passed", "duration_s": 60.0,
              "timeline": {"steps": _steps(100)},   # steps 1..100 at 100.0 .. 149.5
              "faults": [{"id": "f1", "injected_at": 110.0, "healed_at": 112.0},
                         {"id": "f2", "injected_at": 115.0}],
              "recoveries": [{"fault_id": "f1", "first_step_at": 120.0}]}
    row = slack.slack(result)
    assert row["settled_step"] == 41 and row["after_s"] == 29.5 and row["after_pct"] == 49
    assert row["end_step"] == 100 and row["training_s"] == 49.5
    assert row["before_s"] == 10.0                   # first step 100.0, first injection 110.0


def test_training_before_the_first_fault_counts_only_injected_faults(slack):
    result = {"duration_s": 30.0, "timeline": {"steps": _steps(40)},
              "faults": [{"id": "late", "injected_at": 112.0}, {"id": "refused", "error": "no"},
                         {"id": "early", "injected_at": 103.5}]}
    assert slack.slack(result)["before_s"] == 3.5


def test_a_heal_after_the_loss_recovery_settles_at_the_heal(slack):
    # a node lost (recovered at 106 s) and restarted at 120 s: its rejoin is a round, not a recovery
    result = {"duration_s": 60.0, "timeline": {"steps": _steps(100)},
              "faults": [{"id": "f1", "injected_at": 101.0, "healed_at": 120.0}],
              "recoveries": [{"fault_id": "f1", "first_step_at": 106.0}]}
    assert slack.settled_at(result) == 120.0 and slack.slack(result)["settled_step"] == 41


def test_a_heal_without_a_recovery_settles_at_the_heal_and_a_fault_never_injected_is_no_fault(slack):
    result = {"duration_s": 30.0, "timeline": {"steps": _steps(20)},
              "faults": [{"id": "f1", "injected_at": 102.0, "healed_at": 105.0}, {"id": "f2", "error": "refused"}]}
    assert slack.slack(result)["settled_step"] == 11
    result["faults"] = [{"id": "f2", "error": "refused"}]
    assert slack.slack(result)["error"] == "no fault injected"
    assert "after_s" not in slack.slack(result)


def test_a_run_without_steps_is_an_error_row_not_zero_slack(slack):
    row = slack.slack({"faults": [{"id": "f1", "injected_at": 1.0}], "timeline": {"steps": []}})
    assert row["error"] and "after_s" not in row


def test_newest_run_per_scenario_and_an_unreadable_file_is_named(slack, tmp_path, capsys):
    for name in ("node_join-20261124-100000-aaaa", "node_join-20261124-120000-bbbb", "clock_jump-20261124-110000-cccc"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(json.dumps({"scenario": {"name": name}, "timeline": {}}))
    assert [p.parent.name for p in slack.newest_runs([tmp_path])] == [
        "clock_jump-20261124-110000-cccc", "node_join-20261124-120000-bbbb"]
    (tmp_path / "clock_jump-20261124-110000-cccc" / "result.json").write_text("{broken")
    assert slack.main([str(tmp_path)]) == 0
    assert "clock_jump-20261124-110000-cccc/result.json" in capsys.readouterr().out
    (tmp_path / "node_join-20261124-120000-bbbb" / "result.json").write_text(json.dumps({"recoveries": 5}))
    assert slack.main([str(tmp_path)]) == 0   # a wrong-typed field is a row naming it, not a traceback
    assert "field 'recoveries' must be a list" in capsys.readouterr().out
    assert slack.main([str(tmp_path / "nothing")]) == 2
