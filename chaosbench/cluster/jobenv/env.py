"""The job's environment with its own packages (jobenv) in front: one layout for every backend.

Each prefix has `site` (a link to its lib/pythonX.Y/site-packages, so no one needs to know the
version) and `bin` (console scripts: ft_launcher, dlrover-run, ray, whose shebang is the python
that installed them). PYTHONPATH puts the job's packages before the venv's: a job that pins an
older version of something the venv has gets its own.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import PurePath

SITE, BIN = "site", "bin"
PREFIX_IN_IMAGE = "/opt/jobenv"   # a derived image's prefix (outside /opt/venv, which a volume may hide)


def _front(first: str, rest: str | None) -> str:
    return os.pathsep.join(p for p in (first, *(rest or "").split(os.pathsep)) if p)


def job_env(env: Mapping[str, str], prefix: str | PurePath, path: str | None = None) -> dict[str, str]:
    """`env` with prefix/site first on PYTHONPATH; and prefix/bin first on PATH when `path` (the PATH the
    job would otherwise have) is given (a derived docker image carries its PATH itself: None)."""
    out = dict(env)
    out["PYTHONPATH"] = _front(str(PurePath(prefix) / SITE), env.get("PYTHONPATH"))
    if path is not None:
        out["PATH"] = _front(str(PurePath(prefix) / BIN), path)
    return out


def link_site(prefix_shell: str) -> str:
    """A shell command making prefix/site point at the prefix's site-packages (made by pip --prefix)."""
    return (f'mkdir -p {prefix_shell}/bin && cd {prefix_shell} && d=$(ls -d lib/python3*/site-packages 2>/dev/null '
            f'|| true) && if [ -z "$d" ]; then d=lib/site-packages; mkdir -p $d; fi && ln -sfn "$d" {SITE}')


def install_argv(python: str, find_links: str, prefix: str, pins_file: str, trusted_host: str | None = None) -> list[str]:
    """Install exactly the resolved pins (resolve.py) from the wheelhouse into `prefix`: --no-deps and
    --ignore-installed, so pip neither reaches an index nor touches the venv `python` belongs to."""
    return [python, "-m", "pip", "install", "--no-index", "--no-deps", "--ignore-installed", "--no-cache-dir",
            "--disable-pip-version-check", "--no-warn-script-location", "--find-links", find_links,
            *(["--trusted-host", trusted_host] if trusted_host else []), "--prefix", prefix, "-r", pins_file]
