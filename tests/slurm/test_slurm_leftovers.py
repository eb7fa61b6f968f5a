"""Against a real Slurm cluster in containers (~30 s to bring up): the sweep of a dead harness's job
removes the fault chain from its compute hosts, and a login prefix that is a remote shell gets
every word of an srun command intact."""
from __future__ import annotations

import os
import subprocess

import pytest

from chaosbench.cluster.docker.cli import docker_unusable

pytestmark = [pytest.mark.chaos, pytest.mark.docker, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def tc():
    why = docker_unusable()
    if why:
        pytest.skip(f"the Slurm test cluster runs in docker: {why}")
    from chaosbench.cluster.slurm.testcluster import TestCluster
    cluster = TestCluster(computes=2)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()


def _wait_running(slurm, job):
    import time
    for _ in range(240):
        if slurm.run("squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING":
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job} not running after 120 s")


def _sh(tc, host, script):
    return subprocess.run(["docker", "exec", f"{tc.name}-{host}", "sh", "-c", script], capture_output=True,
                          text=True, timeout=60)


def test_sweep_removes_a_killed_harness_chain_from_every_host_of_its_job(tc, monkeypatch):
    from chaosbench.cluster.slurm.allocation import sweep
    from chaosbench.cluster.slurm.commands import Allocation, Slurm, parse_job_id, sbatch_argv
    for k, v in tc.env().items():
        monkeypatch.setenv(k, v)
    slurm = Slurm()
    dead_owner = f"{os.uname().nodename}:999999999:1"   # this host, a pid that is gone: a SIGKILLed harness
    job = parse_job_id(slurm.run(*sbatch_argv(Allocation(nodes=2, job_name="chaosbench-leftover",
                                                         comment=dead_owner))))
    _wait_running(slurm, job)
    for host in tc.hosts:   # what a partition leaves when the harness dies before healing it
        assert _sh(tc, host, "iptables -N CHAOSBENCH && iptables -I INPUT -j CHAOSBENCH && "
                             "iptables -A CHAOSBENCH -s 10.255.255.1 -j DROP").returncode == 0
    removed = {}
    assert sweep(slurm, removed=removed) == [job]
    left = {h: _sh(tc, h, "iptables -S").stdout for h in tc.hosts}
    assert not [h for h, rules in left.items() if "CHAOSBENCH" in rules], left
    assert sorted(removed["slurm fault rules"]) == sorted(f"{h} (job {job})" for h in tc.hosts)


def test_a_remote_shell_login_prefix_delivers_awkward_words_through_srun(tc, monkeypatch):
    """`docker exec -i ctl sh -c` joined with the command is what ssh does: one string for a shell."""
    from chaosbench.cluster.slurm.commands import Allocation, Slurm, parse_job_id, sbatch_argv, step_argv
    monkeypatch.setenv("CHAOSBENCH_SLURM_LOGIN_SHELL", "1")
    slurm = Slurm(["docker", "exec", "-i", f"{tc.name}-slurmctl", "sh", "-c"])
    job = parse_job_id(slurm.run(*sbatch_argv(Allocation(nodes=1, job_name="chaosbench-quote"))))
    try:
        _wait_running(slurm, job)
        words = ["step (?P<step>\\d+)", "x; touch /tmp/pwned", "it's \"q\"", "a  b", "$(id)", "*"]
        out = slurm.run(*step_argv(job, tc.hosts[0], "quote"), "printf", "%s\\n", *words, timeout=120)
        assert out.split("\n")[:-1] == words
        assert _sh(tc, "slurmctl", "test -e /tmp/pwned").returncode != 0
    finally:
        slurm.run("scancel", job, check=False)
