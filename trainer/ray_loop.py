"""The reference trainer as a Ray Train loop: `train_loop_per_worker` for trainer/ray_driver.py.

Ray Train has formed the process group (gloo on CPU) and set RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR/PORT before the loop runs; the rest is trainer/train.py unchanged:
same model, same memory/NVMe/S3 tiers, same events (docs/events.md). What differs:

- the node's directories come from the worker's own environment (CHAOSBENCH_NVME_DIR, ...), which a
  Ray worker inherits from its node's `ray start`: the driver's config is the same for every rank;
- torchrun's TORCHELASTIC_RESTART_COUNT is the worker group's start count, kept by a counter actor
  on the driver's node (rank 0 draws it at each group start and broadcasts it);
- the loop runs in a thread of the worker actor, so no signal handlers; a fatal error still leaves
  with os._exit, and Ray Train sees a dead worker and restarts the whole group (FailureConfig).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

NODE_DIRS = {"checkpoint.nvme_dir": "CHAOSBENCH_NVME_DIR", "checkpoint.memory_dir": "CHAOSBENCH_MEMORY_DIR",
             "checkpoint.s3.endpoint_url": "CHAOSBENCH_S3_ENDPOINT"}


def group_start(counter) -> int:
    """0 for the first worker group, 1 after its first restart, ...: the same number on every rank."""
    import ray
    from ray.train import get_context
    from ray.train.collective import broadcast_from_rank_zero
    attempt = ray.get(counter.next.remote()) if get_context().get_world_rank() == 0 else None
    return broadcast_from_rank_zero(attempt)


def node_overrides(environ=os.environ) -> list[str]:
    """`--set` words for this worker's node: its tier directories (as launch.node_plan gives a torchrun node)."""
    return [f"{key}={environ[var]}" for key, var in NODE_DIRS.items() if environ.get(var)]


def train_loop_per_worker(config: dict) -> None:
    from trainer import train
    os.environ["TORCHELASTIC_RESTART_COUNT"] = str(group_start(config["counter"]))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True,
                        format=f"%(asctime)s [{os.environ.get('CHAOSBENCH_NODE', '')} rank={os.environ.get('RANK')}] "
                               "%(levelname)s %(message)s")
    args = argparse.Namespace(config=config["config"], set=[*config.get("set", []), *node_overrides()])
    worker = train.Worker()
    try:
        train.run(worker, args)
    except BaseException as exc:  # noqa: BLE001 — reported as `fatal`, then the worker process leaves
        worker.die(exc)
