"""Where each backend implements each fault primitive, read from the code (Cluster.implementations):

    python -m chaosbench.cluster.where                     # every backend, every primitive
    python -m chaosbench.cluster.where docker kill_node    # chaosbench/cluster/docker/backend.py:... DockerCluster.kill_node

A shared primitive reads "<its family module> via <the backend's hooks>"; "-": the backend has none.
"""
from __future__ import annotations

import sys


def backend_classes() -> dict[str, type]:
    from chaosbench.cluster.docker.backend import DockerCluster
    from chaosbench.cluster.local.backend import LocalCluster
    from chaosbench.cluster.ray.address import RayAddressCluster
    from chaosbench.cluster.ray.backend import RayCluster
    from chaosbench.cluster.slurm.backend import SlurmCluster
    return {"docker": DockerCluster, "local": LocalCluster, "slurm": SlurmCluster, "ray": RayCluster,
            "ray-address": RayAddressCluster}   # ray at $RAY_ADDRESS: a site's own cluster


def table(backend: str | None = None, primitive: str | None = None) -> list[str]:
    classes = backend_classes()
    if backend is not None and backend not in classes:
        raise SystemExit(f"unknown backend {backend!r}; backends: {', '.join(classes)}")
    out = []
    for name, cls in classes.items():
        if backend not in (None, name):
            continue
        impls = cls.implementations()
        if primitive is not None and primitive not in impls:
            raise SystemExit(f"unknown primitive {primitive!r}; primitives: {', '.join(sorted(impls))}")
        out += [f"{name:7} {prim:20} {where or '-'}" for prim, where in impls.items() if primitive in (None, prim)]
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) > 2 or any(a.startswith("-") for a in args):
        raise SystemExit(__doc__)
    print("\n".join(table(*args)))
