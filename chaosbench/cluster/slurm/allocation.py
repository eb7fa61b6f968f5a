"""The Slurm allocation's lifecycle: submit the placeholder job, wait until it runs, wait for a
node's step, cancel the job and see it gone; and the sweep of jobs whose harness is gone.

Plain functions over (Slurm, job id): the cluster (backend.py) keeps the state, these talk to Slurm.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from chaosbench.cluster.node import scripts
from chaosbench.cluster import owner as owner_mod
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.slurm.commands import (Allocation, Slurm, every_host_argv, parse_job_id, parse_steps,
                                               remove_argv, roots, sbatch_argv, setting)

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


def end_steps(slurm: Slurm, job_id: str, timeout: float = 30) -> bool:
    """Cancel every step of the job but the allocation's own (batch, extern) and wait until they are
    gone, so nothing of the run still writes on its hosts; True once they are."""
    deadline = time.monotonic() + timeout
    sent = False
    while True:
        out = slurm.run("squeue", "-h", "-s", "-j", job_id, "-o", "%i", check=False)
        steps = [s for s in out.split() if "." in s and not s.endswith((".batch", ".extern"))]
        if not steps:
            return True
        if time.monotonic() > deadline:
            return False
        if not sent:
            slurm.run("scancel", *steps, check=False)
            sent = True
        time.sleep(0.3)


def remove_node_dirs(slurm: Slurm, job_id: str, nodelist: str, count: int, project: str, scratch: str,
                     python: str) -> tuple[list[str], str | None]:
    """Remove the run's directories (/dev/shm and scratch: node_dirs.py) on every host of the running job,
    once its steps are gone: ('<host>: removed <dir>' lines, None) or (what it said, why it failed)."""
    if not end_steps(slurm, job_id):
        print(f"chaosbench: steps of Slurm job {job_id} still listed 30 s after scancel; removing the run's "
              f"directories anyway", file=sys.stderr)
    try:
        out = slurm.run(*every_host_argv(job_id, nodelist, count, "chaosbench-clean"),
                        *remove_argv(python, roots(project, scratch)), timeout=120)
    except ClusterError as exc:
        return [], str(exc)[-400:]
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    for line in lines:
        if ": kept " in line:   # a directory of that name that is not ours: this run never used it
            print(f"chaosbench: {line}", file=sys.stderr)
    return [line for line in lines if ": removed " in line], None


def sweep(slurm: Slurm, everything: bool = False, removed: dict | None = None) -> list[str]:
    """Cancel allocations of dead harnesses (every chaosbench job with everything=True): each job
    carries its owner token in its comment. A killed harness may have left a partition's iptables
    chain and its directories (/dev/shm, scratch) on its compute hosts, which outlive the job: while
    the allocation still runs, steps on its hosts remove them first (listed in removed['slurm fault
    rules'] and removed['slurm node dirs']). The scratch is this process's $CHAOSBENCH_SLURM_SCRATCH."""
    out = slurm.run("squeue", "-h", "-o", "%i|%j|%T|%N|%k", check=False)
    removed = {} if removed is None else removed
    dead = []
    for line in out.splitlines():
        parts = line.split("|", 4)
        if len(parts) == 5 and parts[1].startswith("chaosbench-") and \
                (everything or not owner_mod.alive(parts[4].strip())):
            dead.append(parts[0])
            if parts[2] == "RUNNING" and parts[3].strip():
                _release(slurm, parts[0], parts[1].removeprefix("chaosbench-"), parts[3].strip(), removed)
    if dead:
        slurm.run("scancel", *dead, check=False)
    return dead


def _release(slurm: Slurm, job_id: str, project: str, nodelist: str, removed: dict) -> None:
    """A dead harness's running job: its fault chain and its directories off every host, said either way."""
    healed = heal_job_hosts(slurm, job_id, nodelist)
    if healed:
        removed.setdefault("slurm fault rules", []).extend(healed)
    try:
        count = len(slurm.run("scontrol", "show", "hostnames", nodelist).split())
        gone, why = remove_node_dirs(slurm, job_id, nodelist, count, project, setting("SCRATCH", "/tmp"),
                                     setting("PYTHON", "python3"))
    except ClusterError as exc:
        gone, why = [], str(exc)[-300:]
    if why:
        print(f"chaosbench: directories of Slurm job {job_id} on {nodelist} may be left: {why}", file=sys.stderr)
    if gone:
        removed.setdefault("slurm node dirs", []).extend(f"{line} (job {job_id})" for line in gone)


def heal_job_hosts(slurm: Slurm, job_id: str, nodelist: str) -> list[str]:
    """Remove our iptables chain once on every host of a job (one task per host); the hosts healed.
    A failure is said, not hidden: the rules may then be left on those hosts."""
    try:
        hosts = slurm.run("scontrol", "show", "hostnames", nodelist).split()
        slurm.run(*every_host_argv(job_id, nodelist, len(hosts), "chaosbench-clean"), *scripts.HEAL.argv("python3"),
                  timeout=120)
        return [f"{h} (job {job_id})" for h in hosts]
    except ClusterError as exc:
        print(f"chaosbench: iptables chain {scripts.CHAIN} on the hosts of Slurm job {job_id} ({nodelist}) "
              f"may be left: {str(exc)[-300:]}", file=sys.stderr)
        return []
