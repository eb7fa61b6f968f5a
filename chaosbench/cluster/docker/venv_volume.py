"""The node image's Python environment (/opt/venv: torch and its wheels) copied once into a docker
volume, which our containers mount read-only over the image's own copy.

Why: under the `fuse-overlayfs` storage driver (rootless docker, docker in a container) every file
a container opens from an image layer goes through a FUSE daemon. `import torch` opens thousands of
files: 3.0-3.3 s in a node container against 1.8 s on the host, plus the daemon's own CPU, times
three nodes importing at once on a small machine. A volume lives on the host's filesystem: the same
import took 2.0-2.1 s, and the main job's overhead fell by about 2 s side by side (docs/harness-speed.md). With a
native driver (overlay2) there is nothing to win, so the volume is made only where the driver is
slow, or where CHAOSBENCH_VENV_VOLUME=1 asks for it (=0: never).

The test command's set-up makes it (`images build --venv-volume`, from `setup.sh --slurm`): the copy
takes about a minute, which many runs repay and the main job's single run does not; a run uses one
that exists, and makes one only with CHAOSBENCH_VENV_VOLUME=1. It is named after the image id
(`chaosbench-venv-<id>`), so an image rebuilt from a new lock gets a new one; `images build
--venv-volume` removes the older ones (one still mounted is kept).
It carries no project label: run clean-ups never touch it; `docker volume rm` does.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from chaosbench.cluster.errors import ClusterError

VENV_IN_IMAGE = "/opt/venv"
LABEL = "io.chaosbench.venv"
SLOW_DRIVERS = {"fuse-overlayfs", "vfs"}


def _docker(*args: str, timeout: float = 60, check: bool = True) -> str:
    # docker_cli's wrapper (own session, timeout as ClusterError); imported here because docker_cli
    # imports compose_file, which imports this module
    from chaosbench.cluster.docker.cli import docker
    return docker(*args, timeout=timeout, check=check)


def setting() -> str:
    """CHAOSBENCH_VENV_VOLUME: "0" (never), "1" (always; a run may make one) or "auto" (the default)."""
    choice = os.environ.get("CHAOSBENCH_VENV_VOLUME", "auto").strip().lower()
    if choice not in ("0", "1", "auto"):
        raise ClusterError(f"CHAOSBENCH_VENV_VOLUME={choice!r}: use 0 (never), 1 (always) or auto "
                           f"(when docker's storage driver is one of {sorted(SLOW_DRIVERS)})")
    return choice


def wanted() -> bool:
    """Whether this docker host gains from the volume (CHAOSBENCH_VENV_VOLUME overrides)."""
    choice = setting()
    if choice != "auto":
        return choice == "1"
    return _docker("info", "-f", "{{.Driver}}", check=False).strip() in SLOW_DRIVERS


def _record(cache: Path, image_id: str) -> Path:
    return cache / "venv-volume" / image_id


def known(image_id: str, cache: Path) -> tuple[bool, str | None]:
    """(decided, volume): what an earlier call decided for this image, if its volume still exists."""
    record = _record(cache, image_id)
    if record.exists():   # "" = not wanted on this host, else the volume's name
        name = record.read_text().strip()
        if not name or _docker("volume", "inspect", name, check=False):   # "" when it is gone
            return True, name or None
    return False, None


def image_id(image: str) -> str:
    return _docker("image", "inspect", "-f", "{{.Id}}", image).strip().split(":")[-1][:16]


def volume_for(image: str, cache: Path, make: bool, prune_others: bool = False) -> str | None:
    """The volume holding `image`'s /opt/venv where this host gains from one, else None; a missing
    one is made only with make=True (a minute of copying pays off over many runs, not over one).
    Callers hold the image build lock: two makers of one volume would copy into each other."""
    iid = image_id(image)
    decided, name = known(iid, cache)
    if decided:
        return name
    record = _record(cache, iid)
    record.parent.mkdir(parents=True, exist_ok=True)
    if not wanted():
        record.write_text("")
        return None
    if not make:
        return None
    name = f"chaosbench-venv-{iid}"
    _make(name, image, iid)
    record.write_text(name + "\n")   # written last: a copy cut short is made again from empty
    if prune_others:
        _remove_others(name)
    return name


def _make(name: str, image: str, image_id: str) -> None:
    # docker fills an empty named volume from the image's directory when a container first mounts
    # it; a volume left half-filled by an interrupted copy would not be filled again, so start empty.
    print(f"images: copying {image}'s {VENV_IN_IMAGE} into volume {name} (once per image)",
          file=sys.stderr, flush=True)
    _docker("volume", "rm", "-f", name, check=False)
    try:
        _docker("volume", "create", "--label", f"{LABEL}={image_id}", name)
        _docker("run", "--rm", "--network", "none", "-v", f"{name}:{VENV_IN_IMAGE}", "--entrypoint", "test",
                image, "-x", f"{VENV_IN_IMAGE}/bin/python", timeout=1800)   # fails when no python came over
    except ClusterError as exc:
        _docker("volume", "rm", "-f", name, check=False)
        raise ClusterError(f"could not copy {image}'s {VENV_IN_IMAGE} into volume {name}: {exc} "
                           f"(set CHAOSBENCH_VENV_VOLUME=0 to run from the image's own copy)") from exc


def _remove_others(keep: str) -> None:
    for other in _docker("volume", "ls", "-q", "--filter", f"label={LABEL}", check=False).split():
        if other != keep:
            _docker("volume", "rm", other, check=False)   # refused while a container mounts it: kept for later
