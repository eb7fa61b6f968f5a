"""What every cluster backend offers the scenario engine.

A cluster is N trainer nodes plus etcd, the fault proxy and the S3 endpoint. Backends (docker,
local, slurm) subclass `Cluster`: the base owns the lifecycle skeleton (track, sweep, start; stop,
verify, untrack) and the fault primitives that act inside a node (innode.py), built on a few hooks
each backend implements. A primitive is supported exactly when the backend implements it or the
hook it is built on (`supported_faults`, derived below); otherwise it raises `UnsupportedFault`
with the reason, so a scenario that needs it is refused up front saying why.
"""
from __future__ import annotations

import abc
import functools
import re
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from chaosbench.cluster import innode, nfqueue_link
from chaosbench.cluster.innode import FILL_FILE  # noqa: F401  (re-exported: the backends' fill ballast)
from chaosbench.cluster.lifecycle import UpDown, track, untrack
from chaosbench.reference_trainer import DEFAULT_CONFIG


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
    spare_nodes: int = 0             # nodes beyond torchrun's max_nodes add_node may run (hot spares); torch 2.15's
                                     # rendezvous livelocks with them (docs/recovery.md), so 0 unless you test that
    warm_start: bool = True          # reference trainer: workers fork from a node-local server with torch imported
    # every process of each node's training runs under libfaketime reading its node's control file
    # (innode_clock.py) from the node's start; set when the scenario has a clock_skew (faults/clocks.py)
    fake_clock: bool = False
    # node -> {'tiers': ['nvme', 'memory'], 'writeback': bool}: where the disk layer (disk_layer.py) is mounted
    # from each start of the node; set from the scenario's faults (faults/disks.py:disk_layers)
    disk_layers: dict[str, dict] = field(default_factory=dict)


    @property
    def user_job(self) -> bool:
        return bool(self.command or self.job_argv)


def project_name(run_id: str) -> str:
    """A name unique per cluster (compose project, shm/scratch dirs, Slurm job name): run id + random."""
    return f"cb{re.sub(r'[^a-z0-9]+', '', run_id.lower())[:20]}{uuid.uuid4().hex[:8]}"


# why a backend without the disk layer's hook (_disk_tiers_in_node) refuses disk faults
DISK_LAYER_WHY = dict.fromkeys(("fault_disk", "heal_disk", "disk_stats"), (
    "no disk layer: disk_fault and lose_unsynced_writes need a FUSE layer mounted over the node's tier from the "
    "node's start (docker: /dev/fuse and CAP_SYS_ADMIN in the node; local: root, /dev/fuse, fusermount3 and "
    "mfusepy on this host); Slurm nodes' directories are the site's; use the docker backend"))
# why a backend without the clock hook (_clock_file) refuses clock faults
CLOCK_WHY = dict.fromkeys(("skew_clock", "restore_clock"), (
    "no clock control: clock_skew needs every process of the node's training started under libfaketime with a "
    "control file the harness rewrites (docker and local have it; the Slurm backend does not start its nodes "
    "under the preload, and a site's hosts may not have libfaketime); use the docker or local backend"))
# a primitive's reason where the backend lacks the hook it is built on (a backend's own reason wins)
MISSING_HOOK_WHY = {**DISK_LAYER_WHY, **CLOCK_WHY}


def primitive(fn=None, *, via: str | tuple[str, ...] = ()):
    """Marks a fault primitive of the base class. `via`: the hook(s) the base's own implementation is
    built on; a backend that implements them supports the primitive without overriding it."""
    via = (via,) if isinstance(via, str) else tuple(via)

    def mark(f):
        if via:   # refuse by name where the backend lacks the hook or withholds the primitive
            impl = f

            @functools.wraps(impl)
            def f(self, *args, **kwargs):
                if impl.__name__ not in self.supported_faults:
                    self._unsupported(impl.__name__)
                return impl(self, *args, **kwargs)
        f.fault_primitive, f.via_hook = True, via
        return f
    return mark(fn) if fn is not None else mark


class Cluster(UpDown, abc.ABC):
    """Lifecycle + fault primitives. Use as a context manager (UpDown): teardown always runs.

    A backend implements: `_sweep_dead()`, `_start()` (which sets `services`), `_stop() -> leftovers`,
    `start_training()`, `node_status()`, `collect()`, and the hooks its primitives need:
    `_run_in_node(node, script, *args) -> stdout` and `_start_in_node(node, script, *args) -> Popen`
    (in-node commands, innode.py), `_node_markers(node)`, `_incarnation(node)`,
    `_service_action(service, action)`, `_nvme_in_node(node)`, `_cut_targets(node, peers)`.
    """

    backend: str = "abstract"
    #: names of the fault primitives this backend supports: derived from the code (__init_subclass__)
    supported_faults: frozenset[str] = frozenset()
    #: set by down() once everything it started is verifiably gone (the runner reports it as such)
    torn_down: bool = False
    #: set by start_training() where the go waits for the nodes' imports (docker): waited_s, not_ready,
    #: not_running; the runner records it in harness.json
    ready_wait: dict | None = None
    #: primitive -> why this backend cannot do it (said by UnsupportedFault)
    unsupported_why: dict[str, str] = {}
    #: what netem_link carries delay / jitter / duplicate / corrupt / reorder with: 'netem' (a qdisc) or
    #: 'nfqueue' (the in-node handler, innode_nfqueue.py, where the nodes' kernel has no sch_netem)
    netem_mechanism: str | None = "netem"
    #: fill_nvme refuses unless this node directory is its own filesystem (None: no such check)
    fill_guard: str | None = None
    #: where etcd, S3 and the proxy are once up: an object with .proxy_api and .s3_endpoint
    services = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.supported_faults = cls.implemented_faults() - cls.withheld()
        missing = {k: v for k, v in MISSING_HOOK_WHY.items() if k not in cls.supported_faults}
        cls.unsupported_why = {**missing, **cls.unsupported_why}   # a backend's own reason wins

    @classmethod
    def implemented_faults(cls) -> frozenset[str]:
        """Primitives the class overrides, or whose base implementation's hook it implements."""
        out = set()
        for name in fault_primitives():
            base = getattr(Cluster, name)
            hooks = base.via_hook
            if getattr(cls, name) is not base or \
                    (hooks and all(getattr(cls, h) is not getattr(Cluster, h) for h in hooks)):
                out.add(name)
        return frozenset(out)

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
        self._timers: list[threading.Timer] = []
        self._throttles: dict[str, subprocess.Popen] = {}   # node -> its duty-cycle loop
        self._standby: set[str] = set()   # started by add_standby, not yet released
        self.supported_faults = self.implemented_faults() - self.withheld()

    # -- lifecycle (template) --------------------------------------------------------------
    def up(self) -> None:
        """Start services (etcd, proxy with routes 'etcd' and 's3', S3 with bucket) and wait until healthy."""
        track(self)
        self._sweep_dead()   # leftovers of crashed runs (dead owners only)
        self._start()

    def down(self) -> None:
        """Remove everything this cluster started. Idempotent; never raises on already-gone parts;
        raises (and stays tracked: the exit-time sweep retries) while something is left."""
        for timer in self._timers:   # delayed fault actions: teardown removes everything anyway
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

    # -- hooks the shared primitives are built on --------------------------------------------
    def _check_node(self, node: str) -> None:
        if node not in self._nodes:
            raise ClusterError(f"unknown node {node!r}; nodes: {', '.join(self._nodes)}")

    def _run_in_node(self, node: str, script: innode.Script, *args: str, timeout: float = 120) -> str:
        """Run an in-node script on `node`; its stdout. Raises ClusterError when it fails."""
        self._unsupported("in-node commands")

    def _node_markers(self, node: str) -> dict[str, str]:
        """Environment KEY=VALUEs that every process of this node's training carries (node_plan's env)."""
        return {"CHAOSBENCH_RUN_ID": self.spec.run_id, "CHAOSBENCH_NODE": node}

    def _service_action(self, service: str, action: str) -> None:
        """kill | start | pause | unpause one service ('etcd' | 's3' | 'proxy') in place."""
        self._unsupported(f"{action}_service")

    def _nvme_in_node(self, node: str) -> str:
        """The node's NVMe directory as the node's processes see it."""
        self._unsupported("fill_nvme")

    def _cut_targets(self, node: str, peers: list[str] | None) -> list[str]:
        """Hosts or addresses (as the node resolves them) of `peers`; None: every other node and the services."""
        self._unsupported("partition")

    def _link_targets(self, node: str, to: str, peer: str | None) -> tuple[str, list[str]]:
        """The node's interface and what a degraded link `to` (data | rendezvous | etcd | s3 | all) or to
        `peer` covers, as `ip` or `ip:tcp port` (an endpoint shared by the whole host is no link of one node)."""
        self._unsupported("degrade_link")

    def _check_room_for_node(self, what: str = "add_node",
                             fix: str = "raise cluster max_nodes or spare_nodes") -> None:
        """add_node's and release_standby's limit (`what` and `fix` name the caller and the way out). Dead
        nodes do not count: a lost node's replacement is a new node (a new name); nor do standbys still
        held (node_names leaves them out)."""
        live = [n for n in self.node_names() if not self.node_status(n).startswith("exited")]
        limit = self.spec.max_nodes + self.spec.spare_nodes
        if len(live) >= limit:
            raise ClusterError(f"{what}: {len(live)} nodes running = max_nodes={self.spec.max_nodes} + "
                               f"spare_nodes={self.spec.spare_nodes}; {fix}")

    def _unsupported(self, what: str):
        why = self.unsupported_why.get(what)
        raise UnsupportedFault(f"backend '{self.backend}' does not support {what}" + (f": {why}" if why else ""))

    # -- fault primitives --------------------------------------------------------------------
    @primitive
    def kill_node(self, node: str) -> None: self._unsupported("kill_node")          # SIGKILL whole node
    @primitive
    def stop_node(self, node: str) -> None: self._unsupported("stop_node")          # graceful stop
    @primitive
    def start_node(self, node: str) -> None: self._unsupported("start_node")        # (re)start a stopped/killed node

    def start_nodes(self, nodes: list[str]) -> None:
        """(Re)start several nodes as one group (kill_all's restart). A backend whose start is slow
        per node overrides this to start them together, so all of them make the first rendezvous."""
        for node in nodes:
            self.start_node(node)

    @primitive
    def pause_node(self, node: str) -> None: self._unsupported("pause_node")        # freeze (SIGSTOP / docker pause)
    @primitive
    def unpause_node(self, node: str) -> None: self._unsupported("unpause_node")
    @primitive
    def disconnect(self, node: str) -> None: self._unsupported("disconnect")        # loud: connections fail at once
    @primitive
    def wipe_node_storage(self, node: str, nvme: bool = True, shm: bool = True) -> None: self._unsupported("wipe_node_storage")
    @primitive
    def nvme_dir(self, node: str) -> Path: self._unsupported("nvme_dir")            # host path, for corruption faults
    @primitive
    def shm_dir(self, node: str) -> Path: self._unsupported("shm_dir")
    @primitive
    def add_node(self) -> str: self._unsupported("add_node")                          # scale up; returns the new name

    # -- warm standbys: a scheduler's replacement machines, booted before they are needed ----------
    @primitive
    def add_standby(self) -> str:
        """Start a node that boots (container, torch imports) but stays out of the rendezvous until
        release_standby: a replacement ready before a loss, held where torchrun's own hot spares
        (spare_nodes, its redundancy list) livelock on torch 2.15 (docs/recovery.md). Returns its name."""
        self._unsupported("add_standby")

    @primitive
    def release_standby(self, node: str) -> None:
        """Let a standby's agent join the rendezvous (it then counts toward max_nodes)."""
        self._unsupported("release_standby")

    @primitive(via="start_training")
    def send_job_command(self, fault_id: str, payload: dict) -> Path:
        """A cooperative fault's command to the job (chaosbench.instrument reads it at its next step):
        `<events_dir>/inject/<fault_id>.json`, written atomically. Built on start_training: a backend that
        runs the job shares events_dir with its nodes; one whose nodes write elsewhere (node_events_dir,
        streamed back) cannot deliver it. The workers create `<id>.fired` beside it, so the directory gets
        the events directory's own mode (they write events there already)."""
        import json
        import os
        import stat
        node_dir = getattr(self, "node_events_dir", None)
        if node_dir is not None and str(node_dir) != str(self.events_dir):
            raise UnsupportedFault(f"backend '{self.backend}' does not support send_job_command: its nodes write "
                                   f"events to {node_dir}, not to {self.events_dir} (set a shared filesystem)")
        inject = self.events_dir / "inject"
        inject.mkdir(mode=0o755, parents=True, exist_ok=True)
        inject.chmod(stat.S_IMODE(self.events_dir.stat().st_mode))
        path = inject / f"{fault_id}.json"
        tmp = inject / f"{fault_id}.json.tmp"
        tmp.write_text(json.dumps({"v": 1, "id": fault_id, "run_id": self.spec.run_id, **payload}))
        os.chmod(tmp, 0o644)   # read by the workers, whoever they run as
        os.replace(tmp, path)
        return path

    # one local rank's worker (its subtree; never the agent), found by innode_procs.workers
    def _signal_worker(self, node: str, local_rank: int, sig: str) -> list[str]:
        self._check_node(node)
        markers = [f"{k}={v}" for k, v in self._node_markers(node).items()]
        pids = self._run_in_node(node, innode.PROCS, "workers", sig, str(local_rank), *markers).split()
        if not pids:
            raise ClusterError(f"{node}: no worker with LOCAL_RANK={local_rank} is running")
        return pids

    @primitive(via="_run_in_node")
    def kill_worker(self, node: str, local_rank: int = 0) -> None:
        """SIGKILL one worker; its agent sees it die and restarts the workers (memory tier)."""
        self._signal_worker(node, local_rank, "KILL")

    @primitive(via="_run_in_node")
    def freeze_worker(self, node: str, local_rank: int = 0) -> None:
        """SIGSTOP one worker: a hung rank whose agent still heartbeats (the gray failure)."""
        self._signal_worker(node, local_rank, "STOP")

    @primitive(via="_run_in_node")
    def thaw_worker(self, node: str, local_rank: int = 0) -> None:
        self._signal_worker(node, local_rank, "CONT")

    @primitive(via=("_start_in_node", "_run_in_node"))
    def throttle_node(self, node: str, cpu_fraction: float) -> None:
        """A straggler: the node runs `cpu_fraction` of the time (a SIGSTOP/SIGCONT duty cycle over
        its processes, run by an in-node loop until unthrottle_node). A backend with cgroups overrides it."""
        if not 0 < cpu_fraction <= 1:
            raise ClusterError(f"throttle_node cpu_fraction={cpu_fraction}: must be in (0, 1]")
        self._check_node(node)
        self._end_throttle(node)
        markers = [f"{k}={v}" for k, v in self._node_markers(node).items()]
        self._throttles[node] = self._start_in_node(node, innode.PROCS, "throttle", str(cpu_fraction), *markers)

    @primitive(via=("_start_in_node", "_run_in_node"))
    def unthrottle_node(self, node: str) -> None:
        self._check_node(node)
        self._end_throttle(node)
        # the loop resumes the node as it ends; a loop that was killed instead would leave it stopped
        markers = [f"{k}={v}" for k, v in self._node_markers(node).items()]
        self._run_in_node(node, innode.PROCS, "node", "CONT", *markers)

    @primitive
    def squeeze_memory(self, node: str, limit_mb: int | None = None, fraction: float | None = None) -> dict:
        """Leave the node limit_mb MiB (or fraction of what its processes hold now) until the kernel
        OOM-kills its biggest process; what was set ({'limit_mb', 'held_mb', 'oom_kill', ...}).
        Needs a memory cgroup per node: a balloon on a shared host would squeeze the whole host."""
        raise UnsupportedFault(f"backend '{self.backend}' does not support squeeze_memory: its nodes have no memory "
                               "cgroup of their own (a balloon would squeeze the whole host); the docker backend has it")

    @primitive
    def release_memory(self, node: str) -> dict:
        """Restore the node's own memory limit; {'oom_kills': kills since squeeze_memory (None: unknown)}."""
        raise UnsupportedFault(f"backend '{self.backend}' does not support release_memory (nor squeeze_memory)")

    def memory_kills(self, node: str) -> int | None:
        """OOM kills on the node since squeeze_memory, read while it holds (None: no squeeze, or no
        count to read). A read, not a primitive: what the runner asks to heal the squeeze early."""
        return None

    def _clock_file(self, node: str) -> tuple[Path, dict[str, str]]:
        """The node's clock control file on the host (the harness writes it) and the preload env its
        processes carry (innode_clock.preload_env, with the paths as the node sees them)."""
        self._unsupported("skew_clock")

    @primitive(via=("_clock_file", "_run_in_node"))
    def skew_clock(self, node: str, text: str, expect_s: float) -> dict:
        """Set the node's wall-clock offset (libfaketime's spec: "+30 x1", "+0 x1.0001"); a fresh preloaded
        process on the node must then read the wall clock expect_s from the real one (within 1 s).
        Returns {'seen_offset_s'} (None: the node is not running; the file is what its next start reads)."""
        from chaosbench.cluster import innode_clock
        self._check_node(node)
        if not self.spec.fake_clock:
            raise ClusterError(f"{node} runs without the libfaketime preload: it is set from the node's start "
                               "when the scenario has a clock_skew (ClusterSpec.fake_clock)")
        host, env = self._clock_file(node)
        innode_clock.write(host, text)
        if self.node_status(node) != "running":
            return {"seen_offset_s": None}
        seen = float(self._run_in_node(node, innode_clock.SEEN_OFFSET, env["FAKETIME_TIMESTAMP_FILE"],
                                       env["LD_PRELOAD"], timeout=60).strip())
        if abs(seen - expect_s) > 1.0:
            raise ClusterError(f"{node}: after writing {text!r} to {host}, a preloaded process reads the wall "
                               f"clock {seen:+.3f} s from the real one, not {expect_s:+g} s")
        return {"seen_offset_s": round(seen, 3)}

    @primitive
    def skew_monotonic(self, node: str) -> None:
        """clock_skew with clocks: all (CLOCK_MONOTONIC moved as well). No backend has it."""
        raise UnsupportedFault(
            f"backend '{self.backend}' does not support skew_monotonic (clocks: all): libfaketime 0.9.10 (the node "
            "images') fakes CLOCK_MONOTONIC as the wall clock, and Python 3.11's timed waits then never return "
            "(threading.Event().wait(0.2) hung); time namespaces (unshare --time) offset it only for processes "
            "started after the fault, never the running trainer. Use clocks: realtime (what an NTP step moves)")

    @primitive(via=("_clock_file", "_run_in_node"))
    def restore_clock(self, node: str) -> dict:
        """Write "+0 x1" back and verify that a preloaded process on the node reads real time (within 1 s)."""
        from chaosbench.cluster.innode_clock import NO_SKEW
        return self.skew_clock(node, NO_SKEW, 0.0)

    @primitive
    def break_name(self, node: str, name: str, mode: str, delay_s: float = 5.0) -> str:
        """Make `name` (rendezvous | etcd | s3 | proxy, or a host name) fail to resolve on `node` only
        (mode nxdomain | wrong_address | slow); what host was broken. Needs a resolver of the node's own."""
        raise UnsupportedFault(f"backend '{self.backend}' does not support break_name: its nodes share the "
                               "host's resolver (no /etc/hosts or resolv.conf of their own); the docker backend has it")

    @primitive
    def restore_names(self, node: str) -> None:
        """Put back the node's resolver files exactly as they were before break_name."""
        raise UnsupportedFault(f"backend '{self.backend}' does not support restore_names (nor break_name)")

    @primitive
    def break_endpoint_name(self, node: str, name: str, mode: str, delay_s: float = 5.0) -> str:
        """break_name for a name the harness hands the nodes (rendezvous | etcd | s3 | proxy). A backend
        that gives them as host names implements it; none does yet."""
        raise UnsupportedFault(f"backend '{self.backend}' does not support break_endpoint_name: its nodes are given "
                               "the rendezvous endpoint, etcd, S3 and the proxy as IP addresses (or share the host's "
                               "resolver), so no lookup of them can fail; on docker name a host the node resolves "
                               "(node-0: the rank-0 node, whose name the workers' store is reached by)")

    def _end_throttle(self, node: str) -> None:
        loop = self._throttles.pop(node, None)
        if loop is None or loop.poll() is not None:
            return
        loop.terminate()   # srun forwards SIGTERM to its step's task
        try:
            loop.wait(timeout=15)
        except subprocess.TimeoutExpired:
            loop.kill()
            loop.wait(timeout=10)

    def _start_in_node(self, node: str, script: innode.Script, *args: str) -> subprocess.Popen:
        """Start a long-running in-node script on `node` without waiting for it (its handle)."""
        self._unsupported("long-running in-node commands")

    @primitive(via="_run_in_node")
    def preempt_node(self, node: str, grace_s: float = 30.0) -> None:
        """SIGTERM every process of the node (launcher, agent, workers), as a preemption notice does;
        SIGKILL whatever of it is left after grace_s (kill_node), unless the node was started again
        meanwhile. Returns at once: the grace runs on a timer, cancelled by teardown."""
        if grace_s < 0:
            raise ClusterError(f"preempt_node grace_s={grace_s}: must be >= 0")
        self._check_node(node)
        incarnation = self._incarnation(node)
        markers = [f"{k}={v}" for k, v in self._node_markers(node).items()]
        self._run_in_node(node, innode.PROCS, "node", "TERM", *markers)

        def kill_the_rest():
            if self._incarnation(node) != incarnation:
                return   # a new incarnation of the node: not ours to kill
            try:
                self.kill_node(node)
            except ClusterError as exc:
                if not self.node_status(node).startswith("exited"):
                    print(f"chaosbench: preempt_node({node}): the kill after {grace_s:g} s failed: {exc}",
                          file=sys.stderr)
        timer = threading.Timer(grace_s, kill_the_rest)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _incarnation(self, node: str) -> object:
        """Changes whenever the node is started again (a preemption's kill must not hit its successor)."""
        return None

    @primitive(via="_cut_targets")
    def partition(self, node: str, peers: list[str] | None = None) -> None:
        """Silent: iptables DROP inside the node towards its peers' and the services' addresses."""
        self._check_node(node)
        self._run_in_node(node, innode.cut(innode.DROP), *self._cut_targets(node, peers))

    @primitive(via="_cut_targets")
    def heal_network(self, node: str) -> None:
        """Remove our chain from the node entirely."""
        self._check_node(node)
        self._run_in_node(node, innode.HEAL)

    @primitive(via="_link_targets")
    def degrade_link(self, node: str, spec: dict) -> dict:
        """A lossy / slow link (spec: to | peer, loss_pct, rate_kbit): loss by iptables `statistic` in
        our own chain, rate by an htb class the node's sends to those addresses go through. Returns
        {'targets', 'mechanism'}: which mechanism carried each effect."""
        return self._degrade(node, spec, netem=False)

    @primitive(via="_link_targets")
    def netem_link(self, node: str, spec: dict) -> dict:
        """degrade_link plus delay / jitter / duplicate / corrupt / reorder: by a netem qdisc under our htb
        class, or where the kernel has no sch_netem by the NFQUEUE handler (netem_mechanism); keep_order:
        jitter that keeps the packets' order (a pfifo under netem, a FIFO in the handler)."""
        return self._degrade(node, spec, netem=True)

    @primitive(via="_link_targets")
    def restore_link(self, node: str) -> dict | None:
        """Remove our chain and qdisc from the node; fails loudly if any of it is left. Returns {'tcp': what
        the node's TCP counted since the link was degraded (tcp_during; None: not read)}."""
        self._check_node(node)
        tcp = tcp_during(self.__dict__.setdefault("_link_tcp", {}).pop(node, None), self._tcp_counters(node))
        self._run_in_node(node, innode.RESTORE_LINK, self._link_targets(node, "data", None)[0])
        nfqueue_link.reap(self, node)
        return {"tcp": tcp}

    def _degrade(self, node: str, spec: dict, netem: bool) -> dict:
        self._check_node(node)
        dev, targets = self._link_targets(node, spec.get("to") or "data", spec.get("peer"))
        if not targets:
            raise ClusterError(f"degrade_link {node}: no address to degrade (to={spec.get('to')}, peer={spec.get('peer')})")
        before = self._tcp_counters(node)
        via = self.netem_mechanism if netem else None
        loss, rate, args = spec.get("loss_pct"), spec.get("rate_kbit"), netem_args(spec) if via == "netem" else ""
        mechanism = {**({"loss_pct": "iptables statistic"} if loss else {}),
                     **({"rate_kbit": "htb"} if rate else {}),
                     **{k: via for k in (*NETEM_FIELDS, "keep_order") if via and spec.get(k)}}
        queue = nfqueue_link.start(self, node, {k: spec[k] for k in (*NETEM_FIELDS, "keep_order") if spec.get(k)}) \
            if via == "nfqueue" else "-"
        try:
            self._run_in_node(node, innode.DEGRADE_LINK, dev, f"{loss / 100:.6f}" if loss else "-",
                              str(max(1, round(rate))) if rate else "-", args or "-",
                              "fifo" if args and spec.get("keep_order") else "-", queue, *targets)
        except ClusterError:
            if queue != "-":   # the handler runs already: stop it with whatever rules went in
                self.restore_link(node)
            raise
        self.__dict__.setdefault("_link_tcp", {})[node] = before
        return {"targets": targets, "mechanism": mechanism,
                **({"tcp_congestion_control": before["congestion_control"]} if before and "congestion_control" in before
                   else {})}

    def _tcp_counters(self, node: str) -> dict | None:
        """The node's TCP counters ({figure: count}, TCP_FIGURES) and 'congestion_control', read inside it;
        None where the read fails: the link's degrade and restore record what changed in between."""
        try:
            return tcp_counters(self._run_in_node(node, innode.TCP_COUNTERS, timeout=30))
        except ClusterError:
            return None

    def _disk_tiers_in_node(self, node: str) -> dict[str, str]:
        """tier -> directory of the node's tiers under the disk layer (disk_layer.py), mounted at each start
        of the node where spec.disk_layers asks for it."""
        self._unsupported("fault_disk")

    def _disk_args(self, node: str) -> list[str]:
        """disk_layer.py's leading arguments for this node (local nodes: their own control directory)."""
        return []

    def _disk_tier(self, node: str, tier: str) -> None:
        self._check_node(node)
        if tier not in self._disk_tiers_in_node(node):
            raise ClusterError(f"{node} runs no disk layer over its {tier} tier (spec.disk_layers: "
                               f"{self.spec.disk_layers.get(node)}); the scenario's faults decide where it runs")

    @primitive(via=("_run_in_node", "_disk_tiers_in_node"))
    def fault_disk(self, node: str, tier: str, fault: dict) -> dict:
        """Make the node's disk layer over `tier` inject `fault` ({op, errno, probability, latency_ms,
        bitflip_on_read}); returns once the layer took it, with the layer's stats."""
        import json
        self._disk_tier(node, tier)
        return json.loads(self._run_in_node(node, innode.DISK_LAYER, *self._disk_args(node), "control", tier,
                                            json.dumps(fault), timeout=30))

    @primitive(via=("_run_in_node", "_disk_tiers_in_node"))
    def heal_disk(self, node: str, tier: str) -> dict | None:
        """Clear the layer's fault, verified (the layer acknowledges none active); what it injected meanwhile."""
        return self.fault_disk(node, tier, {})

    @primitive(via=("_run_in_node", "_disk_tiers_in_node"))
    def disk_stats(self, node: str, tier: str) -> dict:
        """The layer's counts and what it holds unsynced (writeback mode)."""
        import json
        self._disk_tier(node, tier)
        return json.loads(self._run_in_node(node, innode.DISK_LAYER, *self._disk_args(node), "stats", tier, timeout=30))

    @primitive(via="_nvme_in_node")
    def fill_nvme(self, node: str, percent: float = 100.0) -> None:
        if not 0 < percent <= 100:
            raise ClusterError(f"fill_nvme percent={percent}: must be in (0, 100]")
        self._check_node(node)
        guard = [self.fill_guard] if self.fill_guard else []
        self._run_in_node(node, innode.FILL, self._nvme_in_node(node), str(percent), *guard)

    @primitive(via="_nvme_in_node")
    def free_nvme(self, node: str) -> None:
        self._check_node(node)
        self._run_in_node(node, innode.FREE, self._nvme_in_node(node))

    @primitive(via="_service_action")
    def kill_service(self, service: str) -> None: self._service_action(service, "kill")   # 'etcd' | 's3' | 'proxy'
    @primitive(via="_service_action")
    def start_service(self, service: str) -> None: self._service_action(service, "start")
    @primitive(via="_service_action")
    def pause_service(self, service: str) -> None: self._service_action(service, "pause")
    @primitive(via="_service_action")
    def unpause_service(self, service: str) -> None: self._service_action(service, "unpause")


NETEM_FIELDS = ("delay_ms", "jitter_ms", "duplicate_pct", "corrupt_pct", "reorder_pct")


def netem_args(spec: dict) -> str:
    """netem's arguments for a degrade spec ('' when it asks for none of netem's effects)."""
    delay, jitter = spec.get("delay_ms") or 0, spec.get("jitter_ms") or 0
    out = [f"delay {delay}ms" + (f" {jitter}ms" if jitter else "")] if delay or jitter else []
    out += [f"{word} {spec[k]}%" for k, word in (("duplicate_pct", "duplicate"), ("corrupt_pct", "corrupt"),
                                                 ("reorder_pct", "reorder")) if spec.get(k)]
    return " ".join(out)


# what a link fault does to TCP, from /proc/net/snmp (Tcp:) and /proc/net/netstat (TcpExt:)
TCP_FIGURES = {"OutSegs": "segments_sent", "RetransSegs": "segments_retransmitted",
               "TCPSACKReorder": "reordering_seen_sack", "TCPTSReorder": "reordering_seen_timestamps",
               "TCPDSACKRecv": "spurious_retransmits_dsack", "TCPTimeouts": "retransmit_timeouts",
               "TCPSpuriousRTOs": "spurious_timeouts"}


def tcp_counters(text: str) -> dict:
    """TCP_COUNTERS' output -> {figure: count, 'congestion_control': name}; a counter the kernel lacks is left out."""
    out: dict = {}
    lines = text.splitlines()
    for head, vals in zip(lines, lines[1:]):
        prefix = head.split(":", 1)[0]
        if prefix not in ("Tcp", "TcpExt") or not vals.startswith(prefix + ":") or head == vals:
            continue
        for name, value in zip(head.split()[1:], vals.split()[1:]):
            if name in TCP_FIGURES and value.lstrip("-").isdigit():
                out[TCP_FIGURES[name]] = int(value)
    cc = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("Cc:")), "")
    if cc:
        out["congestion_control"] = cc
    return out


def tcp_during(before: dict | None, after: dict | None) -> dict | None:
    """What changed between two tcp_counters reads (counts that both have), with the congestion control;
    None where either read is missing or a count went down (the node restarted: a fresh namespace)."""
    if not before or not after:
        return None
    out = {k: after[k] - before[k] for k in TCP_FIGURES.values() if isinstance(before.get(k), int)
           and isinstance(after.get(k), int)}
    if any(v < 0 for v in out.values()):
        return None
    if after.get("congestion_control"):
        out["congestion_control"] = after["congestion_control"]
    return out


def fault_primitives() -> tuple[str, ...]:
    """Every fault primitive's name (the methods marked @primitive)."""
    return tuple(n for n, f in vars(Cluster).items() if getattr(f, "fault_primitive", False))


def launcher_status(proc: subprocess.Popen | None) -> str | None:
    """node_status of a node run by a launcher process here: 'absent', 'exited:<code>', or None while it runs."""
    if proc is None:
        return "absent"
    code = proc.poll()
    return None if code is None else f"exited:{code}"


def completed(argv: list[str], proc: subprocess.CompletedProcess, where: str) -> str:
    """stdout of a finished in-node command, or ClusterError with its stderr."""
    if proc.returncode != 0:
        raise ClusterError(f"{where}: {' '.join(argv[:2])[:80]} ... failed ({proc.returncode}): "
                           f"{(proc.stderr or '').strip()[-500:]}")
    return proc.stdout
