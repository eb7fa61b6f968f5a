"""The leftover finder of the Slurm SIGINT test, without Slurm: `pgrep -f <report dir>` could never
match an srun client (its argv holds the job id, not the run's path), so 'no srun client left' was
never tested. Here stand-ins for each kind of leftover must be found, and nothing else."""
import json
import os
import socket
import subprocess
import sys

from chaosbench.cluster.owner import OWNER_ENV

from .leftovers import left_behind

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_finds_srun_clients_by_job_id_services_by_path_and_children_by_owner(tmp_path):
    run = tmp_path / "reports" / "node_loss-1"
    run.mkdir(parents=True)
    (run / "slurm.json").write_text(json.dumps({"job_id": "4242"}))
    harness = 999_999   # no such process: only the token's form matters
    procs = {
        "srun": subprocess.Popen(SLEEP + ["docker", "exec", "-i", "ctl", "srun", "--jobid=4242", "--overlap"]),
        "service": subprocess.Popen(SLEEP + [f"--data-dir={run}/nodes/etcd-data"]),
        "owned": subprocess.Popen(SLEEP, env={**os.environ,
                                               OWNER_ENV: f"{socket.gethostname()}:{harness}:12345"}),
        "other job": subprocess.Popen(SLEEP + ["srun", "--jobid=42421"]),
        "other owner": subprocess.Popen(SLEEP, env={**os.environ, OWNER_ENV: f"{socket.gethostname()}:{harness}1:1"}),
    }
    try:
        found = {line.split(":", 1)[0] for line in left_behind(tmp_path / "reports", harness)}
        want = {str(procs[k].pid) for k in ("srun", "service", "owned")}
        assert found == want, (found, {k: p.pid for k, p in procs.items()})
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
    assert left_behind(tmp_path / "reports", harness) == []
