"""The Ray cluster's containers, on top of the docker backend's compose project (docker/compose_file.py).

Each trainer node keeps everything the docker backend gives it (its NVMe volume, /dev/shm, the events
mount, the CHAOSBENCH_* environment, NET_ADMIN) but runs a Ray worker node instead of torchrun:
`ray start --address=<head>:6379 --block`. The head (`ray-head`, a fixed address in the run's /24)
runs `ray start --head --block` with no CPUs, so training workers land only on trainer nodes; the
driver runs there under `docker exec` (backend.py). A Ray worker process inherits its node's
environment from `ray start`, which is how the trainer's events find their node and directories.
"""
from __future__ import annotations

import copy

from chaosbench.cluster.docker.compose_file import EVENTS_IN_NODE, ComposePlan
from chaosbench.cluster.docker.images import SOURCE_MOUNT
from chaosbench.cluster.launch import prepared

HEAD = "ray-head"
GCS_PORT = 6379
STORAGE_IN_NODE = "/chaosbench/ray-storage"   # a host directory every node and the head share (storage_path)
# Ray's floor for the object store is 75 MiB; it lives in /dev/shm, next to the memory tier's snapshots
OBJECT_STORE_BYTES = 80 * 1024 * 1024
HEAD_MEMORY = "3g"
DASHBOARD_PORT = 8265   # the Jobs REST API: the address backend's way in (ray/address.py)
# Both ends of every `ray start`: no usage reporting (no network out of the cluster). The head runs the
# dashboard only where asked (dashboard=True): the docker-exec path does not need it (docs/ray.md: its cost)
COMMON = ["--block", f"--object-store-memory={OBJECT_STORE_BYTES}", "--disable-usage-stats"]
# A worker node waits for the head's port: a `ray start` that finds no GCS gives up
WAIT_FOR_HEAD = ["sh", "-c", 'until python -c "import socket,sys; socket.create_connection((sys.argv[1], '
                 f'{GCS_PORT}), 1)" "$0" 2>/dev/null; do sleep 0.5; done; exec "$@"']


def head_ip(plan: ComposePlan) -> str:
    return str(list(plan.subnet.hosts())[4])   # .5: after etcd .2, proxy .3, s3 .4; nodes start at .10


def worker_argv(plan: ComposePlan, cpus: int) -> list[str]:
    return prepared([*WAIT_FOR_HEAD, head_ip(plan), "ray", "start", f"--address={head_ip(plan)}:{GCS_PORT}",
                     f"--num-cpus={cpus}", *COMMON])


def head_argv(plan: ComposePlan, dashboard: bool = False) -> list[str]:
    board = (["--include-dashboard=true", "--dashboard-host=0.0.0.0", f"--dashboard-port={DASHBOARD_PORT}"]
             if dashboard else ["--include-dashboard=false"])
    return ["ray", "start", "--head", f"--port={GCS_PORT}", f"--node-ip-address={head_ip(plan)}", "--num-cpus=0",
            *board, *COMMON]


def with_ray(doc: dict, plan: ComposePlan, nodes: list[str], cpus: int, workdir_mount: str | None,
             dashboard: bool = False) -> dict:
    """The docker backend's compose document with Ray: each node's command is a Ray worker node, plus the head
    (dashboard=True: with the dashboard, published on a loopback port docker picks)."""
    doc = copy.deepcopy(doc)
    services = doc["services"]
    storage = f"{plan.events_host_dir.rsplit('/', 1)[0]}/ray-storage:{STORAGE_IN_NODE}"
    for node in nodes:
        services[node]["command"] = [a.replace("$", "$$") for a in worker_argv(plan, cpus)]
        services[node]["volumes"].append(storage)
        services[node]["environment"]["PYTHONPATH"] = _path(services[node]["environment"])
    first = services[nodes[0]]
    head = {k: copy.deepcopy(v) for k, v in first.items() if k not in ("tmpfs", "devices", "cpu_shares")}
    keep = (SOURCE_MOUNT, EVENTS_IN_NODE, STORAGE_IN_NODE, "/opt/venv", *([workdir_mount] if workdir_mount else []))
    head.update(container_name=plan.container(HEAD), hostname=HEAD, labels=plan.labels(HEAD),
                command=head_argv(plan, dashboard), networks={"net": {"ipv4_address": head_ip(plan)}}, mem_limit=HEAD_MEMORY,
                volumes=[v for v in first["volumes"] if v.split(":")[1] in keep],
                environment={**first["environment"], "CHAOSBENCH_NODE": HEAD})
    if dashboard:
        head["ports"] = [f"127.0.0.1::{DASHBOARD_PORT}"]
    services[HEAD] = head
    return doc


def _path(env: dict) -> str:
    """PYTHONPATH with the checkout (trainer.ray_loop) and, for a user's loop, its directory: a Ray worker's
    cwd is not its node's, so neither is found through the working directory."""
    parts = [p for p in (env.get("PYTHONPATH") or "").split(":") if p]
    return ":".join(dict.fromkeys([*parts, SOURCE_MOUNT, "/workspace"]))
