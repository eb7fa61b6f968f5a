"""The job's own packages on Slurm (trainer.requirements): the nodes run the site's python, which
chaosbench does not install into. So the allocation's python is checked for them before any node
starts, through a step on a node host, with the prefix a site may share (CHAOSBENCH_SLURM_JOBENV: a
prefix on shared storage, made once with `python -m chaosbench.cluster.jobenv install --prefix DIR`)
put in front of the job's PYTHONPATH as on the other backends (docs/slurm.md)."""
from __future__ import annotations

import os

from chaosbench.cluster import jobenv
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.jobenv import probe
from chaosbench.cluster.slurm.commands import Slurm, srun_argv

PREFIX_ENV = "CHAOSBENCH_SLURM_JOBENV"


def with_prefix(env: dict[str, str]) -> dict[str, str]:
    """The node's environment with the shared job prefix in front, where the site names one."""
    prefix = os.environ.get(PREFIX_ENV)
    return jobenv.job_env(env, prefix) if prefix else env


def check(slurm: Slurm, job_id: str, host: str, python: str, reqs: list[str], origin: str, cwd: str) -> list[str]:
    """name==version of `reqs` as the allocation's python finds them on `host`; ClusterError naming what
    is missing and the two ways to provide it."""
    out = slurm.run(*srun_argv(job_id, host, "chaosbench-requirements", with_prefix({}), [python, "-c", probe.source(reqs)],
                               cwd), timeout=180, check=False)
    lacking = probe.missing(out or "")
    if lacking is None:
        raise ClusterError(f"could not check the job's requirements on {host} with {python} "
                           f"(CHAOSBENCH_SLURM_PYTHON): {(out or 'no output').strip()[-300:]}")
    if lacking:
        raise ClusterError(
            f"{python} on {host} lacks {', '.join(lacking)} of the job's requirements ({origin}): on Slurm the "
            f"nodes run the site's python and chaosbench installs nothing there. Install them into a venv on "
            f"shared storage and set CHAOSBENCH_SLURM_PYTHON to its python, or make a prefix there once "
            f"(`python -m chaosbench.cluster.jobenv install --prefix DIR -r requirements.txt` with that python) "
            f"and set {PREFIX_ENV}=DIR (docs/slurm.md)")
    return probe.versions(out)
