"""bench/frameworks.py: a launcher's own measured bound is stated in its derived scenario and never loosens the
torchrun story; torchft is not asked the checks of a restart round it never has; a row without a restart takes
its time from the resumption check. No runs: derived files and fabricated result.json."""
import json

import pytest
import yaml

from chaosbench.scenario import load_scenario

from .loader import import_bench


@pytest.fixture(scope="module")
def fw():
    yield from import_bench("frameworks")


def expect_of(path):
    return yaml.safe_load(path.read_text())["expect"]


def test_ft_launchers_fixed_keep_alive_is_its_own_bound_said_in_the_derived_scenario(fw, tmp_path):
    ft = fw.derived("node_loss", "ft_launcher", "docker", tmp_path)
    assert expect_of(ft)["max_recovery_seconds"] == 40
    assert any("keep-alive of 5 s x 3 fixed in code" in n and "instead of the story's 10" in n for n in fw.notes(ft))
    story = fw.derived("node_loss", "torchrun", "docker", tmp_path)
    assert expect_of(story)["max_recovery_seconds"] == 10 and fw.notes(story) == []
    assert load_scenario(ft).expect.max_recovery_seconds == 40


def test_torchft_is_judged_by_its_quorum_not_by_a_restart_round(fw, tmp_path):
    lost = expect_of(fw.derived("node_loss", "torchft", "docker", tmp_path))
    assert lost["quorum_recovery"] is True and lost["reaches_step"] == 200   # tiny.yaml's max_steps
    for gone in ("world_size_after", "trains_after_settle", "checkpoints_valid", "recovered_from", "max_lost_steps"):
        assert gone not in lost
    back = expect_of(fw.derived("worker_crash", "torchft", "docker", tmp_path))   # its torchrun restarts it: a heal
    assert back["recovered_from"] == "memory" and back["max_lost_steps"] == 5 and "world_size_after" not in back
    slow = expect_of(fw.derived("straggler", "torchft", "docker", tmp_path))
    assert "quorum_recovery" not in slow and slow["reaches_step"] == 325   # its max_steps: 100000, the fault at 125
    assert lost["max_detection_seconds"] == 120   # measured: the survivors' quorum shrink is torchft's sign
    assert expect_of(fw.derived("node_loss", "dlrover-run", "docker", tmp_path))["max_detection_seconds"] == 120


def test_a_row_without_a_restart_takes_its_total_from_the_resumption(fw, tmp_path, monkeypatch):
    run = tmp_path / "reports" / "node_loss_torchft-1"
    run.mkdir(parents=True)
    run.joinpath("result.json").write_text(json.dumps({
        "verdict": "passed", "cluster": {"launcher": "torchft", "launcher_version": "0.2.0"}, "recoveries": [],
        "checks": [{"name": "max_recovery_seconds", "status": "passed", "observed": 5.1}]}))

    class Done:
        returncode = 0

        def communicate(self, timeout):
            return "", None
    monkeypatch.setattr(fw.subprocess, "Popen", lambda *a, **k: Done())
    row = fw.run_one(tmp_path / "node_loss_torchft.yaml", tmp_path / "reports")
    assert row["total_s"] == 5.1 and row["rendezvous_s"] is None and row["version"] == "0.2.0"
