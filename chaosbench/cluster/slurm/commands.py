"""Slurm's commands, run on a login node: directly, or through a prefix such as `ssh login` at a site
or `docker exec -i <controller>` for the test cluster ($CHAOSBENCH_SLURM_LOGIN).

Only argv building and output parsing live here, so they can be unit-tested without a cluster.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field

from pathlib import Path

from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.node.scripts import Script

LOGIN_ENV = "CHAOSBENCH_SLURM_LOGIN"
# A prefix whose program hands its arguments to a shell on the far side (ssh joins them with spaces and
# runs `$SHELL -c` on them): every word must then be quoted for that shell, or a progress regex, a
# trainer argument with a space or `;`, an iptables script would be re-split and run there.
# `docker exec`, `kubectl exec --`, `sudo` pass argv through and get it unchanged.
REMOTE_SHELLS = ("ssh", "rsh", "autossh")
SHELL_ENV = "CHAOSBENCH_SLURM_LOGIN_SHELL"   # 1/0: force either way for a wrapper we do not recognise


def setting(name: str, default: str | None = None) -> str | None:
    """$CHAOSBENCH_SLURM_<name>: the site's settings (docs/slurm.md)."""
    return os.environ.get(f"CHAOSBENCH_SLURM_{name}", default)


def login_prefix() -> list[str]:
    return shlex.split(os.environ.get(LOGIN_ENV, ""))


def remote_shell(prefix: list[str]) -> bool:
    """Does this login prefix run its arguments through a remote shell?"""
    forced = os.environ.get(SHELL_ENV, "").strip().lower()
    if forced in ("1", "true", "yes"):
        return True
    if forced in ("0", "false", "no"):
        return False
    return bool(prefix) and os.path.basename(prefix[0]) in REMOTE_SHELLS


def unusable() -> str | None:
    """None if Slurm's commands can be run from here, else why not (for `available_backends`)."""
    prefix = login_prefix()
    if prefix:
        return None if shutil.which(prefix[0]) else f"${LOGIN_ENV} runs {prefix[0]!r}, which is not installed"
    if shutil.which("sbatch"):
        return None
    return (f"sbatch not found: run on a Slurm login node, or set ${LOGIN_ENV} to a command prefix that "
            f"reaches one (e.g. 'ssh login1')")


@dataclass
class Allocation:
    """What `sbatch` asks for; `extra` holds further sbatch options verbatim (scenario/CLI)."""
    nodes: int
    job_name: str
    partition: str | None = None
    account: str | None = None
    time: str | None = None
    gpus_per_node: int | None = None
    comment: str | None = None       # the harness's owner token: a later sweep cancels a dead harness's job
    extra: list[str] = field(default_factory=list)


def sbatch_argv(a: Allocation) -> list[str]:
    """A placeholder batch job holds the allocation; every node gets its own step inside it."""
    argv = ["sbatch", "--parsable", f"--nodes={a.nodes}", "--ntasks-per-node=1", f"--job-name={a.job_name}",
            "--output=/dev/null", "--exclusive"]
    if a.partition:
        argv.append(f"--partition={a.partition}")
    if a.account:
        argv.append(f"--account={a.account}")
    if a.time:
        argv.append(f"--time={a.time}")
    if a.gpus_per_node:
        argv.append(f"--gpus-per-node={a.gpus_per_node}")
    if a.comment:
        argv.append(f"--comment={a.comment}")
    return [*argv, *a.extra, "--wrap", "exec sleep infinity"]


def step_argv(job_id: str, host: str, step_name: str, cwd: str | None = None) -> list[str]:
    """`srun` options for one task on one host of the job; `--overlap` lets it run beside the others
    (a node's training step, fault and probe steps, the history stream, the services)."""
    return ["srun", f"--jobid={job_id}", "--overlap", "--nodes=1", "--ntasks=1", f"--nodelist={host}",
            f"--job-name={step_name}", *([f"--chdir={cwd}"] if cwd else [])]


def srun_argv(job_id: str, host: str, step_name: str, env: dict[str, str], argv: list[str],
              cwd: str | None = None) -> list[str]:
    """A node's step; the env is set explicitly with `env`, so the node runs exactly node_plan's
    environment."""
    return [*step_argv(job_id, host, step_name, cwd), "--kill-on-bad-exit=1", "--quit-on-interrupt",
            "env", *(f"{k}={v}" for k, v in sorted(env.items())), *argv]


def every_host_argv(job_id: str, nodelist: str, count: int, step_name: str) -> list[str]:
    """`srun` options for one task on each of `count` hosts of the job (a clean-up on all of them)."""
    return ["srun", f"--jobid={job_id}", "--overlap", f"--nodes={count}", f"--ntasks={count}", "--ntasks-per-node=1",
            f"--nodelist={nodelist}", f"--job-name={step_name}"]


# The run's directories on a compute host: created private (or refused) before a step uses them, removed
# at the end (node_dirs.py, shipped as source: the node's working directory may not hold chaosbench)
NODE_DIRS = Script("node_dirs", "python", Path(__file__).with_name("node_dirs.py").read_text())


def run_root(project: str) -> str:
    """The run's directory name under /dev/shm and the scratch (and the shared filesystem's project dir)."""
    return f"chaosbench-{project}"


def roots(project: str, scratch: str) -> list[tuple[str, str]]:
    """(base, name) of the run's top directories on every compute host."""
    return [("/dev/shm", run_root(project)), (scratch, run_root(project))]


def private_argv(python: str, dirs: list[tuple[str, str]], command: list[str]) -> list[str]:
    """`command`, run once each (base, rel) is a directory of ours that no one else can reach."""
    return NODE_DIRS.argv(python, "make", *(x for pair in dirs for x in pair), "--", *command)


def remove_argv(python: str, dirs: list[tuple[str, str]]) -> list[str]:
    return NODE_DIRS.argv(python, "remove", *(x for pair in dirs for x in pair))


def parse_job_id(sbatch_out: str) -> str:
    """`sbatch --parsable` prints `<id>` or `<id>;<cluster>`."""
    first = sbatch_out.strip().splitlines()[-1] if sbatch_out.strip() else ""
    job = first.split(";")[0].strip()
    if not job.isdigit():
        raise ClusterError(f"sbatch printed no job id: {sbatch_out.strip()!r}")
    return job


def parse_steps(squeue_out: str) -> dict[str, str]:
    """`squeue -h -s -j J -o '%i %j'` lines -> step name -> step id ('12.3')."""
    steps = {}
    for line in squeue_out.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2:
            steps[parts[1].strip()] = parts[0]
    return steps


class Slurm:
    """Runs Slurm commands through the login prefix."""

    def __init__(self, prefix: list[str] | None = None):
        self.prefix = login_prefix() if prefix is None else prefix

    def argv(self, cmd: list[str], stdin: bool = False) -> list[str]:
        """The local argv; through a remote shell the command goes as one quoted string, so the far
        side's shell rebuilds exactly `cmd` (shlex.join) instead of re-splitting it."""
        if remote_shell(self.prefix):
            return [*self.prefix, shlex.join(cmd)]
        return [*self.prefix, *cmd]

    def run(self, *cmd: str, timeout: float = 60, check: bool = True, text: bool = True):
        try:
            p = subprocess.run(self.argv(list(cmd)), capture_output=True, text=text, timeout=timeout,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(f"{' '.join(cmd)[:200]}: no answer within {timeout:g} s") from exc
        if check and p.returncode != 0:
            err = p.stderr if text else p.stderr.decode(errors="replace")
            raise ClusterError(f"{' '.join(cmd)[:300]} failed ({p.returncode}): {err.strip()[-500:]}")
        return p.stdout

    def popen(self, cmd: list[str], log) -> subprocess.Popen:
        return subprocess.Popen(self.argv(cmd), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
