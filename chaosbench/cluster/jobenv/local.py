"""The local backend's (and a shared-storage Slurm's) job prefix: the job's packages installed once into
`<cache>/jobenv/<hash>` with the harness's python, put in front on PYTHONPATH/PATH (env.job_env).

Keyed by the python, the venv's locked package set (images.lock_requirements, which the node image
follows too) and the requirements: a venv change or a new list gets a new prefix, a repeated run finds
its prefix and pays a directory check. Made in a temporary directory beside it and renamed into place,
so a failed or interrupted install leaves nothing a later run would take for finished.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chaosbench.cluster.docker import images
from chaosbench.cluster.jobenv import env as env_mod, probe, resolve

DONE = ".complete"


def _log(msg: str) -> None:
    print(f"jobenv: {msg}", file=sys.stderr, flush=True)


def prefix_dir(reqs: list[str], python: str = sys.executable) -> Path:
    return images.CACHE / "jobenv" / images._sha("jobenv-1", python, images.lock_requirements(), *reqs)


def local_prefix(reqs: list[str], origin: str = "", python: str = sys.executable) -> Path:
    """The ready prefix holding `reqs` for `python` (installing it the first time)."""
    target = prefix_dir(reqs, python)
    if (target / DONE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f"{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # two harnesses installing the same prefix: one does, one waits
        if (target / DONE).is_file():
            return target
        for half in target.parent.glob(f".{target.name}-*"):   # a killed install's: we hold its lock now
            shutil.rmtree(half, ignore_errors=True)
        install(reqs, target, origin, python)
    return target


def install(reqs: list[str], target: Path, origin: str = "", python: str = sys.executable) -> list[str]:
    """`reqs` installed into the prefix `target` for `python` (made beside it, renamed into place);
    returns name==version of what the job will import from there."""
    t0 = time.monotonic()
    _log(f"installing {', '.join(reqs)} into {target} (once; later runs reuse it)")
    pins = resolve.fetch(reqs, images.CACHE / "wheels", origin, python)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        (tmp / "requirements.txt").write_text("".join(p + "\n" for p in pins))
        if pins:
            argv = env_mod.install_argv(python, str(images.CACHE / "wheels"), str(tmp), str(tmp / "requirements.txt"))
            out = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
            if out.returncode != 0:
                raise resolve.failed("pip could not install", reqs, origin, out.stdout + out.stderr)
        subprocess.run(["sh", "-c", env_mod.link_site(str(tmp))], check=True, timeout=60)
        # the versions the job will import (its requirements and what came with them): the report's list
        found = subprocess.run([python, "-c", probe.source(reqs + pins)], capture_output=True, text=True,
                               timeout=120, env=env_mod.job_env(os.environ, tmp))
        versions = probe.versions(found.stdout)
        (tmp / DONE).write_text("".join(p + "\n" for p in versions))
        tmp.chmod(0o755)   # mkdtemp's 0700: a prefix on shared storage is read by the job's other users
        shutil.rmtree(target, ignore_errors=True)   # a half-made one from a killed install
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _log(f"{target} ready in {time.monotonic() - t0:.1f}s: {', '.join(versions) or 'nothing missing'}")
    return versions


def prefix_packages(prefix: Path) -> list[str]:
    """name==version of the job's packages in a prefix, as its install found them."""
    try:
        return (prefix / DONE).read_text().split()
    except OSError:
        return []
