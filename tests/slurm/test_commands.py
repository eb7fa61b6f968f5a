"""Unit tests: the sbatch/srun argv the backend sends, output parsing, slurm.conf, refusal up front."""
from pathlib import Path

import pytest

from chaosbench.cluster.base import ClusterError, ClusterSpec
from chaosbench.cluster.slurm import backend as slurm_backend
from chaosbench.cluster.slurm.commands import (Allocation, parse_job_id, parse_steps, sbatch_argv,
                                               srun_argv, unusable)
from chaosbench.cluster.slurm.conf import compute_hosts, slurm_conf


def test_sbatch_argv_holds_an_allocation_with_site_options():
    a = Allocation(nodes=3, job_name="chaosbench-x", partition="gpu", account="ml", time="00:30:00",
                   gpus_per_node=8, comment="host:1:2", extra=["--qos=high"])
    argv = sbatch_argv(a)
    assert argv[:2] == ["sbatch", "--parsable"]
    for opt in ("--nodes=3", "--partition=gpu", "--account=ml", "--time=00:30:00", "--gpus-per-node=8",
                "--comment=host:1:2", "--qos=high", "--job-name=chaosbench-x"):
        assert opt in argv
    assert argv[-2:] == ["--wrap", "exec sleep infinity"]   # options before the wrapped command


def test_sbatch_argv_leaves_out_unset_options():
    argv = sbatch_argv(Allocation(nodes=1, job_name="j"))
    assert not any(a.startswith(("--partition", "--account", "--time", "--gpus")) for a in argv)


def test_srun_argv_one_overlapping_step_on_one_node_with_explicit_env():
    argv = srun_argv("42", "c2", "node-1", {"B": "2", "A": "1"}, ["python3", "-m", "x"], cwd="/src")
    assert argv[0] == "srun"
    for opt in ("--jobid=42", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=c2", "--job-name=node-1",
                "--chdir=/src"):
        assert opt in argv
    i = argv.index("env")
    assert argv[i + 1:] == ["A=1", "B=2", "python3", "-m", "x"]


def test_parse_job_and_steps():
    assert parse_job_id("17\n") == "17"
    assert parse_job_id("17;cluster\n") == "17"
    with pytest.raises(ClusterError, match="no job id"):
        parse_job_id("sbatch: error: bad partition")
    assert parse_steps("17.0 node-0\n17.1 node-1\n17.batch batch\n") == {
        "node-0": "17.0", "node-1": "17.1", "batch": "17.batch"}


def test_slurm_conf_names_every_compute_node_and_tracks_process_trees():
    conf = slurm_conf(compute_hosts(3))
    assert "NodeName=slurmc1,slurmc2,slurmc3 CPUs=2" in conf
    assert "ProctrackType=proctrack/linuxproc" in conf   # signals reach workers in their own sessions
    assert "AuthType=auth/munge" in conf and "PartitionName=debug Nodes=ALL Default=YES" in conf


def test_unusable_names_the_missing_login(monkeypatch):
    monkeypatch.delenv("CHAOSBENCH_SLURM_LOGIN", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert "sbatch not found" in unusable()
    monkeypatch.setenv("CHAOSBENCH_SLURM_LOGIN", "nosuchtool-xyz host")
    assert "nosuchtool-xyz" in unusable()


def test_forbidden_fault_is_dropped_with_the_permission_it_needs(monkeypatch, tmp_path):
    monkeypatch.setenv("CHAOSBENCH_SLURM_SHARED", str(tmp_path))
    monkeypatch.setenv("CHAOSBENCH_SLURM_FORBID", "partition")
    c = slurm_backend.SlurmCluster(ClusterSpec(run_id="r", run_dir=tmp_path, nodes=2))
    assert "partition" not in c.supported_faults and "kill_node" in c.supported_faults
    assert "NET_ADMIN" in c.refusal_hint


def test_no_shared_filesystem_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.delenv("CHAOSBENCH_SLURM_SHARED", raising=False)
    with pytest.raises(ClusterError, match="CHAOSBENCH_SLURM_SHARED"):
        slurm_backend.SlurmCluster(ClusterSpec(run_id="r", run_dir=tmp_path, nodes=2))


def test_scenario_slurm_block_is_validated_with_the_field_named(tmp_path):
    from chaosbench.scenario import ScenarioError, load_scenario
    p = tmp_path / "s.yaml"
    p.write_text("name: s\ntrainer: {config: trainer/configs/tiny.yaml}\n"
                 "cluster: {nodes: 2, slurm: {time: soon, gpu_per_node: 2}}\nexpect: {reaches_step: 5}\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    text = "\n".join(e.value.problems)
    assert str(p) in text and "cluster.slurm.time" in text and "cluster.slurm.gpu_per_node" in text, text


def test_cli_refuses_bad_slurm_flags_with_exit_2(tmp_path):
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-m", "chaosbench.cli", "run", str(root / "scenarios" / "node_loss.yaml"),
                        "--backend", "slurm", "--slurm-time", "soon", "--sbatch-option", "qos=low"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert "--slurm-time: 'soon'" in out and "--sbatch-option: 'qos=low'" in out, out
