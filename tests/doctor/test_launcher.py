"""Launcher environment: missing/partial/inconsistent variables, and the python-instead-of-torchrun case."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chaosbench.doctor import Status, from_env
from chaosbench.doctor.checks_launcher import check_launcher_env

from .conftest import REPO, run_doctor

GOOD = {"RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
        "LOCAL_WORLD_SIZE": "1", "PET_NNODES": "1:2", "TORCHELASTIC_RUN_ID": "r"}


def _clean_env():
    return {k: v for k, v in os.environ.items() if k not in GOOD and not k.startswith(("PET_", "TORCHELASTIC"))}


def test_consistent_env_passes():
    r = check_launcher_env(from_env(GOOD))
    assert r.status == Status.PASS, r.evidence


def test_partial_env_fails_naming_missing():
    env = dict(GOOD)
    del env["MASTER_PORT"], env["RANK"]
    r = check_launcher_env(from_env(env))
    assert r.status == Status.FAIL
    assert "Missing required environment variables: ['RANK', 'MASTER_PORT']" in r.evidence
    assert "set them all or none" in r.fix


def test_world_size_inconsistent_with_nodes_times_procs():
    env = dict(GOOD, WORLD_SIZE="6", LOCAL_WORLD_SIZE="2", RANK="0")   # 1..2 nodes x 2 procs: 2..4
    r = check_launcher_env(from_env(env))
    assert r.status == Status.FAIL
    assert "WORLD_SIZE=6 != nodes x procs per node" in r.evidence and "2x2=4" in r.evidence


def test_rank_out_of_range():
    r = check_launcher_env(from_env(dict(GOOD, RANK="2")))
    assert r.status == Status.FAIL and "RANK=2 outside [0, WORLD_SIZE=2)" in r.evidence


def test_plain_python_cli_fails_with_torchrun_fix():
    p = run_doctor("--env", "--json", "--no-versions", env=_clean_env())
    assert p.returncode == 1, p.stderr
    checks = {c["name"]: c for c in json.loads(p.stdout)["checks"]}
    c = checks["launcher environment"]
    assert c["status"] == "FAIL"
    assert "ran with python instead of torchrun" in c["evidence"]
    assert "torchrun" in c["fix"] and "--nproc-per-node" in c["fix"]


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_under_real_torchrun_passes():
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    env = _clean_env()
    env["PYTHONPATH"] = str(REPO)
    p = subprocess.run([torchrun, "--standalone", "--nnodes=1", "--nproc-per-node=1", "-m", "chaosbench.doctor",
                        "--env", "--json", "--no-versions"], capture_output=True, text=True, timeout=150, env=env,
                       cwd=REPO)
    out = p.stdout[p.stdout.index("{"):]
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert checks["launcher environment"]["status"] == "PASS", checks["launcher environment"]
    assert "WORLD_SIZE=1" in checks["launcher environment"]["evidence"]
    # the master store is up (torchrun hosts it) and reachable
    master = [c for n, c in checks.items() if n.startswith("tcp master")]
    assert master and master[0]["status"] == "PASS", checks


def test_invalid_scenario_reported_by_the_engine_validator(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ncluster: {nodes: 2, rendezvus: c10d}\ntrainer: {config: trainer/configs/tiny.yaml}\n")
    p = run_doctor("--scenario", str(bad), "--json", "--no-versions")
    assert p.returncode == 1, p.stderr
    c = {c["name"]: c for c in json.loads(p.stdout)["checks"]}["scenario file"]
    assert c["status"] == "FAIL" and "rendezvus" in c["evidence"]
    good = run_doctor("--scenario", "scenarios/node_loss.yaml", "--json", "--no-versions")
    assert good.returncode == 0, good.stdout
    assert {c["name"]: c for c in json.loads(good.stdout)["checks"]}["scenario file"]["status"] == "PASS"


def test_a_library_scenario_reads_its_trainer_config_from_any_working_directory(tmp_path, monkeypatch):
    from chaosbench.doctor import from_scenario
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)           # a user outside the checkout: trainer/configs/... is chaosbench's own
    t = from_scenario(str(repo / "scenarios/checkpoint_corruption.yaml"))
    assert Path(t.trainer_config_file) == repo / "trainer/configs/tiny.yaml"
    assert t.trainer_config["checkpoint"]
