"""The same cluster as local processes: etcd, the fault proxy and S3 as subprocesses, each node a
torchrun agent in its own session with its own directories.

Faults that need root or network namespaces (partitions, disconnects) raise UnsupportedFault; NVMe
fill is supported only where a loop disk can be mounted (root), since filling an unbounded
directory would fill the host's disk instead.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from chaosbench.cluster import loopfs, proctree
from chaosbench.cluster import owner as owner_mod
from chaosbench.cluster.base import FILL_FILE, Cluster, ClusterError, ClusterSpec, UnsupportedFault
from chaosbench.cluster.launch import S3_BUCKET, hosts_store, node_plan, validate
from chaosbench.cluster.lifecycle import track, untrack
from chaosbench.cluster.services_api import (create_routes, etcd_ready, proxy_ready, s3_ready,
                                             wait_until)
from chaosbench.services.etcd_server import EtcdServer
from chaosbench.services.ports import free_ports

REPO = Path(__file__).resolve().parents[2]
CLUSTER_ENV = "CHAOSBENCH_CLUSTER"
SHM_ROOT = Path("/dev/shm")
_NETWORK_REASON = ("needs network namespaces/iptables (root) to cut one local process off; "
                   "use the docker backend")


class _Service:
    """A python service subprocess in its own session; restartable on the same port."""

    def __init__(self, name: str, argv: list[str], log: Path):
        self.name, self.argv, self.log = name, argv, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO)

    def signal(self, sig: int) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def python_services(host: str, ports: dict[str, int], logs: Path) -> dict[str, _Service]:
    """The S3 endpoint and the fault proxy as subprocesses on `host` (not started yet)."""
    py = sys.executable
    return {"s3": _Service("s3", [py, "-m", "chaosbench.services.s3", "--host", host, "--port", str(ports["s3"]),
                                  "--bucket", S3_BUCKET], logs / "s3.log"),
            "proxy": _Service("proxy", [py, "-m", "chaosbench.proxy", "--host", host, "--port",
                                        str(ports["proxy"])], logs / "proxy.log")}


class HostServiceFaults:
    """Service faults for backends whose etcd, S3 and proxy are processes on the harness's host (local,
    Slurm): kill/start/pause/unpause them in place, on the same ports. Needs self.etcd, self._services,
    self.proxy_api, self.s3_endpoint and self._create_routes()."""
    SERVICE_FAULTS = frozenset({"kill_service", "start_service", "pause_service", "unpause_service"})

    def _service_action(self, service: str, action: str) -> None:
        if service == "etcd":
            {"kill": self.etcd.kill, "start": self.etcd.start, "pause": self.etcd.pause,
             "unpause": self.etcd.resume}[action]()
            return
        svc = self._services.get("proxy" if service == "toxiproxy" else service)
        if svc is None:
            raise ClusterError(f"unknown service {service!r}; services: etcd, s3, proxy")
        if action == "kill":
            svc.kill()
        elif action == "start":
            svc.start()
            if svc.name == "proxy":   # routes live in the proxy's memory
                wait_until("fault proxy", lambda: proxy_ready(self.proxy_api), 30)
                self._create_routes()
            else:
                wait_until("S3 endpoint", lambda: s3_ready(self.s3_endpoint), 60)
        else:
            svc.signal(signal.SIGSTOP if action == "pause" else signal.SIGCONT)

    def kill_service(self, service: str) -> None: self._service_action(service, "kill")
    def start_service(self, service: str) -> None: self._service_action(service, "start")
    def pause_service(self, service: str) -> None: self._service_action(service, "pause")
    def unpause_service(self, service: str) -> None: self._service_action(service, "unpause")


class LocalCluster(HostServiceFaults, Cluster):
    backend = "local"
    supported_faults = frozenset({
        "kill_node", "stop_node", "start_node", "kill_worker", "pause_node", "unpause_node",
        "wipe_node_storage", "nvme_dir", "shm_dir", "kill_service", "start_service", "pause_service",
        "unpause_service", "add_node"} | ({"fill_nvme", "free_nvme"} if loopfs.supported() is None else set()))

    def __init__(self, spec: ClusterSpec):
        validate(spec)
        super().__init__(spec)
        slug = re.sub(r"[^a-z0-9]+", "", spec.run_id.lower())[:20]
        self.project = f"cb{slug}{uuid.uuid4().hex[:8]}"
        self.run_dir = Path(spec.run_dir).resolve()
        self._nodes = [f"node-{i}" for i in range(spec.nodes)]
        self._procs: dict[str, subprocess.Popen] = {}
        self._nvme: dict[str, Path] = {}
        self._loop = loopfs.supported() is None
        self.etcd: EtcdServer | None = None
        self._services: dict[str, _Service] = {}
        self._ports: dict[str, int] = {}
        self._started = False

    # -- lifecycle -------------------------------------------------------------------------
    def up(self) -> None:
        track(self)
        sweep()
        # Inherited by everything we start (etcd included), so a later sweep can reap our orphans.
        os.environ[owner_mod.OWNER_ENV] = owner_mod.token()
        for d in ("events", "logs", "nodes"):
            (self.run_dir / d).mkdir(parents=True, exist_ok=True)
        shm = SHM_ROOT / f"chaosbench-{self.project}"
        shm.mkdir(parents=True, exist_ok=True)
        (shm / "owner").write_text(owner_mod.token())
        self.etcd = EtcdServer(self.run_dir / "nodes" / "etcd-data", host="127.0.0.1",
                               name=f"etcd-{self.project}")
        self.etcd.start()
        names = ("s3", "proxy", "proxy_etcd", "proxy_s3", "c10d")
        self._ports.update(zip(names, free_ports(len(names))))
        self._services = python_services("127.0.0.1", self._ports, self.run_dir / "logs")
        for svc in self._services.values():
            svc.start()
        hint = f"; see {self.run_dir / 'logs'}"
        wait_until("S3 endpoint", lambda: s3_ready(self.s3_endpoint), 60, hint)
        wait_until("fault proxy", lambda: proxy_ready(self.proxy_api), 30, hint)
        self._create_routes()
        wait_until("etcd through the proxy",
                   lambda: etcd_ready(f"http://127.0.0.1:{self._ports['proxy_etcd']}"), 30, hint)
        for node in self._nodes:
            self._make_dirs(node)

    def _create_routes(self) -> None:
        create_routes(self.proxy_api, {
            "etcd": (f"127.0.0.1:{self._ports['proxy_etcd']}", self.etcd.endpoint),
            "s3": (f"127.0.0.1:{self._ports['proxy_s3']}", f"127.0.0.1:{self._ports['s3']}")})

    def _make_dirs(self, node: str) -> None:
        if self._loop:
            self._nvme[node] = loopfs.create(self.project, node, self.spec.nvme_size_mb)
        else:
            self._nvme[node] = self.run_dir / "nodes" / node / "nvme"
            self._nvme[node].mkdir(parents=True, exist_ok=True)
        self.shm_dir(node).mkdir(parents=True, exist_ok=True)

    def _launch(self, node: str) -> None:
        endpoint = (f"127.0.0.1:{self._ports['c10d']}" if hosts_store(self.spec.rendezvous)
                    else f"127.0.0.1:{self._ports['proxy_etcd']}")
        plan = node_plan(self.spec, node, python=sys.executable, rdzv_endpoint=endpoint,
                         s3_url=f"http://127.0.0.1:{self._ports['proxy_s3']}",
                         events_dir=str(self.events_dir), nvme_dir=str(self._nvme[node]),
                         memory_dir=str(self.shm_dir(node)))
        env = {**os.environ, **plan.env, CLUSTER_ENV: self.project}
        with open(self.run_dir / "logs" / f"{node}.log", "ab") as out:
            self._procs[node] = subprocess.Popen(plan.argv, env=env, cwd=plan.cwd or REPO, stdout=out,
                                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                 start_new_session=True)

    def start_training(self) -> None:
        self._started = True
        for node in self._nodes:
            self._launch(node)

    def node_names(self) -> list[str]:
        return list(self._nodes)

    def _markers(self, node: str) -> dict[str, str]:
        return {CLUSTER_ENV: self.project, "CHAOSBENCH_NODE": node}

    def node_status(self, node: str) -> str:
        proc = self._procs.get(node)
        if proc is None:
            return "absent"
        code = proc.poll()
        if code is not None:
            return f"exited:{code}"
        try:
            state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return "absent"
        return "paused" if state == "T" else "running"

    @property
    def events_dir(self) -> Path:
        return self.run_dir / "events"

    @property
    def proxy_api(self) -> str:
        return f"http://127.0.0.1:{self._ports['proxy']}"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self._ports['s3']}"

    def collect(self) -> None:
        # Logs are written straight into run_dir/logs; record exits here.
        exits = {n: {"status": self.node_status(n),
                     "exit_code": p.returncode} for n, p in self._procs.items()}
        (self.run_dir / "exits.json").write_text(json.dumps(exits, indent=1))

    def down(self) -> None:
        for node in list(self._procs):
            proctree.kill_all(self._markers(node))
        proctree.kill_all({CLUSTER_ENV: self.project})
        for proc in self._procs.values():
            _reap(proc)
        for svc in self._services.values():
            svc.stop()
        if self.etcd is not None:
            self.etcd.stop()
        loopfs.remove_project(self.project)
        shutil.rmtree(SHM_ROOT / f"chaosbench-{self.project}", ignore_errors=True)
        left = [p for p in proctree.find({CLUSTER_ENV: self.project}) if not proctree.zombie(p)]
        left += [svc.proc.pid for svc in self._services.values() if svc.proc and svc.proc.poll() is None]
        if left or loopfs.mounted(self.project):   # stay tracked: the exit-time sweep retries
            raise ClusterError(f"teardown of {self.project} left processes {left}"
                               + (" and mounted NVMe disks" if loopfs.mounted(self.project) else ""))
        self.torn_down = True
        untrack(self)

    # -- faults ----------------------------------------------------------------------------
    def _check(self, node: str) -> None:
        if node not in self._nodes:
            raise ClusterError(f"unknown node {node!r}; nodes: {', '.join(self._nodes)}")

    def kill_node(self, node: str) -> None:
        self._check(node)
        proctree.kill_all(self._markers(node))
        if node in self._procs:
            _reap(self._procs[node])

    def stop_node(self, node: str) -> None:
        self._check(node)
        proc = self._procs.get(node)
        if proc and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)   # torchrun forwards it to its workers
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        self.kill_node(node)   # whatever outlived the graceful stop

    def start_node(self, node: str) -> None:
        self._check(node)
        if self.node_status(node) in ("running", "paused"):
            raise ClusterError(f"start_node({node}): it is still {self.node_status(node)}")
        self._launch(node)

    def kill_worker(self, node: str, local_rank: int = 0) -> None:
        self._check(node)
        pids = proctree.find({**self._markers(node), "LOCAL_RANK": str(local_rank)})
        if not pids:
            raise ClusterError(f"{node}: no worker with LOCAL_RANK={local_rank} is running")
        proctree.signal_all(pids, signal.SIGKILL)

    def pause_node(self, node: str) -> None:
        self._check(node)
        proctree.signal_all(proctree.find(self._markers(node)), signal.SIGSTOP)

    def unpause_node(self, node: str) -> None:
        self._check(node)
        proctree.signal_all(proctree.find(self._markers(node)), signal.SIGCONT)

    def partition(self, node: str, peers: list[str] | None = None) -> None:
        raise UnsupportedFault(f"backend 'local' does not support partition: {_NETWORK_REASON}")

    def disconnect(self, node: str) -> None:
        raise UnsupportedFault(f"backend 'local' does not support disconnect: {_NETWORK_REASON}")

    def heal_network(self, node: str) -> None:
        raise UnsupportedFault(f"backend 'local' does not support heal_network: {_NETWORK_REASON}")

    def fill_nvme(self, node: str, percent: float = 100.0) -> None:
        self._check(node)
        if not self._loop:
            raise UnsupportedFault(f"backend 'local' cannot fill NVMe here: no size-limited disk "
                                   f"({loopfs.supported()})")
        from chaosbench.cluster.docker_backend import _FILL_SCRIPT
        subprocess.run([sys.executable, "-c", _FILL_SCRIPT, str(self._nvme[node]), str(percent)],
                       check=True, timeout=120)

    def free_nvme(self, node: str) -> None:
        self._check(node)
        (self._nvme[node] / FILL_FILE).unlink(missing_ok=True)

    def nvme_dir(self, node: str) -> Path:
        self._check(node)
        return self._nvme[node]

    def shm_dir(self, node: str) -> Path:
        return SHM_ROOT / f"chaosbench-{self.project}" / node

    def wipe_node_storage(self, node: str, nvme: bool = True, shm: bool = True) -> None:
        self._check(node)
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
    """SIGKILL processes left by dead harnesses (they carry CHAOSBENCH_OWNER), and their shm dirs."""
    dead = [pid for pid, tok in proctree.find_with_key(owner_mod.OWNER_ENV).items()
            if not owner_mod.alive(tok)]
    proctree.signal_all(dead, signal.SIGKILL)
    for d in SHM_ROOT.glob("chaosbench-cb*"):
        try:
            tok = (d / "owner").read_text().strip()
        except OSError:
            continue
        if not owner_mod.alive(tok):
            shutil.rmtree(d, ignore_errors=True)
    loopfs.sweep()
    return dead
