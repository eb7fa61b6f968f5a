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

SLEEP = [sys.executable, "-c", "import time; print(1, flush=True); time.sleep(60)"]


def _started(**kw) -> subprocess.Popen:
    """A stand-in that has finished its exec: Popen may return while the kernel is still setting up the
    new image, and /proc then shows an empty cmdline and environ (the finder would miss it, rightly)."""
    p = subprocess.Popen(stdout=subprocess.PIPE, **kw)
    p.stdout.readline()
    return p


def test_finds_srun_clients_by_job_id_services_by_path_and_children_by_owner(tmp_path):
    run = tmp_path / "reports" / "node_loss-1"
    run.mkdir(parents=True)
    (run / "slurm.json").write_text(json.dumps({"job_id": "4242"}))
    harness = 999_999   # no such process: only the token's form matters
    procs = {
        "srun": _started(args=SLEEP + ["docker", "exec", "-i", "ctl", "srun", "--jobid=4242", "--overlap"]),
        "service": _started(args=SLEEP + [f"--data-dir={run}/nodes/etcd-data"]),
        "owned": _started(args=SLEEP, env={**os.environ, OWNER_ENV: f"{socket.gethostname()}:{harness}:12345"}),
        "other job": _started(args=SLEEP + ["srun", "--jobid=42421"]),
        "other owner": _started(args=SLEEP, env={**os.environ, OWNER_ENV: f"{socket.gethostname()}:{harness}1:1"}),
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
