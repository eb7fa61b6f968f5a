"""`--backend slurm`: one allocation of the scenario's nodes, one `srun` step per node.

The harness runs on a login node (or reaches one through $CHAOSBENCH_SLURM_LOGIN). etcd, the fault
proxy and S3 run beside the harness, bound to $CHAOSBENCH_SLURM_SERVICE_HOST (an address the nodes
reach). Events come back live through a shared filesystem ($CHAOSBENCH_SLURM_SHARED: the same path
on the harness and on every node, like a site's NFS/Lustre) or, without one, streamed through an
`srun` step per host (event_pump.py); each step's output is the srun client's output, written into
run_dir/logs. The run's directories on a compute host (/dev/shm and scratch `chaosbench-<project>`)
are created private before any step uses them, a directory of that name someone else made first is
refused, and teardown removes them (node_dirs.py). Faults use Slurm's own means: `scancel --signal` of a node's step
(signals its whole process tree), and `srun --overlap` steps for the in-node commands (node/scripts.py:
workers, iptables, disk fills). The allocation's own lifecycle is in allocation.py.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from chaosbench.cluster.node import scripts
from chaosbench.cluster import owner as owner_mod
from chaosbench.cluster.base import Cluster, ClusterSpec
from chaosbench.cluster.errors import ClusterError, UnsupportedFault
from chaosbench.cluster.proctree import launcher_status
from chaosbench.cluster.host_services import HostServices
from chaosbench.cluster.node.scripts import Script
from chaosbench.cluster.launch import hosts_store, node_plan, validate
from chaosbench.cluster.slurm import allocation
from chaosbench.cluster.slurm.allocation import sweep  # noqa: F401  (chaosbench clean, tests)
from chaosbench.cluster.slurm import requirements
from chaosbench.cluster.slurm.commands import (Allocation, Slurm, private_argv, roots, run_root, setting, srun_argv,
                                               step_argv)
from chaosbench.cluster.slurm.event_pump import EventPump
from chaosbench.cluster.slurm.services import MODES, NodeServices

C10D_PORT = 29400
# Permission each network fault needs on the nodes; a site that forbids it sets
# $CHAOSBENCH_SLURM_FORBID (comma list of fault primitives) and the run is refused up front.
NETWORK_FAULTS = ("partition", "disconnect", "heal_network")
FORBID_ENV = "CHAOSBENCH_SLURM_FORBID"
PERMISSIONS = {"partition": "root + CAP_NET_ADMIN in the job's steps (iptables)",
               "disconnect": "root + CAP_NET_ADMIN in the job's steps (iptables)",
               "heal_network": "root + CAP_NET_ADMIN in the job's steps (iptables)",
               "fill_nvme": "a size-limited node-local scratch filesystem",
               "free_nvme": "a size-limited node-local scratch filesystem"}
SERVICE_NAMES = ("etcd", "s3", "proxy", "toxiproxy")


_env = setting


def forbidden() -> frozenset[str]:
    """The primitives the site forbids ($CHAOSBENCH_SLURM_FORBID)."""
    return frozenset(f.strip() for f in (_env("FORBID") or "").split(",") if f.strip())


def supported() -> frozenset[str]:
    return SlurmCluster.implemented_faults() - forbidden()


class SlurmCluster(Cluster):
    backend = "slurm"

    @classmethod
    def withheld(cls) -> frozenset[str]:
        return forbidden()

    def __init__(self, spec: ClusterSpec, partition: str | None = None, account: str | None = None,
                 time_limit: str | None = None, gpus_per_node: int | None = None,
                 sbatch_options: list[str] | None = None, services: str | None = None):
        validate(spec)
        super().__init__(spec)
        self.slurm = Slurm()
        shared = _env("SHARED")   # unset: events are streamed back through srun (slurm/event_pump.py)
        self.shared = Path(shared) / self.project if shared else None
        self.python = _env("PYTHON", "python3")
        self.srcdir = _env("SRCDIR", str(Path(__file__).resolve().parents[3]))
        self.scratch = _env("SCRATCH", "/tmp")            # node-local disk, the NVMe tier
        self.fill_guard = self.scratch                    # filling a scratch on the root fs fills the node
        self.scratch_view = _env("SCRATCH_VIEW")          # '{host}' -> that node's scratch seen from here
        self.service_host = _env("SERVICE_HOST", "127.0.0.1")
        self.services_mode = services or _env("SERVICES", "harness")
        if self.services_mode not in MODES:
            raise ClusterError(f"slurm services={self.services_mode!r}: choose one of {', '.join(MODES)} "
                               f"(cluster.slurm.services, --slurm-services or $CHAOSBENCH_SLURM_SERVICES)")
        self.alloc = Allocation(
            nodes=max(spec.nodes, spec.max_nodes) + spec.spare_nodes + (self.services_mode == "node"),
            job_name=f"chaosbench-{self.project}", partition=partition or _env("PARTITION"),
            account=account or _env("ACCOUNT"), time=time_limit or _env("TIME"), gpus_per_node=gpus_per_node,
            extra=[*(sbatch_options or []), *(_env("SBATCH_OPTIONS") or "").split()])
        self.job_id: str | None = None
        self.hosts: list[str] = []
        self._host_of: dict[str, str] = {}
        self._procs: dict[str, subprocess.Popen] = {}
        self._paused: set[str] = set()
        self._cut_nodes: set[str] = set()    # partitioned/disconnected: healed before the job ends
        self.steps: dict[str, list[str]] = {}               # node -> its step ids, oldest first
        self.services: HostServices | NodeServices | None = None
        self._pump: EventPump | None = None

    # -- optional features -----------------------------------------------------------------
    def refusal_hint(self) -> str:
        """Why a fault is missing here: the permission the site withholds (said before allocating)."""
        gone = sorted(self.implemented_faults() - self.supported_faults)
        return "".join(f"; {f} is forbidden at this site (${FORBID_ENV}); it needs {PERMISSIONS.get(f, 'a permission')}"
                       for f in gone)

    def probe_faults(self, needs: set[str]) -> list[str]:
        """What the site withholds after all: the network faults need iptables in the job's steps.
        Tried on the first node of the allocation (read-only: list the filter table) before training."""
        want = sorted(set(needs) & set(NETWORK_FAULTS) & self.supported_faults)
        if not want:
            return []
        try:
            self.slurm.run(*step_argv(self.job_id, self._node_hosts()[0], "chaosbench-probe"),
                           "iptables", "-w", "5", "-n", "-L", "OUTPUT", timeout=120)
        except ClusterError as exc:
            return [f"{f} needs {PERMISSIONS[f]}, which a probe on {self._node_hosts()[0]} did not find "
                    f"({str(exc)[-200:]}); declare it in ${FORBID_ENV} to refuse before allocating" for f in want]
        return []

    def record(self) -> dict:
        """Slurm ids for the run record (harness.json): the job, each node's host and steps, services."""
        where = getattr(self.services, "node_host", None) or self.service_host
        return {"job_id": self.job_id, "hosts": dict(self._host_of), "steps": dict(self.steps),
                "services": {"mode": self.services_mode, "host": where}}

    def attach_hint(self) -> str:
        return (f"Slurm job {self.job_id} on {', '.join(self.hosts) or 'no hosts yet'} (steps {self.steps}); "
                f"events in {self.events_dir}; proxy API {self.proxy_api}; remove it with "
                f"`scancel {self.job_id}`, then `chaosbench clean` for the services beside the harness")

    # -- lifecycle -------------------------------------------------------------------------
    def _sweep_dead(self) -> None:
        allocation.sweep(self.slurm)

    def _start(self) -> None:
        # inherited by what we start here (services, srun clients): a later sweep reaps them after a SIGKILL
        os.environ[owner_mod.OWNER_ENV] = owner_mod.token()
        for d in ("events", "logs", "nodes"):
            (self.run_dir / d).mkdir(parents=True, exist_ok=True)
        if self.shared is not None:   # nodes write events there: private like their own directories
            self._make_shared()
        else:
            self.events_dir.mkdir(parents=True, exist_ok=True)
        if self.services_mode == "harness":
            self.services = HostServices(self.service_host, self.run_dir / "nodes" / "etcd-data",
                                         self.run_dir / "logs", f"etcd-{self.project}")
            self.services.start()
        self.alloc.comment = owner_mod.token()
        self.job_id = allocation.submit(self.slurm, self.alloc)
        self._record()
        self.hosts = allocation.wait_running(self.slurm, self.job_id)
        if self.spec.requirements:   # before any node starts: the site's python must have the job's packages
            self.job_packages = requirements.check(self.slurm, self.job_id, self._node_hosts()[0], self.python,
                                                   self.spec.requirements, self.spec.requirements_origin, self.srcdir)
        if self.services_mode == "node":   # the first host holds the services; nodes get the rest
            self.services = NodeServices(self.slurm, self.job_id, self.hosts[0], self.python, self.srcdir,
                                         f"{self.scratch}/{run_root(self.project)}/services",
                                         self.run_dir / "logs" / "services.log",
                                         self._private([(self.scratch, f"{run_root(self.project)}/services")]))
            self.services.start()
        for node, host in zip(self._nodes, self._node_hosts()):
            self._host_of[node] = host
        self._record()
        if self.shared is None:
            self._pump = EventPump(self.slurm, self.job_id, self.python, self.srcdir, self.node_events_dir,
                                   self.events_dir, self._private([self._events_pair()]))
            for host in self._node_hosts():
                self._pump.follow(host)

    def _node_hosts(self) -> list[str]:
        """Hosts that run training nodes (with services on a node, the first host is theirs)."""
        return self.hosts[1:] if self.services_mode == "node" else list(self.hosts)

    def _record(self) -> None:
        (self.run_dir / "slurm.json").write_text(json.dumps(self.record(), indent=1))

    def _node_pairs(self, node: str) -> list[tuple[str, str]]:
        """(base, path below it) of the node's NVMe and memory tiers: the site's base is not ours to judge."""
        top = run_root(self.project)
        return [(self.scratch, f"{top}/{node}/nvme"), ("/dev/shm", f"{top}/{node}")]

    def _node_dirs(self, node: str) -> tuple[str, str]:
        (nvme_base, nvme), (shm_base, shm) = self._node_pairs(node)
        return f"{nvme_base}/{nvme}", f"{shm_base}/{shm}"

    def _events_pair(self) -> tuple[str, str]:
        if self.shared is not None:
            return str(self.shared.parent), f"{self.shared.name}/events"
        return self.scratch, f"{run_root(self.project)}/events"

    def _private(self, dirs: list[tuple[str, str]], command: tuple[str, ...] = ()) -> list[str]:
        """The argv prefix (or, with `command`, the argv) that runs a step's command only once `dirs` are
        directories of ours that no one else can reach (node_dirs.py)."""
        return private_argv(self.python, dirs, list(command))

    def _make_shared(self) -> None:
        from chaosbench.cluster.slurm.node_dirs import make
        base, rel = self._events_pair()
        Path(base).mkdir(parents=True, exist_ok=True)
        try:
            make(base, rel)
        except PermissionError as exc:
            raise ClusterError(f"{exc} (CHAOSBENCH_SLURM_SHARED)") from None

    def _launch(self, node: str, wait: bool = True) -> None:
        host = self._host_of[node]
        endpoint = (f"{self._host_of['node-0']}:{C10D_PORT}" if hosts_store(self.spec.rendezvous)
                    else f"{self.services.host}:{self.services.ports['proxy_etcd']}")
        nvme, memory = self._node_dirs(node)
        plan = node_plan(self.spec, node, python=self.python, rdzv_endpoint=endpoint,
                         s3_url=f"http://{self.services.host}:{self.services.ports['proxy_s3']}",
                         events_dir=self.node_events_dir, nvme_dir=nvme, memory_dir=memory)
        # the shared events dir is the harness's to make private (_make_shared): a node whose steps run as
        # another uid (a test cluster's root) could not pass the check on it, and need not
        local = [self._events_pair()] if self.shared is None else []
        argv = self._private([*self._node_pairs(node), *local], tuple(plan.argv))
        cwd = plan.cwd or self.srcdir
        with open(self.run_dir / "logs" / f"{node}.log", "ab") as log:
            self._procs[node] = self.slurm.popen(srun_argv(self.job_id, host, node, requirements.with_prefix(plan.env),
                                                           argv, cwd), log)
        self._paused.discard(node)
        if wait:
            self._await_step(node)

    def _await_step(self, node: str) -> None:
        step = allocation.await_step(self.slurm, self.job_id, node, self.steps.get(node, []), self._procs[node],
                                     self.run_dir / "logs" / f"{node}.log")
        self.steps.setdefault(node, []).append(step)
        self._record()

    def start_training(self) -> None:
        self._launch_all(self._nodes)

    def start_nodes(self, nodes: list[str]) -> None:
        for node in nodes:
            self._step(node)
            if self.node_status(node) in ("running", "paused"):
                raise ClusterError(f"start_node({node}): it is still {self.node_status(node)}")
        self._launch_all(nodes)

    def _launch_all(self, nodes: list[str]) -> None:
        """Every srun first, then wait for their steps: one at a time, each step's start (~1 s through
        slurmctld) delayed the last node past the first rendezvous's last call, and it trained alone
        in the next round's waiting list instead of in the world."""
        for node in nodes:
            self._launch(node, wait=False)
        for node in nodes:
            self._await_step(node)

    def node_status(self, node: str) -> str:
        gone = launcher_status(self._procs.get(node))
        return gone or ("paused" if node in self._paused else "running")

    @property
    def events_dir(self) -> Path:
        """Where events appear on this host: the shared filesystem, or what the pump streams here."""
        return self.shared / "events" if self.shared else self.run_dir / "events"

    @property
    def node_events_dir(self) -> str:
        """Where the nodes write them: the shared path, or node-local scratch."""
        return str(self.events_dir) if self.shared else f"{self.scratch}/chaosbench-{self.project}/events"

    def collect(self) -> None:
        if self._pump is not None:   # the nodes' copy is the whole story: rewrite from it
            unread = self._pump.sync(sorted(set(self._host_of.values())))
            if unread:
                print(f"chaosbench: events of host(s) {', '.join(unread)} could not be read back; "
                      "the run's events are what was streamed live", file=sys.stderr)
        exits = {n: {"status": self.node_status(n), "exit_code": p.returncode, "host": self._host_of.get(n),
                     "steps": self.steps.get(n, [])} for n, p in self._procs.items()}
        (self.run_dir / "exits.json").write_text(json.dumps(exits, indent=1))

    def _stop(self) -> list[str]:
        """Cancel the job, stop the srun clients and services; what is left: the job still in squeue,
        live processes of ours, iptables rules or the run's directories on a host."""
        job_left = False
        cut = self._heal_leftover_cuts() if self.job_id else []   # needs the job: srun steps
        dirs_left = self._remove_node_dirs() if self.job_id and self.hosts else None
        if self.job_id:
            job_left = not allocation.cancel(self.slurm, self.job_id)
        if self._pump is not None:
            self._pump.stop()
        for proc in self._procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)   # the srun client, once its job is gone
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.services is not None:
            self.services.stop()
        if self.shared is not None:
            shutil.rmtree(self.shared, ignore_errors=True)   # the runner copied the events out already
        left = [p.pid for p in self._procs.values() if p.poll() is None]
        left += [p.pid for p in (self._pump.procs.values() if self._pump else []) if p.poll() is None]
        left += self.services.alive() if self.services is not None else []
        return (([f"Slurm job {self.job_id} still in squeue"] if job_left else [])
                + ([f"processes {left} alive"] if left else [])
                + ([f"iptables rules on {', '.join(self._host_of.get(n, n) for n in cut)}"] if cut else [])
                + ([dirs_left] if dirs_left else []))

    def _remove_node_dirs(self) -> str | None:
        """Before the allocation goes (a host outlives it): end the run's steps, then remove its
        directories on every host. None, or what is left."""
        gone, why = allocation.remove_node_dirs(self.slurm, self.job_id, ",".join(self.hosts), len(self.hosts),
                                                self.project, self.scratch, self.python)
        if why is None:
            return None
        where = ", ".join(f"{b}/{r}" for b, r in roots(self.project, self.scratch))
        return f"the run's directories ({where}) on {', '.join(self.hosts)}: {why}"

    # -- hooks -----------------------------------------------------------------------------
    def _step(self, node: str) -> str:
        self._check_node(node)
        if not self.steps.get(node):
            raise ClusterError(f"{node} has no Slurm step")
        return self.steps[node][-1]

    def _run_in_node(self, node: str, script: Script, *args: str, timeout: float = 120) -> str:
        """A short extra step on the node's host, beside its training step."""
        self._step(node)
        return self.slurm.run(*step_argv(self.job_id, self._host_of[node], "chaosbench-fault"),
                              *script.argv(self.python, *args), timeout=timeout)

    def _incarnation(self, node: str) -> object:
        return self._procs.get(node)

    def _start_in_node(self, node: str, script: Script, *args: str) -> subprocess.Popen:
        """A long extra step on the node's host (ends with the job at the latest)."""
        self._step(node)
        with open(self.run_dir / "logs" / f"{node}-{script.name}.log", "ab") as log:
            return self.slurm.popen([*step_argv(self.job_id, self._host_of[node], f"chaosbench-{script.name}"),
                                     *script.argv(self.python, *args)], log)

    def _service_action(self, service: str, action: str) -> None:
        self.services.action(service, action)

    def _nvme_in_node(self, node: str) -> str:
        return self._node_dirs(node)[0]

    def _cut_targets(self, node: str, peers: list[str] | None) -> list[str]:
        names = peers if peers is not None else [n for n in self._nodes if n != node]
        hosts = [self._host_of.get(p, p) for p in names if p not in SERVICE_NAMES]
        if peers is None or any(p in SERVICE_NAMES for p in peers):
            hosts.append(self.services.host)
        self._cut_nodes.add(node)   # before the step: a rule may land even if srun then fails
        return hosts

    # -- faults ----------------------------------------------------------------------------
    def _signal(self, node: str, sig: str) -> None:
        self.slurm.run("scancel", f"--signal={sig}", self._step(node))

    def kill_node(self, node: str) -> None:
        if self.node_status(node) == "paused":
            self._signal(node, "CONT")
        self._signal(node, "KILL")   # slurmstepd signals every process of the step: workers too
        try:
            self._procs[node].wait(timeout=30)
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(f"kill_node({node}): step {self._step(node)} still running 30 s after SIGKILL") from exc
        self._lose_memory(node)

    def _lose_memory(self, node: str) -> None:
        """A dead node's RAM is gone: its shared-memory snapshots must not survive into its restart
        (docker recreates a container's /dev/shm on start; here the host stays up)."""
        self._run_in_node(node, scripts.REMOVE, self._node_dirs(node)[1])

    def stop_node(self, node: str) -> None:
        self._signal(node, "TERM")   # torchrun forwards it to its workers
        try:
            self._procs[node].wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill_node(node)
            return
        self._lose_memory(node)

    def start_node(self, node: str) -> None:
        self.start_nodes([node])

    def pause_node(self, node: str) -> None:
        self._signal(node, "STOP")
        self._paused.add(node)

    def unpause_node(self, node: str) -> None:
        self._signal(node, "CONT")
        self._paused.discard(node)

    def disconnect(self, node: str) -> None:
        """Loud: iptables REJECT (TCP reset, ICMP unreachable) towards peers and services, so every
        connection fails at once, as a pulled cable on a NIC with link detection does. A node's NIC
        itself cannot be taken down from a job step without losing the node."""
        self._check_node(node)
        self._run_in_node(node, scripts.cut(scripts.REJECT), *self._cut_targets(node, None))

    def heal_network(self, node: str) -> None:
        """Remove our chain from the host entirely: unlike a container, a Slurm node outlives the run."""
        super().heal_network(node)
        self._cut_nodes.discard(node)

    def _heal_leftover_cuts(self) -> list[str]:
        """Before the allocation goes: heal every node a partition/disconnect left cut (a fault that
        was never healed, a run stopped early). Returns the nodes that could not be healed."""
        left = []
        for node in sorted(self._cut_nodes):
            try:
                self.heal_network(node)
            except ClusterError as exc:
                print(f"chaosbench: iptables rules on {self._host_of.get(node)} ({node}) not removed: {exc}",
                      file=sys.stderr)
                left.append(node)
        return left

    def wipe_node_storage(self, node: str, nvme: bool = True, shm: bool = True) -> None:
        dirs = [d for d, on in zip(self._node_dirs(node), (nvme, shm)) if on]
        if dirs:
            self._run_in_node(node, scripts.EMPTY, *dirs)

    def nvme_dir(self, node: str) -> Path:
        self._step(node)
        if not self.scratch_view:
            raise UnsupportedFault("node-local scratch is not visible from the harness "
                                   "(set CHAOSBENCH_SLURM_SCRATCH_VIEW)")
        nvme = self._node_dirs(node)[0]
        return Path(self.scratch_view.format(host=self._host_of[node])) / Path(nvme).relative_to(self.scratch)

    def add_node(self) -> str:
        self._check_room_for_node()
        busy = {self._host_of[n] for n in self._nodes if not self.node_status(n).startswith("exited")}
        free = [h for h in self._node_hosts() if h not in busy]
        if not free:
            raise ClusterError(f"add_node: every host of Slurm job {self.job_id} runs a node; "
                               f"raise cluster spare_nodes so the allocation has a spare")
        node = f"node-{len(self._nodes)}"
        self._nodes.append(node)
        self._host_of[node] = free[0]
        if self._pump is not None:
            self._pump.follow(free[0])
        self._launch(node)
        return node
