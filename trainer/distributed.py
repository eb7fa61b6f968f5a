"""Process-group set-up under torchrun, topology checks, and the periodic health check.

Gloo's default collective timeout is 30 minutes, so a silent peer would stall training for that
long. The process group gets an explicit `elastic.pg_timeout_s`, and a background thread runs a
tiny all-reduce (a heartbeat) on a separate gloo group every `elastic.health_check_interval_s`
seconds with the short `elastic.health_check_timeout_s`. Because it runs off the training thread
it detects a peer that went silent even while the training thread is blocked inside a gradient
all-reduce; the training thread checks every `health_check_interval_steps` steps that the
heartbeat is still fresh.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import threading
import time
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


def select_device(env: DistEnv) -> tuple[str, torch.device]:
    """NCCL on `cuda:<local_rank>` when CUDA is visible, else gloo on CPU (CUDA_VISIBLE_DEVICES= forces CPU).

    One GPU per local rank: NCCL refuses two ranks of one communicator on the same GPU ("Duplicate
    GPU detected"), so more local ranks than visible GPUs is a launch error, not a CUDA crash."""
    if not torch.cuda.is_available():
        return "gloo", torch.device("cpu")
    gpus = torch.cuda.device_count()
    if env.local_rank >= gpus:
        raise LaunchError(f"local rank {env.local_rank} has no GPU: {env.local_world_size} workers per node "
                          f"(torchrun --nproc-per-node) but {gpus} GPU(s) visible, and NCCL needs one GPU per "
                          f"rank; lower --nproc-per-node to {gpus} or set CUDA_VISIBLE_DEVICES= to train on CPU")
    return "nccl", torch.device("cuda", env.local_rank)


def init_process_group(env: DistEnv, pg_timeout_s: float) -> tuple[str, torch.device]:
    backend, device = select_device(env)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if dist.is_initialized():   # a launcher that forms the group itself (Ray Train: trainer/ray_loop.py)
        return dist.get_backend(), device
    wait_for_store(env, min(pg_timeout_s, STORE_WAIT_MAX_S))
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=pg_timeout_s))
    return backend, device


STORE_WAIT_MAX_S = 5.0


def wait_for_store(env: DistEnv, timeout_s: float, environ=os.environ,
                   connect=socket.create_connection, clock=time.monotonic, sleep=time.sleep) -> float:
    """Wait until the job's TCPStore (MASTER_ADDR:MASTER_PORT) accepts a connection; returns the wait.

    Why: under torchrun rank 0 creates the store when it calls init_process_group, and every other
    rank of a (re)started group calls it within milliseconds of that, so its first connect is
    refused and TCPStore's client backs off for ~0.3-1 s before trying again (measured on docker:
    0.69 s from the `process_group` phase to joined; 20 ms when the port is polled here first). That
    was paid on every start and every restart, inside the recovery window. Polling the port every
    10 ms lets init_process_group connect at its first try. Bounded: after `timeout_s` init goes on
    and reports its own error (an unreachable master is its failure to name, not ours)."""
    hosts_store = env.rank == 0 and environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true"
    addr, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT", "")
    if hosts_store or not addr or not port.isdigit():   # a bad port: init_process_group names it
        return 0.0
    t0 = clock()
    while True:
        try:
            connect((addr, int(port)), timeout=1.0).close()
            return clock() - t0
        except OSError:
            if clock() - t0 >= timeout_s:
                return clock() - t0
            sleep(0.01)


class HealthChecker:
    """A heartbeat: `all_reduce([1, stop])` on a dedicated gloo group every `interval_s` seconds.

    It is driven by time, not by steps, so it keeps running (and detects a silent peer within
    `timeout_s`) while the training thread is blocked in a collective. Ranks stop together: each
    sets its stop flag when done, and the thread exits only at the heartbeat where every rank has
    set it, so no rank is left waiting for a partner. `on_failure(error)` is called from the
    heartbeat thread on the first failure or timeout."""

    def __init__(self, timeout_s: float, interval_s: float, on_failure: Callable[[HealthCheckError], None]):
        self.timeout_s, self.interval_s = timeout_s, interval_s
        self.on_failure = on_failure
        self.world_size = dist.get_world_size()
        self.group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
        self.beats = 0
        self.last_ok = time.monotonic()
        self.error: HealthCheckError | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-check", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                t = torch.tensor([1.0, 1.0 if self._stop.is_set() else 0.0])
                dist.all_reduce(t, group=self.group)
                answered, stopping = int(t[0].item()), int(t[1].item())
                if answered != self.world_size:
                    raise HealthCheckError(f"heartbeat {self.beats}: {answered} of {self.world_size} ranks answered")
            except Exception as exc:  # a timeout or a closed connection both mean: a peer is gone
                self.error = exc if isinstance(exc, HealthCheckError) else HealthCheckError(
                    f"heartbeat {self.beats}: no answer from every rank within {self.timeout_s}s: {exc}")
                self.on_failure(self.error)
                return
            self.beats += 1
            self.last_ok = time.monotonic()
            if stopping == self.world_size:
                return
            self._stop.wait(self.interval_s)

    def check(self) -> None:
        """Called by the training thread every `health_check_interval_steps` steps: a local check
        (no collective) that the heartbeat is alive and recent."""
        if self.error is not None:
            raise self.error
        silent = time.monotonic() - self.last_ok
        if silent > self.interval_s + 2 * self.timeout_s:
            raise HealthCheckError(f"no successful heartbeat for {silent:.1f}s (timeout {self.timeout_s}s)")

    def close(self) -> bool:
        """Stop together with the other ranks; False if the peers did not all stop in time."""
        self._stop.set()
        self._thread.join(self.interval_s + 3 * self.timeout_s)
        return not self._thread.is_alive()
