"""The Slurm backend against a real Slurm 22.05 cluster in containers (controller + 3 compute nodes):
library scenarios with the same checks as docker, Ctrl-C cleanup, and a forbidden fault refused
before any allocation. One test cluster per module (bringing it up costs ~30 s, the image once).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaosbench.cluster.docker.cli import docker_unusable

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.chaos, pytest.mark.docker, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def slurm_env():
    why = docker_unusable()
    if why:
        pytest.skip(f"the Slurm test cluster runs in docker: {why}")
    from chaosbench.cluster.slurm.testcluster import TestCluster
    tc = TestCluster(computes=3)
    try:
        tc.up()
        yield {**os.environ, **tc.env(), "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}, tc
    finally:
        tc.down()
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=io.chaosbench.slurm={tc.name}"],
                          capture_output=True, text=True, timeout=60).stdout.split()
    assert not left, f"test cluster containers left behind: {left}"


def _squeue(tc, steps: bool = False) -> str:
    """Jobs (or, with steps=True, job steps, named after their node) still known to Slurm."""
    return subprocess.run(["docker", "exec", f"{tc.name}-slurmctl", "squeue", "-h", *(["-s"] if steps else []),
                           "-o", "%i %j"], capture_output=True, text=True, timeout=60).stdout.strip()


def _iptables_left(tc) -> dict[str, str]:
    """Our iptables rules still on a compute node (a Slurm node outlives the run, unlike a container)."""
    left = {}
    for host in tc.hosts:
        rules = subprocess.run(["docker", "exec", f"{tc.name}-{host}", "iptables", "-S"], capture_output=True,
                               text=True, timeout=60).stdout
        if "CHAOSBENCH" in rules:
            left[host] = rules
    return left


def _dirs_left(tc) -> dict[str, str]:
    """The run's directories still on a compute node (/dev/shm and the scratch, `chaosbench-<project>`)."""
    left = {}
    for host in tc.hosts:
        found = subprocess.run(["docker", "exec", f"{tc.name}-{host}", "sh", "-c",
                                "ls -d /dev/shm/chaosbench-* /scratch/chaosbench-* 2>/dev/null"],
                               capture_output=True, text=True, timeout=60).stdout.strip()
        if found:
            left[host] = found
    return left


def _run(scenario: Path, report_dir: Path, env: dict) -> tuple[subprocess.CompletedProcess, Path, dict]:
    cmd = [sys.executable, "-m", "chaosbench.cli", "run", str(scenario), "--backend", "slurm",
           "--report-dir", str(report_dir), "--quiet", "--seed", "1"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1100)
    (run_dir,) = list(report_dir.iterdir())
    return proc, run_dir, json.loads((run_dir / "result.json").read_text())


@pytest.mark.parametrize("name,tier", [("node_loss", "memory"), ("network_partition", "memory"),
                                       ("total_failure_restart", "nvme")])
def test_library_scenario_passes_on_slurm(slurm_env, tmp_path, name, tier):
    env, tc = slurm_env
    proc, run_dir, result = _run(ROOT / "scenarios" / f"{name}.yaml", tmp_path, env)
    assert proc.returncode == 0, f"report: {run_dir}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert result["verdict"] == "passed"
    assert result["recoveries"] and result["recoveries"][0]["tier"] == tier
    assert all(c["status"] == "passed" for c in result["checks"])
    slurm = json.loads((run_dir / "harness.json").read_text())["slurm"]
    assert slurm["job_id"].isdigit() and len(slurm["hosts"]) >= 3
    assert all(step.startswith(slurm["job_id"] + ".") for steps in slurm["steps"].values() for step in steps)
    report = (run_dir / "report.html").read_text()
    assert f"job {slurm['job_id']}; steps node-0 on " in report, "the report names the Slurm job and its steps"
    assert _squeue(tc) == "", "the allocation is released after the run"
    assert _iptables_left(tc) == {}, "partition rules are removed before the allocation is released"
    assert _dirs_left(tc) == {}, "the run's directories are removed from every host before the allocation goes"


def test_node_loss_without_a_shared_filesystem_streams_the_history_through_srun(slurm_env, tmp_path):
    env, tc = slurm_env
    env = {k: v for k, v in env.items() if k != "CHAOSBENCH_SLURM_SHARED"}
    proc, run_dir, result = _run(ROOT / "scenarios" / "node_loss.yaml", tmp_path, env)
    assert proc.returncode == 0, f"report: {run_dir}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert result["recoveries"] and result["recoveries"][0]["tier"] == "memory"
    assert all(c["status"] == "passed" for c in result["checks"])
    assert sorted(p.name for p in (run_dir / "events").glob("events-node-*.jsonl")) == [
        f"events-node-{i}-local0.jsonl" for i in range(3)]
    assert _squeue(tc) == ""


DISCONNECT = """\
name: slurm_disconnect
cluster:
  nodes: 3
  elastic: {min_nodes: 2, max_nodes: 3}
  rendezvous: c10d
  rdzv_timeouts: {keep_alive_interval: 1, keep_alive_max_attempt: 3, last_call_timeout: 5, join_timeout: 120}
  env: {TORCH_DISABLE_SHARE_RDZV_TCP_STORE: "1"}
trainer:
  config: trainer/configs/tiny.yaml
  overrides: {checkpoint.memory_snapshot_interval: 5, elastic.health_check_timeout_s: 5.0, training.step_sleep_s: 0.1}
faults:
  - at: {step: 20}
    disconnect: {node: node-2}
expect: {recovered_from: memory, max_lost_steps: 5, max_recovery_seconds: 40, world_size_after: 2, reaches_step: 70}
"""


def test_disconnect_is_loud_and_survivors_resume_from_memory(slurm_env, tmp_path):
    env, tc = slurm_env
    scenario = tmp_path / "disconnect.yaml"
    scenario.write_text(DISCONNECT.replace("trainer/configs/tiny.yaml", str(ROOT / "trainer/configs/tiny.yaml")))
    proc, run_dir, result = _run(scenario, tmp_path / "reports", env)
    assert proc.returncode == 0, f"report: {run_dir}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert result["recoveries"][0]["tier"] == "memory" and result["recoveries"][0]["world_size_after"] == 2
    assert _squeue(tc) == "" and _iptables_left(tc) == {} and _dirs_left(tc) == {}


SERVICES_ON_NODE = """\
name: slurm_services_on_a_node
cluster:
  nodes: 2
  elastic: {min_nodes: 1, max_nodes: 2}
  rendezvous: etcd-v3
  rdzv_timeouts: {keep_alive_interval: 1, keep_alive_max_attempt: 3, last_call_timeout: 2, join_timeout: 120}
  slurm: {services: node}
trainer:
  config: trainer/configs/tiny.yaml
  overrides: {checkpoint.memory_snapshot_interval: 5, training.step_sleep_s: 0.1}
faults:
  - at: {step: 15}
    pause_service: {service: s3}
    duration_s: 3
  - at: {step: 30}
    kill_node: {node: node-1}
expect: {recovered_from: memory, max_lost_steps: 5, world_size_after: 1, reaches_step: 70}
"""


def test_services_on_a_node_of_the_allocation(slurm_env, tmp_path):
    """etcd, S3 and the proxy on a third host of the allocation (one srun step), service faults through
    its control API, the etcd-v3 rendezvous against it."""
    env, tc = slurm_env
    scenario = tmp_path / "services.yaml"
    scenario.write_text(SERVICES_ON_NODE)
    proc, run_dir, result = _run(scenario, tmp_path / "reports", env)
    assert proc.returncode == 0, f"report: {run_dir}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    slurm = json.loads((run_dir / "harness.json").read_text())["slurm"]
    assert slurm["services"]["mode"] == "node"
    assert slurm["services"]["host"] not in slurm["hosts"].values(), slurm
    pause = result["faults"][0]
    assert pause["type"] == "pause_service" and pause["healed_at"] and not pause["error"], pause
    assert all(f["verdict"] == "passed" for f in result["faults"]), result["faults"]
    assert _squeue(tc) == ""


def test_forbidden_fault_is_refused_before_allocation(slurm_env, tmp_path):
    env, tc = slurm_env
    proc, run_dir, result = _run(ROOT / "scenarios" / "network_partition.yaml", tmp_path,
                                 {**env, "CHAOSBENCH_SLURM_FORBID": "partition"})
    assert proc.returncode == 3, proc.stdout[-2000:]
    assert "partition is forbidden" in result["error"] and "NET_ADMIN" in result["error"]
    assert not (run_dir / "slurm.json").exists(), "nothing was allocated"
    assert _squeue(tc) == ""


def test_sigint_mid_run_releases_the_allocation(slurm_env, tmp_path):
    env, tc = slurm_env
    cmd = [sys.executable, "-m", "chaosbench.cli", "run", str(ROOT / "scenarios" / "node_loss.yaml"),
           "--backend", "slurm", "--report-dir", str(tmp_path), "--quiet"]
    # a suite started in the background by a shell without job control inherits SIGINT ignored, and so
    # would the harness; a terminal's Ctrl-C reaches a foreground harness with its default handler
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and "node-0" not in _squeue(tc, steps=True):
            time.sleep(1)
        assert "node-0" in _squeue(tc, steps=True), "training steps never started"
        time.sleep(5)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-2000:]
    assert _squeue(tc) == "" and _squeue(tc, steps=True) == "", f"left in squeue:\n{_squeue(tc, True)}\n{out[-2000:]}"
    from .leftovers import left_behind   # by path, by --jobid (srun clients: no path in their argv), by owner
    left = left_behind(tmp_path, proc.pid)
    assert not left, "no harness-started process (etcd, S3, proxy, srun client) is left:\n" + "\n".join(left)


def test_the_users_own_job_on_a_shared_filesystem_recovers_on_slurm(slurm_env, tmp_path):
    import shutil

    import yaml
    env, tc = slurm_env
    project = Path(env["CHAOSBENCH_SLURM_SHARED"]) / f"byo-{tmp_path.name}"   # where every node sees it
    shutil.copytree(ROOT / "examples" / "byo_ddp", project)
    sc = yaml.safe_load((project / "scenarios" / "node_loss_instrumented.yaml").read_text())
    sc["trainer"]["workdir"] = str(project)
    path = tmp_path / "byo_slurm.yaml"
    path.write_text(yaml.safe_dump(sc))
    proc, run_dir, result = _run(path, tmp_path / "reports", env)
    assert proc.returncode == 0, f"report: {run_dir}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert {c["name"]: c["status"] for c in result["checks"]}["recovered_from"] == "passed"
    assert result["recoveries"][0]["tier"] == "nvme" and result["recoveries"][0]["world_size_after"] == 2
    assert _squeue(tc) == ""
