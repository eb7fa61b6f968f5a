"""What every cluster backend offers the scenario engine.

A cluster is N trainer nodes plus etcd, the fault proxy and the S3 endpoint. Backends (docker,
local) implement the same primitives; a fault the backend cannot do raises `UnsupportedFault`
with the reason, so a scenario that needs it fails (or is skipped) saying why.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path

from chaosbench.cluster.lifecycle import UpDown

FILL_FILE = ".chaosbench-fill"   # fill_nvme's ballast on a node's NVMe (never a checkpoint)


class ClusterError(RuntimeError):
    """The cluster or harness itself broke (maps to CLI exit code 3)."""


class UnsupportedFault(ClusterError):
    """This backend cannot inject the requested fault."""


@dataclass
class ClusterSpec:
    run_id: str                      # unique per run; also the rendezvous id and compose project suffix
    run_dir: Path                    # host directory: events/, logs/, faults.jsonl, result.json
    nodes: int = 2
    procs_per_node: int = 1
    min_nodes: int = 1
    max_nodes: int = 2
    rendezvous: str = "c10d"         # c10d | etcd-v3 | etcd (v2)
    max_restarts: int = 10
    trainer_config: str = "trainer/configs/tiny.yaml"
    trainer_overrides: dict[str, object] = field(default_factory=dict)   # "section.field" -> value
    command: list[str] | None = None  # raw escape hatch: argv run by each node instead of torchrun+trainer
    job_argv: list[str] | None = None  # the user's job under our torchrun: [script, *args] or ['-m', module, *args]
    workdir: str | None = None         # host path of the user's project (cwd of the job; read-only on docker)
    trainer_image: str | None = None   # docker: the user's image for trainer nodes (python + torch)
    progress_regex: str | None = None  # read step progress from worker output (a job without events)
    checkpoint_tier: str = "nvme"      # where $CHAOSBENCH_CHECKPOINT_DIR points: nvme | memory
    env: dict[str, str] = field(default_factory=dict)
    nvme_size_mb: int = 256          # size limit of each node's NVMe mount
    shm_size_mb: int = 512
    persistent_nvme: bool = True     # NVMe survives a node restart (per-node volume)
    rdzv_timeouts: dict[str, float] = field(default_factory=dict)  # keep-alive / join timeouts passed to torchrun
    spare_nodes: int = 0             # nodes beyond torchrun's max_nodes add_node may run (hot spares); torch 2.15's
                                     # rendezvous livelocks with them (docs/recovery.md), so 0 unless you test that
    warm_start: bool = True          # reference trainer: workers fork from a node-local server with torch imported


    @property
    def user_job(self) -> bool:
        return bool(self.command or self.job_argv)


class Cluster(UpDown, abc.ABC):
    """Lifecycle + fault primitives. Use as a context manager (UpDown): teardown always runs."""

    backend: str = "abstract"
    #: names of the fault primitives this backend supports (method names below)
    supported_faults: frozenset[str] = frozenset()
    #: set by down() once everything it started is verifiably gone (the runner reports it as such)
    torn_down: bool = False

    def __init__(self, spec: ClusterSpec):
        self.spec = spec

    # -- lifecycle -------------------------------------------------------------------------
    @abc.abstractmethod
    def up(self) -> None:
        """Start services (etcd, proxy with routes 'etcd' and 's3', S3 with bucket) and wait until healthy."""

    @abc.abstractmethod
    def start_training(self) -> None:
        """Start every node's launcher (torchrun + trainer, or spec.command)."""

    @abc.abstractmethod
    def node_names(self) -> list[str]:
        """Current node names, e.g. ['node-0', 'node-1']."""

    @abc.abstractmethod
    def node_status(self, node: str) -> str:
        """'running' | 'exited:<code>' | 'paused' | 'absent' — for the observer, not for checks."""

    @property
    @abc.abstractmethod
    def events_dir(self) -> Path:
        """Host directory where the trainers' events-*.jsonl files appear (live)."""

    @property
    @abc.abstractmethod
    def proxy_api(self) -> str:
        """Base URL of the Toxiproxy-compatible API reachable from the harness."""

    @property
    @abc.abstractmethod
    def s3_endpoint(self) -> str:
        """S3 endpoint URL reachable from the harness (direct, not through the proxy)."""

    @abc.abstractmethod
    def collect(self) -> None:
        """Copy logs (per node/service) into run_dir/logs and record exit codes in run_dir/exits.json."""

    @abc.abstractmethod
    def down(self) -> None:
        """Remove everything this cluster started. Idempotent; never raises on already-gone parts."""

    def _check_room_for_node(self) -> None:
        """add_node's limit. Dead nodes do not count: a lost node's replacement is a new node (a new name)."""
        live = [n for n in self.node_names() if not self.node_status(n).startswith("exited")]
        limit = self.spec.max_nodes + self.spec.spare_nodes
        if len(live) >= limit:
            raise ClusterError(f"add_node: {len(live)} nodes running = max_nodes={self.spec.max_nodes} + "
                               f"spare_nodes={self.spec.spare_nodes}; raise cluster max_nodes or spare_nodes")

    def _unsupported(self, what: str):
        raise UnsupportedFault(f"backend '{self.backend}' does not support {what}")

    def kill_node(self, node: str) -> None: self._unsupported("kill_node")          # SIGKILL whole node
    def stop_node(self, node: str) -> None: self._unsupported("stop_node")          # graceful stop
    def start_node(self, node: str) -> None: self._unsupported("start_node")        # (re)start a stopped/killed node

    def start_nodes(self, nodes: list[str]) -> None:
        """(Re)start several nodes as one group (kill_all's restart). A backend whose start is slow
        per node overrides this to start them together, so all of them make the first rendezvous."""
        for node in nodes:
            self.start_node(node)

    def kill_worker(self, node: str, local_rank: int = 0) -> None: self._unsupported("kill_worker")
    def pause_node(self, node: str) -> None: self._unsupported("pause_node")        # freeze (SIGSTOP / docker pause)
    def unpause_node(self, node: str) -> None: self._unsupported("unpause_node")
    def partition(self, node: str, peers: list[str] | None = None) -> None: self._unsupported("partition")  # silent DROP
    def disconnect(self, node: str) -> None: self._unsupported("disconnect")        # loud: connections fail at once
    def heal_network(self, node: str) -> None: self._unsupported("heal_network")
    def fill_nvme(self, node: str, percent: float = 100.0) -> None: self._unsupported("fill_nvme")
    def free_nvme(self, node: str) -> None: self._unsupported("free_nvme")
    def wipe_node_storage(self, node: str, nvme: bool = True, shm: bool = True) -> None: self._unsupported("wipe_node_storage")
    def nvme_dir(self, node: str) -> Path: self._unsupported("nvme_dir")            # host path, for corruption faults
    def shm_dir(self, node: str) -> Path: self._unsupported("shm_dir")
    def kill_service(self, service: str) -> None: self._unsupported("kill_service")  # 'etcd' | 's3' | 'proxy'
    def start_service(self, service: str) -> None: self._unsupported("start_service")
    def pause_service(self, service: str) -> None: self._unsupported("pause_service")
    def unpause_service(self, service: str) -> None: self._unsupported("unpause_service")
    def add_node(self) -> str: self._unsupported("add_node")                          # scale up; returns the new name
