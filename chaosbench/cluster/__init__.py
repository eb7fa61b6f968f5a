"""Cluster backends: `create_cluster("docker" | "local" | "slurm" | "ray", spec)` and what each needs to run here."""
from __future__ import annotations

import os
import shutil

from chaosbench.cluster.base import Cluster, ClusterSpec
from chaosbench.cluster.errors import ClusterError, UnsupportedFault

__all__ = ["Cluster", "ClusterError", "ClusterSpec", "UnsupportedFault", "available_backends",
           "backend_primitives", "create_cluster", "pick_backend"]


def backend_primitives() -> dict[str, frozenset[str]]:
    """Backend name -> the fault primitives it has on this machine (`chaosbench list`, refusals)."""
    from chaosbench.cluster.docker.backend import DockerCluster
    from chaosbench.cluster.local.backend import LocalCluster
    from chaosbench.cluster.ray.address import RayAddressCluster, address
    from chaosbench.cluster.ray.backend import RayCluster
    from chaosbench.cluster.slurm.backend import supported as slurm_supported
    return {"docker": DockerCluster.supported_faults, "local": LocalCluster.supported_faults,
            "slurm": slurm_supported(), "ray": (RayAddressCluster if address() else RayCluster).supported_faults}


def available_backends() -> dict[str, str | None]:
    """Backend name -> None if usable on this machine, else the reason it is not."""
    from chaosbench.cluster.docker.cli import docker_unusable
    from chaosbench.services.etcd_server import ETCD_BINARY
    local = None
    if not (os.path.exists(ETCD_BINARY) or shutil.which(ETCD_BINARY)):
        local = f"etcd binary not found at {ETCD_BINARY} (apt-get install etcd-server, or set CHAOSBENCH_ETCD_BINARY)"
    from chaosbench.cluster.slurm.commands import unusable as slurm_unusable
    # ray: a site's Ray cluster at $RAY_ADDRESS (reached over HTTP), else the containerised one (docker)
    from chaosbench.cluster.ray.address import address
    return {"docker": docker_unusable(), "local": local, "slurm": slurm_unusable(),
            "ray": None if address() else docker_unusable()}


def create_cluster(backend: str, spec: ClusterSpec, **options) -> Cluster:
    """A cluster for `spec` on `backend`; use it as a context manager so teardown always runs.

    docker options: image= (node image tag; default: build/reuse it), toxiproxy_image= (a real
    Toxiproxy image; default: ours, or $CHAOSBENCH_TOXIPROXY_IMAGE), gpus= (default: auto-detect).
    slurm options: partition=, account=, time_limit=, gpus_per_node=, sbatch_options= (docs/slurm.md).
    """
    if spec.ray and backend != "ray":
        raise ClusterError(f"trainer.ray describes a Ray Train job, which backend {backend!r} cannot run: "
                           f"use --backend ray (or cluster.backend: ray)")
    if backend == "docker":
        from chaosbench.cluster.docker.backend import DockerCluster
        return DockerCluster(spec, **options)
    if backend == "local":
        from chaosbench.cluster.local.backend import LocalCluster
        if options:
            raise ClusterError(f"backend 'local' takes no options (got {', '.join(options)})")
        return LocalCluster(spec)
    if backend == "slurm":
        from chaosbench.cluster.slurm.backend import SlurmCluster
        return SlurmCluster(spec, **options)
    if backend == "ray":
        from chaosbench.cluster.ray.address import RayAddressCluster, address
        if address():   # a site's own Ray cluster: nothing of docker's
            if options:
                raise ClusterError(f"backend 'ray' at $RAY_ADDRESS takes no options (got {', '.join(options)})")
            return RayAddressCluster(spec, address())
        from chaosbench.cluster.ray.backend import RayCluster
        return RayCluster(spec, **options)
    raise ClusterError(f"unknown cluster backend {backend!r}; valid backends: docker, local, slurm, ray")


def pick_backend(requested: str) -> str:
    """The backend a run uses: the one asked for if usable here, else ('auto') docker, then local."""
    why_not = available_backends()   # name -> None if usable, else the reason
    if requested != "auto":
        if why_not.get(requested, "unknown backend") is not None:
            raise UnsupportedFault(f"backend '{requested}' is not usable here: "
                                   f"{why_not.get(requested, 'unknown backend')}")
        return requested
    for name in ("docker", "local"):
        if why_not.get(name, "unknown") is None:
            return name
    raise UnsupportedFault("no cluster backend is usable here: " +
                           "; ".join(f"{k}: {v}" for k, v in why_not.items()))
