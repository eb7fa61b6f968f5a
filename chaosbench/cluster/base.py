"""What every cluster backend offers the scenario engine: the spec, the lifecycle and what it can inject.

A cluster is N trainer nodes plus etcd, the fault proxy and the S3 endpoint. Backends (docker/, local/,
slurm/) subclass `Cluster`: this module owns the spec, the lifecycle template (track, sweep, start; stop,
verify, untrack) and the capability derivation. The fault primitives are inherited from one module per
family (primitives/: nodes, workers, cpu_memory, clocks, names, preemption, links, disks, services),
each either written once over hooks a backend implements (`@primitive(via=...)`) or a contract each
backend implements itself (`@backend_primitive`). A primitive is supported exactly when the backend
implements it or the hooks it is built on (`supported_faults`); `implementations()` says where
(`python -m chaosbench.cluster.where`). Otherwise it raises `UnsupportedFault` with the reason, so a
scenario that needs it is refused up front saying why.
"""
from __future__ import annotations

import abc
import inspect
import re
import subprocess
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from chaosbench.cluster.errors import ClusterError, UnsupportedFault
from chaosbench.cluster.lifecycle import UpDown, track, untrack
from chaosbench.cluster.node.scripts import Script
from chaosbench.cluster.primitives.clocks import ClockPrimitives
from chaosbench.cluster.primitives.cpu_memory import CpuMemoryPrimitives
from chaosbench.cluster.primitives.disks import DiskPrimitives
from chaosbench.cluster.primitives.links import LinkPrimitives
from chaosbench.cluster.primitives.names import NamePrimitives
from chaosbench.cluster.primitives.nodes import NodePrimitives
from chaosbench.cluster.primitives.preemption import PreemptionPrimitives
from chaosbench.cluster.primitives.services import ServicePrimitives
from chaosbench.cluster.primitives.ray_nodes import RayPrimitives
from chaosbench.cluster.primitives.workers import WorkerPrimitives
from chaosbench.reference_trainer import DEFAULT_CONFIG

PACKAGE_ROOT = Path(__file__).resolve().parents[2]   # where implementations() paths start


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
    trainer_config: str = DEFAULT_CONFIG
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
    launcher: str = "torchrun"         # what runs the job on each node (chaosbench/launchers/)
    launcher_args: list[str] = field(default_factory=list)   # more of the launcher's own flags, as given
    spare_nodes: int = 0             # nodes beyond torchrun's max_nodes add_node may run (hot spares); torch 2.15's
                                     # rendezvous livelocks with them (docs/recovery.md), so 0 unless you test that
    warm_start: bool = True          # reference trainer: workers fork from a node-local server with torch imported
    # every process of each node's training runs under libfaketime reading its node's control file
    # (node/clock.py) from the node's start; set when the scenario has a clock_skew (faults/clocks.py)
    fake_clock: bool = False
    # node -> {'tiers': ['nvme', 'memory'], 'writeback': bool}: where the disk layer (node/disk_layer.py) is mounted
    # from each start of the node; set from the scenario's faults (faults/disks.py:disk_layers)
    disk_layers: dict[str, dict] = field(default_factory=dict)
    # the job's own packages (cluster/jobenv: normalised pip specifiers, a launcher's pins included), installed
    # into a derived image (docker) or a cached prefix (local); requirements_origin names where they were declared
    requirements: list[str] = field(default_factory=list)
    requirements_origin: str = ""
    # backend ray: the scenario's trainer.ray (loop, max_failures, storage, config): cluster/ray/job.py
    ray: dict = field(default_factory=dict)

    @property
    def user_job(self) -> bool:
        return bool(self.command or self.job_argv)


def project_name(run_id: str) -> str:
    """A name unique per cluster (compose project, shm/scratch dirs, Slurm job name): run id + random."""
    return f"cb{re.sub(r'[^a-z0-9]+', '', run_id.lower())[:20]}{uuid.uuid4().hex[:8]}"


def project_name(run_id: str) -> str:
    """A name unique per cluster (compose project, shm/scratch dirs, Slurm job name): run id + random."""
    return f"cb{re.sub(r'[^a-z0-9]+', '', run_id.lower())[:20]}{uuid.uuid4().hex[:8]}"


class Cluster(UpDown, NodePrimitives, PreemptionPrimitives, WorkerPrimitives, CpuMemoryPrimitives, ClockPrimitives,
              NamePrimitives, LinkPrimitives, DiskPrimitives, ServicePrimitives, RayPrimitives, abc.ABC):
    """Lifecycle + fault primitives. Use as a context manager (UpDown): teardown always runs.

    A backend implements: `_sweep_dead()`, `_start()` (which sets `services`), `_stop() -> leftovers`,
    `start_training()`, `node_status()`, `collect()`, the `@backend_primitive`s it has, and the hooks
    its shared primitives need: `_run_in_node(node, script, *args) -> stdout` and `_start_in_node(node,
    script, *args) -> Popen` (in-node commands, node/scripts.py), `_node_markers(node)`,
    `_incarnation(node)` (preemption.py), `_service_action(service, action)` (services.py),
    `_nvme_in_node(node)`, `_disk_tiers_in_node(node)` (disks.py), `_cut_targets(node, peers)`,
    `_link_targets(node, to, peer)` (links.py), `_clock_file(node)` (clocks.py).
    """

    backend: str = "abstract"
    #: names of the fault primitives this backend supports: derived from the code (__init_subclass__)
    supported_faults: frozenset[str] = frozenset()
    #: set by down() once everything it started is verifiably gone (the runner reports it as such)
    torn_down: bool = False
    #: set by start_training() where the go waits for the nodes' imports (docker): waited_s, not_ready,
    #: not_running; the runner records it in harness.json
    ready_wait: dict | None = None
    job_packages: list[str] | None = None   # name==version of the job's own packages as installed (cluster/jobenv)
    #: primitive -> why this backend cannot do it (said by UnsupportedFault)
    unsupported_why: dict[str, str] = {}
    #: where etcd, S3 and the proxy are once up: an object with .proxy_api and .s3_endpoint
    services = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.supported_faults = cls.implemented_faults() - cls.withheld()
        declared = {n: getattr(Cluster, n).why for n in fault_primitives()
                    if getattr(Cluster, n).why and n not in cls.supported_faults}
        cls.unsupported_why = {**declared, **cls.unsupported_why}   # a backend's own reason wins

    # -- capability derivation ----------------------------------------------------------------
    @classmethod
    def implementations(cls) -> dict[str, str | None]:
        """primitive -> where this backend implements it: its own method ("file:line Class.method"), or
        the shared one and the hooks it is built on ("... via file:line Class.hook"); None: it does not."""
        out = {}
        for name in fault_primitives():
            shared, own = getattr(Cluster, name), getattr(cls, name)
            hooks = shared.via_hook
            if own is not shared:
                out[name] = _where(own)
            elif hooks and all(getattr(cls, h) is not getattr(Cluster, h) for h in hooks):
                out[name] = f"{_where(shared)} via " + ", ".join(_where(getattr(cls, h)) for h in hooks)
            else:
                out[name] = None
        return out

    @classmethod
    def implemented_faults(cls) -> frozenset[str]:
        """Primitives the class overrides, or whose shared implementation's hooks it implements."""
        return frozenset(name for name, where in cls.implementations().items() if where)

    @classmethod
    def withheld(cls) -> frozenset[str]:
        """Primitives implemented in code but not available on this machine or site (read at import
        and again per instance)."""
        return frozenset()

    def __init__(self, spec: ClusterSpec):
        self.spec = spec
        self.project = project_name(spec.run_id)
        self.run_dir = Path(spec.run_dir).resolve()
        self._nodes = [f"node-{i}" for i in range(spec.nodes)]
        self._preemptions: dict[str, list[threading.Timer]] = {}  # node -> preempt_node's kills after the grace
        self._throttles: dict[str, subprocess.Popen] = {}   # node -> its duty-cycle loop (throttle_node)
        self._standby: set[str] = set()   # started by add_standby, not yet released
        self.supported_faults = self.implemented_faults() - self.withheld()

    def _preemption_timers(self, nodes=None) -> list[threading.Timer]:
        return [t for node, ts in self._preemptions.items() if nodes is None or node in nodes for t in ts]

    # -- lifecycle (template) --------------------------------------------------------------
    def up(self) -> None:
        """Start services (etcd, proxy with routes 'etcd' and 's3', S3 with bucket) and wait until healthy."""
        track(self)
        self._sweep_dead()   # leftovers of crashed runs (dead owners only)
        self._start()

    def down(self) -> None:
        """Remove everything this cluster started. Idempotent; never raises on already-gone parts;
        raises (and stays tracked: the exit-time sweep retries) while something is left."""
        for timer in self._preemption_timers():   # delayed fault actions: teardown removes everything anyway
            timer.cancel()
        for node in list(self._throttles):
            self._end_throttle(node)
        left = self._stop()
        if left:
            raise ClusterError(f"teardown of {self.project} left " + "; ".join(left))
        self.torn_down = True
        untrack(self)

    def _sweep_dead(self) -> None:
        """Remove what harnesses that are gone left behind (after a SIGKILL)."""

    def _start(self) -> None:
        raise NotImplementedError

    def _stop(self) -> list[str]:
        """Remove what this cluster started; return what is verifiably left (empty: all gone)."""
        raise NotImplementedError

    @abc.abstractmethod
    def start_training(self) -> None:
        """Start every node's launcher (torchrun + trainer, or spec.command)."""

    def node_names(self) -> list[str]:
        """Current node names, e.g. ['node-0', 'node-1']; not the standbys still held (add_standby)."""
        return [n for n in self._nodes if n not in self._standby]

    @abc.abstractmethod
    def node_status(self, node: str) -> str:
        """'running' | 'exited:<code>' | 'paused' | 'absent' — for the observer, not for checks."""

    @property
    def events_dir(self) -> Path:
        """Host directory where the trainers' events-*.jsonl files appear (live)."""
        return self.run_dir / "events"

    @property
    def proxy_api(self) -> str:
        """Base URL of the Toxiproxy-compatible API reachable from the harness."""
        return self.services.proxy_api

    @property
    def s3_endpoint(self) -> str:
        """S3 endpoint URL reachable from the harness (direct, not through the proxy)."""
        return self.services.s3_endpoint

    @abc.abstractmethod
    def collect(self) -> None:
        """Copy logs (per node/service) into run_dir/logs and record exit codes in run_dir/exits.json."""

    # -- optional features (the runner calls them on every backend) -------------------------
    def refusal_hint(self) -> str:
        """Appended to an up-front refusal: why faults are missing here (e.g. a site's policy)."""
        return ""

    def probe_faults(self, needs: set[str]) -> list[str]:
        """After up(), before training: the needed primitives the nodes turn out not to permit, each with why."""
        return []

    def record(self) -> dict:
        """Backend ids for the run record (harness.json)."""
        return {}

    def attach_hint(self) -> str:
        """For --keep-cluster: where the running cluster is and how to remove it."""
        return f"events in {self.events_dir}; proxy API {self.proxy_api}; `chaosbench clean` removes it"

    # -- hooks every family of shared primitives is built on -----------------------------------
    def _check_node(self, node: str) -> None:
        if node not in self._nodes:
            raise ClusterError(f"unknown node {node!r}; nodes: {', '.join(self._nodes)}")

    def _run_in_node(self, node: str, script: Script, *args: str, timeout: float = 120) -> str:
        """Run an in-node script on `node`; its stdout. Raises ClusterError when it fails."""
        self._unsupported("in-node commands")

    def _start_in_node(self, node: str, script: Script, *args: str) -> subprocess.Popen:
        """Start a long-running in-node script on `node` without waiting for it (its handle)."""
        self._unsupported("long-running in-node commands")

    def _node_markers(self, node: str) -> dict[str, str]:
        """Environment KEY=VALUEs that every process of this node's training carries (node_plan's env)."""
        return {"CHAOSBENCH_RUN_ID": self.spec.run_id, "CHAOSBENCH_NODE": node}

    def _marker_args(self, node: str) -> list[str]:
        """_node_markers as node/procs.py's KEY=VALUE arguments."""
        return [f"{k}={v}" for k, v in self._node_markers(node).items()]

    def _unsupported(self, what: str):
        why = self.unsupported_why.get(what)
        raise UnsupportedFault(f"backend '{self.backend}' does not support {what}" + (f": {why}" if why else ""))


def fault_primitives() -> tuple[str, ...]:
    """Every fault primitive's name (the methods marked @primitive or @backend_primitive), family by family."""
    out: dict[str, None] = {}
    for family in Cluster.__mro__:
        out.update((n, None) for n, f in vars(family).items() if getattr(f, "fault_primitive", False))
    return tuple(out)


def _where(fn) -> str:
    """'chaosbench/cluster/docker/backend.py:343 DockerCluster.kill_node' for a method."""
    fn = inspect.unwrap(fn)
    path = Path(inspect.getsourcefile(fn)).resolve()
    rel = path.relative_to(PACKAGE_ROOT) if path.is_relative_to(PACKAGE_ROOT) else path
    return f"{rel}:{fn.__code__.co_firstlineno} {fn.__qualname__}"
