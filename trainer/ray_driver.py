"""The Ray Train driver chaosbench runs on the cluster's head (`python -m trainer.ray_driver ...`).

It builds a `TorchTrainer` for a `train_loop_per_worker` (the reference trainer's, trainer/ray_loop.py,
or the user's `module:function`) with the scenario's scaling (a min..max range is Train v2's elastic
training), `FailureConfig(max_failures)` and storage (a directory every node shares, or the run's S3
endpoint), waits until the cluster's worker nodes have joined, and runs it. Exit 0 when the run
finished, 1 when Ray Train gave up (its error printed), 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time

REFERENCE_LOOP = "trainer.ray_loop:train_loop_per_worker"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m trainer.ray_driver")
    ap.add_argument("--loop", default=REFERENCE_LOOP, help="MODULE:FUNCTION")
    ap.add_argument("--config", help="the reference trainer's YAML config (its loop only)")
    ap.add_argument("--set", action="append", default=[], help="section.field=value (the reference loop only)")
    ap.add_argument("--loop-config", default="{}", help="JSON object passed to a user's loop as its config")
    ap.add_argument("--workers", default="1", help="N, or MIN:MAX for Train v2's elastic scaling")
    ap.add_argument("--max-failures", type=int, default=0, help="FailureConfig(max_failures); -1: unlimited")
    ap.add_argument("--storage", required=True, help="a directory every node shares, or s3://BUCKET/PREFIX")
    ap.add_argument("--name", default="chaosbench")
    ap.add_argument("--pg-timeout-s", type=float, default=1800.0, help="TorchConfig(timeout_s)")
    ap.add_argument("--wait-nodes", type=int, default=0, help="wait for this many nodes with a CPU before fitting")
    ap.add_argument("--wait-s", type=float, default=180.0)
    ap.add_argument("--progress", help="a user's loop: regex with a named group 'step' over what it prints or logs")
    ap.add_argument("--site", action="store_true",
                    help="a site's cluster reached through its address (chaosbench/cluster/ray/agent.py): name the "
                         "nodes, give each worker its node's directories, start a fault agent on each node")
    return ap.parse_args(argv)


def load_loop(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name or "train_loop_per_worker")


def workers(text: str) -> int | tuple[int, int]:
    lo, _, hi = text.partition(":")
    return (int(lo), int(hi)) if hi and int(hi) != int(lo) else int(lo)


def storage(path: str):
    """(storage_path, storage_filesystem): s3:// through the run's endpoint ($CHAOSBENCH_S3_ENDPOINT)."""
    if not path.startswith("s3://"):
        return path, None
    from pyarrow import fs
    endpoint = os.environ["CHAOSBENCH_S3_ENDPOINT"]
    scheme, _, host = endpoint.partition("://")
    return path[len("s3://"):], fs.S3FileSystem(endpoint_override=host, scheme=scheme, region="us-east-1",
                                                access_key=os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
                                                secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"))


def wait_for_nodes(count: int, within_s: float) -> None:
    import ray
    deadline = time.monotonic() + within_s
    while True:
        alive = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) >= 1]
        if len(alive) >= count:
            print(f"ray_driver: {len(alive)} worker node(s) up", flush=True)
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"ray_driver: {len(alive)} of {count} worker nodes joined within {within_s:g} s")
        time.sleep(0.5)


def main(argv=None) -> int:
    args = parse_args(argv)
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    site = None
    if args.site:
        from chaosbench.cluster.ray import agent as site
    ray.init(address="auto", log_to_driver=True, **({"namespace": site.namespace(args.name)} if site else {}))
    if args.wait_nodes:
        wait_for_nodes(args.wait_nodes, args.wait_s)
    if site:
        node_names = site.names(ray.nodes())
        agents = site.start(args.name, node_names)
        print(f"ray_driver: nodes {json.dumps(node_names)}; trainer from "
              f"{os.path.dirname(os.path.abspath(importlib.import_module('trainer').__file__))}", flush=True)
        print(f"ray_driver: agents {json.dumps(agents)}", flush=True)   # the harness reads these two lines
        print(f"ray_driver: driver on {ray.util.get_node_ip_address()}", flush=True)

    @ray.remote(num_cpus=0)
    class GroupStarts:   # on the driver's node: it lives as long as the run can
        def __init__(self):
            self.n = -1

        def next(self) -> int:
            self.n += 1
            return self.n

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    config = {**json.loads(args.loop_config), "counter": GroupStarts.options(scheduling_strategy=here).remote()}
    if args.config:
        # absolute: a Ray worker's cwd is not the driver's (the nodes see the checkout at the same path)
        config.update(config=os.path.abspath(args.config), set=args.set)
    path, filesystem = storage(args.storage)
    loop = load_loop(args.loop)
    if args.loop != REFERENCE_LOOP:   # the reference loop writes its own events; a user's is observed
        from trainer.ray_observe import observed
        loop = observed(loop, args.progress)
    if site:   # outermost: the node's environment is set before anything reads it
        loop = site.on_node(loop, node_names, args.name)
    trainer = TorchTrainer(
        loop, train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers(args.workers), use_gpu=False,
                                     resources_per_worker={"CPU": 1}),
        torch_config=TorchConfig(backend="gloo", timeout_s=int(args.pg_timeout_s)),
        run_config=RunConfig(name=args.name, storage_path=path, storage_filesystem=filesystem,
                             failure_config=FailureConfig(max_failures=args.max_failures)))
    try:
        result = trainer.fit()
    except Exception as exc:  # noqa: BLE001 — Ray Train gave up: say why, exit 1
        print(f"ray_driver: training failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"ray_driver: training finished; checkpoint {result.checkpoint}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
