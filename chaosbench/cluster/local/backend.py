"""The same cluster as local processes: etcd, the fault proxy and S3 as subprocesses
(host_services.py), each node a torchrun agent in its own session with its own directories.

Faults that need root or network namespaces (partitions, disconnects) raise UnsupportedFault; NVMe
fill is supported only where a loop disk can be mounted (root), since filling an unbounded
directory would fill the host's disk instead.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from chaosbench.cluster import jobenv, loopfs, proctree
from chaosbench.cluster import owner as owner_mod
from chaosbench.cluster.base import Cluster, ClusterSpec
from chaosbench.cluster.errors import ClusterError, UnsupportedFault
from chaosbench.cluster.primitives.disks import DISK_LAYER_PRIMITIVES
from chaosbench.cluster.proctree import completed, launcher_status
from chaosbench.cluster.clean import SHM_ROOT, clock_leftovers, note_clock_root, sweep_local
from chaosbench.cluster.host_services import REPO, HostServices
from chaosbench.cluster.node.scripts import Script
from chaosbench.cluster.launch import hosts_store, node_plan, validate
from chaosbench.services.ports import free_ports

__all__ = ["CLUSTER_ENV", "SHM_ROOT", "LocalCluster", "sweep"]

CLUSTER_ENV = "CHAOSBENCH_CLUSTER"
_NETWORK_REASON = ("needs network namespaces/iptables (root) to cut one local process off; "
                   "use the docker backend")


def _no_fuse() -> str | None:
    """Why the disk layer cannot be mounted over a local node's directories here (None: it can)."""
    import importlib.util
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        return "needs root, /dev/fuse and fusermount3 on this host (a FUSE mount over the node's directory)"
    if importlib.util.find_spec("mfusepy") is None:
        return "needs mfusepy in the harness's python"
    return None


class LocalCluster(Cluster):
    backend = "local"
    unsupported_why = {"partition": _NETWORK_REASON, "disconnect": _NETWORK_REASON,
                       "heal_network": _NETWORK_REASON, **dict.fromkeys(("degrade_link", "netem_link", "restore_link"),
                       "every local node shares the host's network: a loss rule or qdisc meant for one node's "
                       "link would hit every node and the services; use the docker backend"),
                       **dict.fromkeys(("squeeze_memory", "release_memory"),
                       "no memory cgroup of ours: a balloon would squeeze the whole host, whose OOM killer may "
                       "pick anything; use the docker backend"),
                       **dict.fromkeys(DISK_LAYER_PRIMITIVES, _no_fuse() or "")}

    @classmethod
    def withheld(cls) -> frozenset[str]:
        why = loopfs.supported()   # no size-limited disk: filling would fill the host's disk
        return (frozenset({"fill_nvme", "free_nvme"}) if why is not None else frozenset()) | \
            (DISK_LAYER_PRIMITIVES if _no_fuse() else frozenset())

    def __init__(self, spec: ClusterSpec):
        validate(spec)
        super().__init__(spec)
        self._procs: dict[str, subprocess.Popen] = {}
        self._nvme: dict[str, Path] = {}
        self._loop = loopfs.supported() is None
        self.services: HostServices | None = None
        self._c10d_port: int | None = None
        self._started = False
        self._clock_roots: list[int] = []
        self._jobenv: Path | None = None   # the job's packages' prefix (cluster/jobenv), when it has any

    # -- lifecycle -------------------------------------------------------------------------
    def _sweep_dead(self) -> None:
        sweep()

    def _start(self) -> None:
        # Inherited by everything we start (etcd included), so a later sweep can reap our orphans.
        os.environ[owner_mod.OWNER_ENV] = owner_mod.token()
        # the job's own packages, installed (or found) before anything starts
        self._jobenv = jobenv.local_prefix(self.spec.requirements, self.spec.requirements_origin) \
            if self.spec.requirements else None
        self.job_packages = jobenv.packages(self._jobenv) if self._jobenv else None
        for d in ("events", "logs", "nodes"):
            (self.run_dir / d).mkdir(parents=True, exist_ok=True)
        shm = self._shm_root()
        shm.mkdir(parents=True, exist_ok=True)
        (shm / "owner").write_text(owner_mod.token())
        self.services = HostServices("127.0.0.1", self.run_dir / "nodes" / "etcd-data", self.run_dir / "logs",
                                     f"etcd-{self.project}")
        self.services.start()
        if self.spec.launcher == "torchft":   # the replica groups' quorum (services/lighthouse.py)
            self.services.start_lighthouse(jobenv.job_env(os.environ, self._jobenv) if self._jobenv else None)
        self._c10d_port = free_ports(1)[0]
        for node in self._nodes:
            self._make_dirs(node)

    def _make_dirs(self, node: str) -> None:
        if self._loop:
            self._nvme[node] = loopfs.create(self.project, node, self.spec.nvme_size_mb)
        else:
            self._nvme[node] = self.run_dir / "nodes" / node / "nvme"
            self._nvme[node].mkdir(parents=True, exist_ok=True)
        self.shm_dir(node).mkdir(parents=True, exist_ok=True)

    def _launch(self, node: str) -> None:
        ports = self.services.ports
        endpoint = (f"127.0.0.1:{self._c10d_port}" if hosts_store(self.spec.rendezvous)
                    else f"127.0.0.1:{ports['proxy_etcd']}")
        if "lighthouse" in ports:   # torchft: no cross-node rendezvous, the Lighthouse keeps the quorum
            endpoint = f"127.0.0.1:{ports['lighthouse']}"
        plan = node_plan(self.spec, node, python=sys.executable, rdzv_endpoint=endpoint,
                         s3_url=f"http://127.0.0.1:{ports['proxy_s3']}",
                         events_dir=str(self.events_dir), nvme_dir=str(self._nvme[node]),
                         memory_dir=str(self.shm_dir(node)),
                         clock_env=self._clock_file(node)[1] if self.spec.fake_clock else None)
        env = {**os.environ, **plan.env, CLUSTER_ENV: self.project}
        if self._jobenv:
            env = jobenv.job_env(env, self._jobenv, path=env.get("PATH", os.defpath))
        argv = self._behind_disk_layer(node, plan.argv)   # the layer carries the node's markers: killed with it
        with open(self.run_dir / "logs" / f"{node}.log", "ab") as out:
            self._procs[node] = subprocess.Popen(argv, env=env, cwd=plan.cwd or REPO, stdout=out,
                                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                 start_new_session=True)
        if self.spec.fake_clock:   # the root of a preloaded tree: libfaketime's /dev/shm files are named by it
            self._clock_roots.append(self._procs[node].pid)
            note_clock_root(self._shm_root(), self._procs[node].pid)   # for a sweep after a SIGKILLed harness

    def _disk_tiers_in_node(self, node: str) -> dict[str, str]:
        tiers = {"nvme": str(self._nvme[node]), "memory": str(self.shm_dir(node))}
        return {t: tiers[t] for t in (self.spec.disk_layers.get(node) or {}).get("tiers", [])}

    def _control_dir(self, node: str) -> Path:
        return self.run_dir / "nodes" / node / "disk-control"

    def _disk_args(self, node: str) -> list[str]:
        return [f"--control-dir={self._control_dir(node)}"]

    def _behind_disk_layer(self, node: str, argv: list[str]) -> list[str]:
        """The node command behind node/disk_layer.py's `start` where spec.disk_layers asks for a layer."""
        layer = self.spec.disk_layers.get(node)
        if not layer:
            return argv
        from chaosbench.cluster.node import disk_layer
        return disk_layer.start_argv(sys.executable, disk_layer.__file__, layer, self._disk_tiers_in_node(node),
                                     argv, control_dir=str(self._control_dir(node)))

    def _disk_mounts_left(self) -> list[str]:
        """Unmount every node's layers (dead once the node's processes are): what is still mounted."""
        from chaosbench.cluster.node import disk_layer
        return disk_layer.unmount([d for n in self._nvme for d in self._disk_tiers_in_node(n).values()])

    def heal_disk(self, node: str, tier: str) -> dict | None:
        """A node not running has no layer to ask: its control file (on this host) is emptied instead."""
        if self.node_status(node) == "running":
            return super().heal_disk(node, tier)
        self._disk_tier(node, tier)
        control = self.run_dir / "nodes" / node / "disk-control" / f"{tier}.json"
        if control.exists():
            control.write_text("{}")
        return None

    def disk_stats(self, node: str, tier: str) -> dict:
        return super().disk_stats(node, tier) if self.node_status(node) == "running" else {}

    def start_training(self) -> None:
        self._started = True
        for node in self._nodes:
            self._launch(node)

    def _incarnation(self, node: str) -> object:
        return self._procs.get(node)

    def _node_markers(self, node: str) -> dict[str, str]:
        return {CLUSTER_ENV: self.project, "CHAOSBENCH_NODE": node}

    def node_status(self, node: str) -> str:
        gone = launcher_status(self._procs.get(node))
        if gone:
            return gone
        try:
            state = Path(f"/proc/{self._procs[node].pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return "absent"
        return "paused" if state == "T" else "running"

    def collect(self) -> None:
        # Logs are written straight into run_dir/logs; record exits here.
        exits = {n: {"status": self.node_status(n),
                     "exit_code": p.returncode} for n, p in self._procs.items()}
        (self.run_dir / "exits.json").write_text(json.dumps(exits, indent=1))

    def attach_hint(self) -> str:
        pids = {n: p.pid for n, p in self._procs.items() if p.poll() is None}
        return (f"nodes {', '.join(f'{n} (pid {pid})' for n, pid in pids.items()) or 'none running'}, "
                f"services pids {self.services.alive() if self.services else []}; events in {self.events_dir}, "
                f"node dirs in {self.run_dir / 'nodes'} and {SHM_ROOT / ('chaosbench-' + self.project)}; "
                f"proxy API {self.proxy_api}; remove it with `chaosbench clean` once this harness has exited")

    def _stop(self) -> list[str]:
        for node in list(self._procs):
            proctree.kill_all(self._node_markers(node))
        proctree.kill_all({CLUSTER_ENV: self.project})
        for proc in self._procs.values():
            _reap(proc)
        if self.services is not None:
            self.services.stop()
        layers = self._disk_mounts_left()   # before the loop disks they sit on
        loopfs.remove_project(self.project)
        clock_leftovers(self._shm_root())   # libfaketime's files of the node trees killed above
        shutil.rmtree(self._shm_root(), ignore_errors=True)
        left = [p for p in proctree.find({CLUSTER_ENV: self.project}) if not proctree.zombie(p)]
        left += self.services.alive() if self.services is not None else []
        return ([f"processes {left}"] if left else []) + \
            (["mounted NVMe disks"] if loopfs.mounted(self.project) else []) + \
            ([f"disk layer mounts {layers}"] if layers else [])

    # -- hooks -----------------------------------------------------------------------------
    def _run_in_node(self, node: str, script: Script, *args: str, timeout: float = 120) -> str:
        argv = script.argv(sys.executable, *args)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise ClusterError(f"{node}: {script.name} did not finish within {timeout:g} s") from exc
        return completed(argv, proc, node)

    def _start_in_node(self, node: str, script: Script, *args: str) -> subprocess.Popen:
        with open(self.run_dir / "logs" / f"{node}-{script.name}.log", "ab") as log:
            return subprocess.Popen(script.argv(sys.executable, *args), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)

    def _clock_file(self, node: str) -> tuple[Path, dict[str, str]]:
        """Under the run directory; only the processes this harness starts for the node carry the preload."""
        from chaosbench.cluster.node.clock import node_clock
        self._check_node(node)
        return node_clock(self.run_dir, node, None, str(REPO))

    def _service_action(self, service: str, action: str) -> None:
        self.services.action(service, action)

    def _nvme_in_node(self, node: str) -> str:
        if not self._loop:
            raise UnsupportedFault(f"backend 'local' cannot fill NVMe here: no size-limited disk "
                                   f"({loopfs.supported()})")
        return str(self._nvme[node])

    # -- faults ----------------------------------------------------------------------------
    def kill_node(self, node: str) -> None:
        self._check_node(node)
        proctree.kill_all(self._node_markers(node))
        if node in self._procs:
            _reap(self._procs[node])

    def stop_node(self, node: str) -> None:
        self._check_node(node)
        proc = self._procs.get(node)
        if proc and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)   # torchrun forwards it to its workers
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        self.kill_node(node)   # whatever outlived the graceful stop

    def start_node(self, node: str) -> None:
        self._check_node(node)
        if self.node_status(node) in ("running", "paused"):
            raise ClusterError(f"start_node({node}): it is still {self.node_status(node)}")
        self._launch(node)

    def pause_node(self, node: str) -> None:
        self._check_node(node)
        proctree.signal_all(proctree.find(self._node_markers(node)), signal.SIGSTOP)

    def unpause_node(self, node: str) -> None:
        self._check_node(node)
        proctree.signal_all(proctree.find(self._node_markers(node)), signal.SIGCONT)

    def nvme_dir(self, node: str) -> Path:
        self._check_node(node)
        return self._nvme[node]

    def _shm_root(self) -> Path:
        """The cluster's dir in /dev/shm: its nodes' memory tiers, its owner file, its clock roots."""
        return SHM_ROOT / f"chaosbench-{self.project}"

    def shm_dir(self, node: str) -> Path:
        return self._shm_root() / node

    def wipe_node_storage(self, node: str, nvme: bool = True, shm: bool = True) -> None:
        self._check_node(node)
        for d, on in ((self._nvme[node], nvme), (self.shm_dir(node), shm)):
            if on and d.exists():
                for p in d.iterdir():
                    shutil.rmtree(p) if p.is_dir() else p.unlink()

    def add_node(self) -> str:
        self._check_room_for_node()
        node = f"node-{len(self._nodes)}"
        self._nodes.append(node)
        self._make_dirs(node)
        if self._started:
            self._launch(node)
        return node


def _reap(proc: subprocess.Popen) -> None:
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def sweep() -> list[int]:
    """What dead harnesses left here: their processes (they carry CHAOSBENCH_OWNER), shm dirs and loop disks."""
    dead = sweep_local()
    loopfs.sweep()
    return dead
