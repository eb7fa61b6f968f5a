"""The docker backend's job image: `chaosbench/job:<hash>`, the node image plus the job's packages.

Built offline and cached by tag (a run whose image exists pays one `docker image inspect`): the
pins are resolved and their wheels fetched on the host (resolve.py), then one container of the node
image installs them from images.py's wheel server into /opt/jobenv, and `docker commit` makes the
image with PYTHONPATH and PATH set. /opt/jobenv, not /opt/venv: the test command mounts a read-only
volume over /opt/venv (venv_volume.py), which would hide anything installed there. One container and
one commit, not a Dockerfile: under fuse-overlayfs each committed build step on top of torch costs
about 11 s (compose/Dockerfile.deps).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

from chaosbench.cluster import owner as owner_mod
from chaosbench.cluster.docker import images
from chaosbench.cluster.docker.cli import docker
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.jobenv import env as env_mod, probe, resolve

REPO_NAME = "chaosbench/job"
RECIPE = "jobenv-2"          # bump when the way an image is made changes: old tags stop matching
BUILD_PREFIX = "cb-jobenv-build-"   # build containers' names; their owner label says whose they are
OWNER_LABEL = "io.chaosbench.jobenv.owner"
PINS_IN_IMAGE = f"{env_mod.PREFIX_IN_IMAGE}/requirements.txt"
PACKAGES_LABEL = "io.chaosbench.jobenv.packages"   # name==version of the job's packages as installed


def _log(msg: str) -> None:
    print(f"jobenv: {msg}", file=sys.stderr, flush=True)


def tag_for(node_image_id: str, reqs: list[str]) -> str:
    return f"{REPO_NAME}:{images._sha(RECIPE, node_image_id, *reqs)}"


def docker_image(node_image: str, reqs: list[str], origin: str = "") -> str:
    """The node image with `reqs` installed (built once per node image and list; `reqs` as normalised by
    jobenv.requirements). Raises resolve.PipFailed naming the requirements and `origin` when pip refuses."""
    tag = tag_for(images._image_id(node_image), reqs)
    if images.image_exists(tag):
        return tag
    with images._build_lock():   # one build per host at a time; a waiter then finds the tag
        if images.image_exists(tag):
            return tag
        sweep()
        t0 = time.monotonic()
        _log(f"building {tag} from {node_image} for {', '.join(reqs)} (once; later runs reuse it)")
        pins = resolve.fetch(reqs, images.CACHE / "wheels", origin)
        _build(node_image, tag, pins, reqs, origin)
        _log(f"{tag} ready in {time.monotonic() - t0:.1f}s: {', '.join(pins) or 'nothing missing'}")
    return tag


def _build(node_image: str, tag: str, pins: list[str], reqs: list[str], origin: str) -> None:
    config = json.loads(docker("image", "inspect", "-f", "{{json .Config}}", node_image))
    path = next((e.split("=", 1)[1] for e in config.get("Env") or [] if e.startswith("PATH=")),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    prefix = env_mod.PREFIX_IN_IMAGE
    pin_lines = "".join(p + "\n" for p in pins)
    name = f"{BUILD_PREFIX}{tag.split(':')[1]}-{time.time_ns() % 10**9}"
    with images._WheelServer(images.CACHE / "wheels") as srv:
        install = " ".join(env_mod.install_argv("/opt/venv/bin/python", srv.url, prefix, PINS_IN_IMAGE, srv.host))
        # last, the versions the job will import (its requirements and what came with them), as a label
        script = (f"set -e; mkdir -p {prefix}; printf %s \"$PINS\" > {PINS_IN_IMAGE}; "
                  f"if [ -s {PINS_IN_IMAGE} ]; then {install}; fi; {env_mod.link_site(prefix)}; "
                  f"PYTHONPATH={prefix}/{env_mod.SITE} /opt/venv/bin/python -c \"$PROBE\"")
        try:
            # docker commit keeps the build container's entrypoint and command and cannot clear them:
            # override the entrypoint only where the image has one, and restore it and the command after
            entry = ["--entrypoint", "sh"] if config.get("Entrypoint") else []
            out = subprocess.run(["docker", "run", "--name", name, "--label", f"{OWNER_LABEL}={owner_mod.token()}",
                                  "-e", f"PINS={pin_lines}", "-e", f"PROBE={probe.source(reqs + pins)}", *entry, node_image, *([] if entry else ["sh"]), "-c",
                                  script], capture_output=True, text=True, timeout=1800)
            if out.returncode != 0:
                raise resolve.failed("pip could not install", reqs, origin, out.stdout + out.stderr)
            changes = [f"ENV PYTHONPATH={prefix}/{env_mod.SITE}", f"ENV PATH={prefix}/{env_mod.BIN}:{path}",
                       f'LABEL {OWNER_LABEL}="" {PACKAGES_LABEL}="{" ".join(probe.versions(out.stdout))}"',
                       *(["ENTRYPOINT " + json.dumps(config["Entrypoint"])] if entry else []),
                       "CMD " + json.dumps(config.get("Cmd") or ["sh"])]
            docker("commit", *[a for c in changes for a in ("-c", c)], name, tag, timeout=600)
        finally:
            docker("rm", "-f", name, check=False)


def image_packages(tag: str) -> list[str]:
    """name==version of the job's packages in a job image, as its build found them installed."""
    label = docker("image", "inspect", "-f", '{{index .Config.Labels "%s"}}' % PACKAGES_LABEL, tag, check=False)
    return label.split() if label.strip() != "<no value>" else []


def sweep(everything: bool = False) -> list[str]:
    """Build containers left by a harness that died mid-build (its finally never ran); everything=True:
    also those of live builds (`chaosbench clean --all`). Returns their names."""
    out = docker("ps", "-a", "--filter", f"name={BUILD_PREFIX}", "--format",
                 '{{.Names}} {{.Label "%s"}}' % OWNER_LABEL, check=False)
    gone = []
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0].startswith(BUILD_PREFIX) and (
                everything or not owner_mod.alive(parts[1] if len(parts) > 1 else "")):
            docker("rm", "-f", parts[0], check=False)
            gone.append(parts[0])
    return gone
