"""The containerised Ray cluster on its own, to try a Ray job by hand (no registry, no network out):

    python -m chaosbench.cluster.ray.testcluster build             # the Ray image (set-up runs it)
    python -m chaosbench.cluster.ray.testcluster up [--nodes 2]    # holds it until Ctrl-C
    python -m chaosbench.cluster.ray.testcluster up --dashboard    # ... with the Jobs API: prints RAY_ADDRESS
    python -m chaosbench.cluster.ray.testcluster up --env RAY_health_check_period_ms=1000 ...   # the site's settings
    python -m chaosbench.cluster.ray.testcluster ls                # the Ray clusters up now (runs' too)
    python -m chaosbench.cluster.ray.testcluster down PROJECT | --all

`up` is a `--backend ray` cluster without a run: the head, N worker nodes and the services, labelled
with this process's owner token, so `chaosbench clean` (or any run's sweep) removes it once `up` is
gone, also after a SIGKILL. Submit work with `docker exec -it <head> python ...` (the checkout is
mounted at /opt/chaosbench) or `docker exec <head> ray status`.
"""
from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path

from chaosbench.cluster.docker.cli import PROJECT_LABEL, docker, remove_project
from chaosbench.cluster.ray.compose import HEAD, STORAGE_IN_NODE


def build() -> str:
    from chaosbench.cluster import jobenv
    from chaosbench.cluster.docker import images
    from chaosbench.cluster.ray.job import RAY_REQUIREMENT
    return jobenv.docker_image(images.node_image(), [RAY_REQUIREMENT], "the Ray backend")


def running() -> list[str]:
    """Compose projects that have a Ray head container."""
    out = docker("ps", "-a", "--filter", f"label=io.chaosbench.role={HEAD}", "--format",
                 f'{{{{.Label "{PROJECT_LABEL}"}}}}', check=False)
    return sorted(set(out.split()))


def up(nodes: int, dashboard: bool = False, env: dict[str, str] | None = None) -> int:
    from chaosbench.cluster.base import ClusterSpec
    from chaosbench.cluster.ray.backend import RayCluster
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with tempfile.TemporaryDirectory(prefix="cb-ray-testcluster-") as tmp:
        spec = ClusterSpec(run_id="raytest", run_dir=Path(tmp), nodes=nodes, min_nodes=1, max_nodes=nodes,
                           env=dict(env or {}))
        with RayCluster(spec, dashboard=dashboard) as cluster:
            head = cluster.plan.container(HEAD)
            site = (f"\n  RAY_ADDRESS={cluster.dashboard_address()} chaosbench run SCENARIO --backend ray   "
                    f"(its storage: {STORAGE_IN_NODE})" if dashboard else "")
            print(f"Ray cluster {cluster.project} up: head {head}, nodes "
                  f"{', '.join(cluster.plan.container(n) for n in cluster.node_names())}\n"
                  f"  docker exec {head} ray status{site}\n  Ctrl-C removes it", flush=True)
            stop.wait()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chaosbench.cluster.ray.testcluster")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("build", help="build (or reuse) the Ray image and print its tag")
    u = sub.add_parser("up", help="start a Ray cluster and hold it until Ctrl-C")
    u.add_argument("--nodes", type=int, default=2)
    u.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                   help="every node's and the head's environment (e.g. RAY_health_check_period_ms=1000)")
    u.add_argument("--dashboard", action="store_true", help="run the head's dashboard (the Jobs API) on a loopback "
                                                               "port docker picks, for RAY_ADDRESS runs")
    sub.add_parser("ls", help="list the Ray clusters that are up")
    d = sub.add_parser("down", help="remove a Ray cluster (its containers, network and volumes)")
    d.add_argument("project", nargs="?")
    d.add_argument("--all", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "build":
        print(build())
    elif args.cmd == "up":
        bad = [e for e in args.env if "=" not in e]
        if bad:
            ap.error(f"--env {bad[0]!r}: write KEY=VALUE")
        return up(args.nodes, args.dashboard, dict(e.split("=", 1) for e in args.env))
    elif args.cmd == "ls":
        for project in running():
            print(project)
    else:
        if bool(args.project) == args.all:
            ap.error("down: give one PROJECT (see `ls`) or --all")
        for project in running() if args.all else [args.project]:
            remove_project(project)
            print(f"removed {project}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
