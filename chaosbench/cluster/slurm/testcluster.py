"""A real Slurm cluster in docker containers, to test the backend against (no fake sbatch):

    python -m chaosbench.cluster.slurm.testcluster up [--computes 3]   # prints the env to export
    python -m chaosbench.cluster.slurm.testcluster ls                  # the test clusters up now
    python -m chaosbench.cluster.slurm.testcluster down NAME | --all

One image (compose/slurm/Dockerfile: the node image + Debian's slurmctld/slurmd/munge 22.05) for a
controller (slurmctld, our "login node": Slurm commands run there through `docker exec`) and N compute
nodes (slurmd, NET_ADMIN for iptables faults). A host directory is bind-mounted at the same path in
every container (the site's shared filesystem); each compute node's /scratch is a host directory too,
so the harness can inventory checkpoints. The source is mounted read-only at /opt/chaosbench.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml

from chaosbench.cluster.docker import images
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.docker.cli import compose, docker
from chaosbench.cluster.slurm.conf import CONTROLLER, compute_hosts, slurm_conf

LABEL = "io.chaosbench.slurm"
DOCKERFILE_DIR = images.COMPOSE_DIR / "slurm"
ENTRYPOINT = "/usr/local/bin/slurm-entrypoint"   # compose/slurm/Dockerfile copies it there
ROOT = Path(os.environ.get("CHAOSBENCH_SLURM_TESTROOT", "/tmp"))


def build_image() -> str:
    # no --label: the node image's label is inherited, and the flag costs a step (see Dockerfile.deps)
    node = images.node_image()
    parts = [node] + [(DOCKERFILE_DIR / f).read_bytes() for f in sorted(os.listdir(DOCKERFILE_DIR))]
    tag = f"chaosbench/slurm:{images._sha(*parts)}"
    if not images.image_exists(tag):
        images._run(["docker", "build", "-q", "-t", tag, "--build-arg", f"NODE={node}",
                     str(DOCKERFILE_DIR)], timeout=1800, stdout=subprocess.DEVNULL)
    return tag


def render(name: str, image: str, hosts: list[str], root: Path, subnet: str, cpus: int = 2) -> dict:
    # init: a real PID 1 reaps step processes orphaned by a killed step (slurmd does not)
    # the entrypoint here, not in the image: one build step fewer (see compose/Dockerfile.deps)
    common = {"image": image, "labels": {LABEL: name}, "init": True, "entrypoint": [ENTRYPOINT],
              "volumes": [f"{root / 'etc'}:/etc/slurm-shared:ro", f"{root / 'shared'}:{root / 'shared'}"],
              "networks": ["slurm"]}
    services = {CONTROLLER: {**common, "container_name": f"{name}-{CONTROLLER}", "hostname": CONTROLLER,
                             "command": ["controller"]}}
    for host in hosts:
        services[host] = {
            **common, "container_name": f"{name}-{host}", "hostname": host, "command": ["compute"],
            "cap_add": ["NET_ADMIN"], "shm_size": "512m", "mem_limit": "3g",
            "volumes": [*common["volumes"], f"{images.REPO}:{images.SOURCE_MOUNT}:ro",
                        f"{root / 'scratch' / host}:/scratch"]}
    return {"version": "2.4", "services": services,
            "networks": {"slurm": {"labels": {LABEL: name}, "ipam": {"config": [{"subnet": subnet}]}}}}


class TestCluster:
    """Bring the Slurm containers up and down; `env()` is what the backend needs to use them."""

    def __init__(self, computes: int = 3, name: str | None = None):
        self.name = name or f"cbslurm{uuid.uuid4().hex[:8]}"
        self.root = ROOT / self.name
        self.hosts = compute_hosts(computes)
        self.file = self.root / "docker-compose.yml"
        self.gateway: str | None = None

    def up(self, timeout: float = 180) -> "TestCluster":
        from chaosbench.cluster.docker.backend import _pick_subnet
        image = build_image()
        for d in ("etc", "shared", *(f"scratch/{h}" for h in self.hosts)):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "etc" / "slurm.conf").write_text(slurm_conf(self.hosts))
        key = self.root / "etc" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        subnet = _pick_subnet()
        self.gateway = str(next(subnet.hosts()))
        self.file.write_text(yaml.safe_dump(render(self.name, image, self.hosts, self.root, str(subnet))))
        compose(self.name, [str(self.file)], "down", "-v", "--remove-orphans", "-t", "1")
        compose(self.name, [str(self.file)], "up", "-d", timeout=300)
        self._wait_idle(timeout)
        return self

    def _wait_idle(self, timeout: float) -> None:
        deadline, out = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            out = docker("exec", f"{self.name}-{CONTROLLER}", "sinfo", "-h", "-N", "-o", "%N %t", check=False)
            states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
            if len(states) == len(self.hosts) and all(s == "idle" for s in states.values()):
                return
            time.sleep(1)
        raise ClusterError(f"Slurm test cluster {self.name}: nodes not idle after {timeout:g} s: {out.strip()!r}; "
                           f"see `docker logs {self.name}-{CONTROLLER}`")

    def env(self) -> dict[str, str]:
        return {"CHAOSBENCH_SLURM_LOGIN": f"docker exec -i {self.name}-{CONTROLLER}",
                "CHAOSBENCH_SLURM_SHARED": str(self.root / "shared"),
                "CHAOSBENCH_SLURM_PYTHON": "/opt/venv/bin/python",
                "CHAOSBENCH_SLURM_SRCDIR": images.SOURCE_MOUNT,
                "CHAOSBENCH_SLURM_SCRATCH": "/scratch",
                "CHAOSBENCH_SLURM_SCRATCH_VIEW": str(self.root / "scratch" / "{host}"),
                "CHAOSBENCH_SLURM_SERVICE_HOST": self.gateway or "",
                # /scratch is a host directory here, not a size-limited disk: filling it would fill the host
                "CHAOSBENCH_SLURM_FORBID": "fill_nvme,free_nvme"}

    def down(self) -> None:
        if self.file.exists():
            try:
                compose(self.name, [str(self.file)], "down", "-v", "--remove-orphans", "-t", "1", timeout=180)
            except ClusterError:
                pass
        ids = docker("ps", "-aq", "--filter", f"label={LABEL}={self.name}", check=False).split()
        if ids:
            docker("rm", "-f", *ids, check=False, timeout=120)
        nets = docker("network", "ls", "-q", "--filter", f"label={LABEL}={self.name}", check=False).split()
        if nets:   # compose removes it, unless its file went first
            docker("network", "rm", *nets, check=False, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)


def running() -> list[str]:
    """Names of the test clusters that have containers (every `up` starts a new one)."""
    out = docker("ps", "-a", "--filter", f"label={LABEL}", "--format", f'{{{{.Label "{LABEL}"}}}}', check=False)
    return sorted(set(out.split()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaosbench.cluster.slurm.testcluster")
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="build the image, start the cluster, print the env for --backend slurm")
    u.add_argument("--computes", type=int, default=3)
    sub.add_parser("build", help="build (or reuse) the test cluster's image and print its tag")
    sub.add_parser("ls", help="list the test clusters that are up")
    d = sub.add_parser("down", help="remove a test cluster (its containers, network and directories)")
    d.add_argument("name", nargs="?")
    d.add_argument("--all", action="store_true", help="remove every test cluster")
    args = ap.parse_args(argv)
    if args.cmd == "down" and bool(args.name) == args.all:
        ap.error("down: give one NAME (see `ls`) or --all")
    if args.cmd == "build":
        print(build_image())
    elif args.cmd == "up":
        tc = TestCluster(args.computes)
        try:
            tc.up()
        except BaseException:
            tc.down()
            raise
        print("\n".join(f"export {k}='{v}'" for k, v in tc.env().items()))
        print(f"# remove with: python -m chaosbench.cluster.slurm.testcluster down {tc.name}")
        others = [n for n in running() if n != tc.name]
        if others:
            print(f"# also up (each `up` starts a new cluster): {' '.join(others)}")
    elif args.cmd == "ls":
        for name in running():
            print(name)
    else:
        for name in running() if args.all else [args.name]:
            TestCluster(name=name).down()
            print(f"removed {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
