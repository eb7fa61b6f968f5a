"""What a Slurm run left running on this host, found three ways, because no one alone sees all:
- the report directory in a process's argv (services started with their data dirs under it);
- the run's Slurm job id (`--jobid=N`, from slurm.json) in its argv: `srun` clients (and the
  `docker exec ... srun` / `ssh ... srun` wrappers that reach the login node) carry the job id but
  no path of the run;
- the harness's owner token in its environment (CHAOSBENCH_OWNER, `host:pid:start`; inherited by
  everything the backend starts after allocating)."""
from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

from chaosbench.cluster.owner import OWNER_ENV


def left_behind(report_dir: Path, harness_pid: int) -> list[str]:
    """'pid: argv' of every process still running that belongs to the run under report_dir."""
    patterns = [re.escape(str(report_dir))]
    for rec in Path(report_dir).glob("*/slurm.json"):
        job = str(json.loads(rec.read_text()).get("job_id") or "")
        if job.isdigit():
            patterns.append(rf"--jobid[= ]{job}(?!\d)")
    argv_rx = re.compile("|".join(patterns))
    owner = f"{OWNER_ENV}={socket.gethostname()}:{harness_pid}:".encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            argv = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue   # gone meanwhile
        try:
            env = (d / "environ").read_bytes()
        except OSError:
            env = b""   # another user's process: its argv still counts
        if argv and (argv_rx.search(argv) or _has(env, owner)):
            out.append(f"{d.name}: {argv[:300]}")
    return out


def _has(env: bytes, prefix: bytes) -> bool:
    return any(kv.startswith(prefix) for kv in env.split(b"\0"))
