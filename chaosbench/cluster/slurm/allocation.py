"""The Slurm allocation's lifecycle: submit the placeholder job, wait until it runs, wait for a
node's step, cancel the job and see it gone; and the sweep of jobs whose harness is gone.

Plain functions over (Slurm, job id): the cluster (backend.py) keeps the state, these talk to Slurm.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from chaosbench.cluster import innode
from chaosbench.cluster import owner as owner_mod
from chaosbench.cluster.base import ClusterError
from chaosbench.cluster.slurm.commands import Allocation, Slurm, parse_job_id, parse_steps, sbatch_argv

ENDED = ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "COMPLETED")


def submit(slurm: Slurm, request: Allocation) -> str:
    """sbatch the placeholder job (every node gets its own step in it); its job id."""
    return parse_job_id(slurm.run(*sbatch_argv(request)))


def wait_running(slurm: Slurm, job_id: str, timeout: float = 300) -> list[str]:
    """The job's hosts once it runs."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        out = slurm.run("squeue", "-h", "-j", job_id, "-o", "%T|%N|%r", check=False).strip()
        state, nodelist, reason = (out.split("|") + ["", "", ""])[:3]
        if state == "RUNNING":
            return slurm.run("scontrol", "show", "hostnames", nodelist).split()
        if not out or state in ENDED:
            raise ClusterError(f"Slurm job {job_id} ended before starting ({state or 'gone'})")
        time.sleep(0.5)
    raise ClusterError(f"Slurm job {job_id} not running after {timeout:g} s (state {state}; "
                       f"check partition/account/nodes with `squeue -j {job_id}`)")


def await_step(slurm: Slurm, job_id: str, name: str, known: list[str], proc: subprocess.Popen, log: Path,
               timeout: float = 60) -> str:
    """The id of step `name` that is not among `known` (its srun `proc` just started it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        step = parse_steps(slurm.run("squeue", "-h", "-s", "-j", job_id, "-o", "%i %j")).get(name)
        if step and step not in known:
            return step
        if proc.poll() is not None:
            raise ClusterError(f"{name}: srun exited ({proc.returncode}) before its step started; see {log}")
        time.sleep(0.3)
    raise ClusterError(f"{name}: no Slurm step after {timeout:g} s")


def cancel(slurm: Slurm, job_id: str, timeout: float = 60) -> bool:
    """scancel the job (every step with it); True once squeue no longer lists it."""
    try:
        slurm.run("scancel", job_id, timeout=60)
    except ClusterError as exc:
        print(f"chaosbench: scancel {job_id}: {exc}", file=sys.stderr)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not slurm.run("squeue", "-h", "-j", job_id, "-o", "%i", timeout=30).strip():
                return True
        except ClusterError as exc:
            if "Invalid job id" in str(exc):   # already purged from slurmctld's memory
                return True
        time.sleep(0.5)
    return False


def sweep(slurm: Slurm, everything: bool = False, removed: dict | None = None) -> list[str]:
    """Cancel allocations of dead harnesses (every chaosbench job with everything=True): each job
    carries its owner token in its comment. A killed harness may have left a partition's iptables
    chain on its compute hosts, which outlive the job: while the allocation still runs, one step per
    host removes the chain first (the hosts land in removed['slurm fault rules'])."""
    out = slurm.run("squeue", "-h", "-o", "%i|%j|%T|%N|%k", check=False)
    dead = []
    for line in out.splitlines():
        parts = line.split("|", 4)
        if len(parts) == 5 and parts[1].startswith("chaosbench-") and \
                (everything or not owner_mod.alive(parts[4].strip())):
            dead.append(parts[0])
            if parts[2] == "RUNNING" and parts[3].strip():
                healed = heal_job_hosts(slurm, parts[0], parts[3].strip())
                if removed is not None and healed:
                    removed.setdefault("slurm fault rules", []).extend(healed)
    if dead:
        slurm.run("scancel", *dead, check=False)
    return dead


def heal_job_hosts(slurm: Slurm, job_id: str, nodelist: str) -> list[str]:
    """Remove our iptables chain once on every host of a job (one task per host); the hosts healed.
    A failure is said, not hidden: the rules may then be left on those hosts."""
    try:
        hosts = slurm.run("scontrol", "show", "hostnames", nodelist).split()
        n = str(len(hosts))
        slurm.run("srun", f"--jobid={job_id}", "--overlap", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1",
                  f"--nodelist={nodelist}", "--job-name=chaosbench-clean", *innode.HEAL.argv("python3"),
                  timeout=120)
        return [f"{h} (job {job_id})" for h in hosts]
    except ClusterError as exc:
        print(f"chaosbench: iptables chain {innode.CHAIN} on the hosts of Slurm job {job_id} ({nodelist}) "
              f"may be left: {str(exc)[-300:]}", file=sys.stderr)
        return []
