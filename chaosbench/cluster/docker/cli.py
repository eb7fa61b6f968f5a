"""Thin wrappers over the docker and compose CLIs (every call with a timeout), and the label sweep.

Every docker/compose child runs in its own session: a terminal Ctrl-C goes to the foreground process
group, and a docker CLI that got it would abort a `rm -f` of our teardown half-way. The harness alone
gets the signal and decides what to stop.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from functools import lru_cache

from chaosbench.cluster import loopfs
from chaosbench.cluster import owner as owner_mod
from chaosbench.cluster.errors import ClusterError

LABEL_PREFIX = "io.chaosbench"   # every container, network and volume of ours carries these labels
PROJECT_LABEL, OWNER_LABEL = f"{LABEL_PREFIX}.project", f"{LABEL_PREFIX}.owner"


def _env(**extra: str) -> dict[str, str]:
    # the owner token: a CLI orphaned by a killed harness (a compose up half-way) is reaped by the sweep
    return {**os.environ, owner_mod.OWNER_ENV: owner_mod.token(), **extra}


def docker(*args: str, timeout: float = 60, check: bool = True, input: str | None = None) -> str:
    """stdout of `docker ARGS`. check=False: a failure or a timeout gives "" (best-effort removal goes on)."""
    try:
        r = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, input=input,
                           start_new_session=True, env=_env())
    except subprocess.TimeoutExpired as exc:
        if not check:
            return ""
        raise ClusterError(f"docker {' '.join(args[:3])} timed out after {timeout:.0f}s") from exc
    if check and r.returncode != 0:
        raise ClusterError(f"docker {' '.join(args)[:200]} failed: {r.stderr.strip()[:800]}")
    return r.stdout


@lru_cache(maxsize=1)
def compose_cmd() -> tuple[str, ...]:
    """`docker compose` (v2) when the plugin exists, else Debian's `docker-compose` 1.29."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30,
                      start_new_session=True).returncode == 0:
        return ("docker", "compose")
    if shutil.which("docker-compose"):
        return ("docker-compose",)
    raise ClusterError("neither `docker compose` nor `docker-compose` is installed")


def compose(project: str, files: list[str], *args: str, timeout: float = 300) -> str:
    cmd = [*compose_cmd(), "-p", project]
    for f in files:
        cmd += ["-f", f]
    try:
        r = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, start_new_session=True,
                           env=_env(COMPOSE_IGNORE_ORPHANS="false"))
    except subprocess.TimeoutExpired as exc:
        raise ClusterError(f"{' '.join(cmd[:2])} {args[0]} timed out after {timeout:.0f}s") from exc
    if r.returncode != 0:
        raise ClusterError(f"{' '.join(compose_cmd())} {' '.join(args)} failed: {r.stderr.strip()[-1500:]}")
    return r.stdout


def docker_unusable() -> str | None:
    if shutil.which("docker") is None:
        return "docker CLI not installed"
    r = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                       text=True, timeout=30, start_new_session=True)
    if r.returncode != 0:
        return f"docker daemon not reachable: {r.stderr.strip()[:200]}"
    try:
        compose_cmd()
    except ClusterError as exc:
        return str(exc)
    return None


def remove_project(project: str) -> list[str]:
    """Remove every container, network and volume labelled with this project (compose or not);
    return docker's last refusal per kind that stayed (the why of what leftovers() will list)."""
    flt = f"label={PROJECT_LABEL}={project}"
    ids = docker("ps", "-aq", "--filter", flt, check=False).split()
    if ids:
        docker("rm", "-f", "-v", *ids, timeout=120, check=False)
    refused = [why for kind in ("network", "volume") if (why := _remove_with_retries(kind, flt))]
    loopfs.remove_project(project)
    return refused


def _remove_with_retries(kind: str, flt: str, within_s: float = 15) -> str:
    """`docker network rm` right after `rm -f` of its containers can fail with "has active endpoints"
    while the daemon still releases them (moby#19261; a fresh-clone CI left a network so): retry, and
    force-disconnect endpoints whose containers are gone. What stays is reported by leftovers()."""
    deadline, pause = time.monotonic() + within_s, 0.1
    while True:
        ids = docker(kind, "ls", "-q", "--filter", flt, check=False).split()
        if not ids:
            return ""
        try:
            docker(kind, "rm", *ids, timeout=60)
            return ""
        except ClusterError as exc:
            if time.monotonic() > deadline:
                return str(exc)
        if kind == "network":
            for net in ids:
                for endpoint in docker("network", "inspect", net, "--format",
                                       "{{range $k, $v := .Containers}}{{$k}} {{end}}", check=False).split():
                    docker("network", "disconnect", "-f", net, endpoint, check=False)
        time.sleep(pause)
        pause = min(pause * 2, 2.0)


def leftovers(project: str | None = None, check: bool = False) -> dict[str, list[str]]:
    """Names of chaosbench containers/networks/volumes (of one project, or all). check=True: raise when
    docker cannot answer (a teardown must not count an unreachable daemon as "nothing left")."""
    flt = f"label={PROJECT_LABEL}" + (f"={project}" if project else "")
    return {
        "containers": docker("ps", "-a", "--filter", flt, "--format", "{{.Names}}", check=check).split(),
        "networks": docker("network", "ls", "--filter", flt, "--format", "{{.Name}}", check=check).split(),
        "volumes": docker("volume", "ls", "--filter", flt, "--format", "{{.Name}}", check=check).split(),
    }


def owners() -> dict[str, str]:
    """project -> owner token of every chaosbench container, network and volume."""
    out = docker("ps", "-a", "--filter", f"label={PROJECT_LABEL}", "--format",
                 '{{.Label "%s"}} {{.Label "%s"}}' % (PROJECT_LABEL, OWNER_LABEL), check=False)
    projects: dict[str, str] = {}
    for line in out.splitlines():
        parts = line.split()
        if parts:
            projects[parts[0]] = parts[1] if len(parts) > 1 else ""
    for kind in ("network", "volume"):
        raw = docker(kind, "ls", "-q", "--filter", f"label={PROJECT_LABEL}", check=False).split()
        if raw:
            for obj in json.loads(docker(kind, "inspect", *raw, check=False) or "[]"):
                labels = obj.get("Labels") or {}
                projects.setdefault(labels.get(PROJECT_LABEL, ""), labels.get(OWNER_LABEL, ""))
    projects.pop("", None)
    return projects


def sweep(everything: bool = False) -> list[str]:
    """Remove projects whose owning harness process is dead (a crashed or killed run); everything=True:
    every project of ours, also of live runs and of other hosts (`chaosbench clean --all`)."""
    dead = [p for p, tok in owners().items() if everything or not owner_mod.alive(tok)]
    for p in dead:
        remove_project(p)
    dead += [p for p in loopfs.sweep(everything) if p not in dead]
    return dead
