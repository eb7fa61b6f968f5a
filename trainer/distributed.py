"""Process-group set-up under torchrun, topology checks, and the periodic health check.

Gloo's default collective timeout is 30 minutes, so a silent peer would stall training for that
long. The process group gets an explicit `elastic.pg_timeout_s`, and a background thread runs a
tiny all-reduce on a separate gloo group with the short `elastic.health_check_timeout_s` after
every N steps. Because it runs off the training thread it detects a peer that went silent even
while the training thread is blocked inside a gradient all-reduce.
"""
from __future__ import annotations

import dataclasses
import os
import queue
import threading
from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist

from trainer.errors import HealthCheckError, LaunchError, TopologyChangeError

REQUIRED_ENV = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]


@dataclasses.dataclass(frozen=True)
class DistEnv:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    restart_count: int

    @property
    def num_nodes(self) -> int:
        return max(1, self.world_size // self.local_world_size)


def read_env(environ=os.environ) -> DistEnv:
    missing = [k for k in REQUIRED_ENV if k not in environ]
    if missing:
        raise LaunchError(f"Missing required environment variables: {missing}. Launch the trainer with torchrun, "
                          f"e.g. torchrun --nnodes=1:2 --nproc-per-node=1 --rdzv-backend=c10d "
                          f"--rdzv-endpoint=HOST:PORT -m trainer.train --config trainer/configs/tiny.yaml")
    return DistEnv(int(environ["RANK"]), int(environ["LOCAL_RANK"]), int(environ["WORLD_SIZE"]),
                   int(environ["LOCAL_WORLD_SIZE"]), int(environ.get("TORCHELASTIC_RESTART_COUNT", 0)))


def check_topology(env: DistEnv, min_nodes: int, max_nodes: int) -> None:
    if env.num_nodes < min_nodes:
        raise TopologyChangeError(f"world has {env.num_nodes} node(s) (world size {env.world_size}), below "
                                  f"elastic.min_nodes={min_nodes}; start more nodes or lower elastic.min_nodes")
    if env.num_nodes > max_nodes:
        raise TopologyChangeError(f"world has {env.num_nodes} node(s) (world size {env.world_size}), above "
                                  f"elastic.max_nodes={max_nodes}; raise elastic.max_nodes or torchrun's --nnodes")


def init_process_group(env: DistEnv, pg_timeout_s: float) -> tuple[str, torch.device]:
    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    device = torch.device(f"cuda:{env.local_rank}") if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=pg_timeout_s))
    return backend, device


class HealthChecker:
    """Runs `all_reduce(ones)` on a dedicated gloo group after each submitted step.

    `on_failure(error)` is called from the checker thread on the first failure or timeout; the
    trainer uses it to emit `health_check_failed` and exit so torchrun restarts the group."""

    def __init__(self, timeout_s: float, on_failure: Callable[[HealthCheckError], None]):
        self.timeout_s = timeout_s
        self.on_failure = on_failure
        self.world_size = dist.get_world_size()
        self.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="health-check", daemon=True)
        self._thread.start()

    def submit(self, step: int) -> None:
        self._queue.put(step)

    def _run(self) -> None:
        while True:
            step = self._queue.get()
            if step is None:
                return
            try:
                t = torch.ones(1)
                dist.all_reduce(t, group=self.group)
                if int(t.item()) != self.world_size:
                    raise HealthCheckError(f"health check at step {step}: {int(t.item())} of {self.world_size} ranks answered")
            except Exception as exc:  # a timeout or a closed connection both mean: a peer is gone
                err = exc if isinstance(exc, HealthCheckError) else HealthCheckError(
                    f"health check at step {step} failed within {self.timeout_s}s: {exc}")
                self.on_failure(err)
                return

    def close(self, timeout_s: float | None = None) -> None:
        """Let pending checks finish (peers run the same number), then stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout_s if timeout_s is not None else self.timeout_s * 2)
