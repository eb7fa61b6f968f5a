"""etcd, the S3 endpoint and the fault proxy as processes on one host, bound to one address.

The local backend runs them beside the harness on 127.0.0.1; the Slurm backend beside the harness
(login node) or on a host of its allocation (slurm/services.py serves this class over HTTP there).
Service faults act on them in place, on the same ports: kill, start, pause, unpause.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.launch import S3_BUCKET
from chaosbench.cluster.services_api import create_routes, etcd_ready, proxy_ready, s3_ready, wait_until
from chaosbench.services import lighthouse
from chaosbench.services.etcd_server import EtcdServer
from chaosbench.services.ports import free_ports

REPO = Path(__file__).resolve().parents[2]
ACTIONS = ("kill", "start", "pause", "unpause")


class ServiceProcess:
    """A python service subprocess in its own session; restartable on the same port."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None):
        self.name, self.argv, self.log, self.env = name, argv, log, env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO,
                                         env=self.env)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass(eq=False)
class ServiceEndpoints:
    """Where the harness reaches the services (a cluster's `services`, once up)."""
    proxy_api: str = ""
    s3_endpoint: str = ""

    def at(self, host: str, ports: dict[str, int]) -> None:
        self.proxy_api, self.s3_endpoint = f"http://{host}:{ports['proxy']}", f"http://{host}:{ports['s3']}"


class HostServices(ServiceEndpoints):
    """The three services on this host; `.host`, `.ports`, `.proxy_api`, `.s3_endpoint`, `.action()`."""

    def __init__(self, host: str, data_dir: Path, logs: Path, name: str):
        super().__init__()
        self.host, self.data_dir, self.logs, self.name = host, Path(data_dir), Path(logs), name
        self.ports: dict[str, int] = {}
        self.etcd: EtcdServer | None = None
        self.processes: dict[str, ServiceProcess] = {}

    def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.etcd = EtcdServer(self.data_dir, host=self.host, name=self.name)
        self.etcd.start()
        names = ("s3", "proxy", "proxy_etcd", "proxy_s3")
        self.ports.update(zip(names, free_ports(len(names), self.host)))
        self.ports["etcd"] = self.etcd.client_port
        self.at(self.host, self.ports)
        py, h = sys.executable, self.host
        self.processes = {
            "s3": ServiceProcess("s3", [py, "-m", "chaosbench.services.s3", "--host", h, "--port",
                                        str(self.ports["s3"]), "--bucket", S3_BUCKET], self.logs / "s3.log"),
            "proxy": ServiceProcess("proxy", [py, "-m", "chaosbench.proxy", "--host", h, "--port",
                                              str(self.ports["proxy"])], self.logs / "proxy.log")}
        for svc in self.processes.values():
            svc.start()
        hint = f"; see {self.logs}"
        wait_until("S3 endpoint", lambda: s3_ready(self.s3_endpoint), 60, hint)
        wait_until("fault proxy", lambda: proxy_ready(self.proxy_api), 30, hint)
        self._create_routes()
        wait_until("etcd through the proxy", lambda: etcd_ready(f"http://{h}:{self.ports['proxy_etcd']}"), 30, hint)

    def start_lighthouse(self, env: dict[str, str] | None = None) -> None:
        """torchft's Lighthouse (trainer.launcher torchft), with `env` where torchft is importable (the job's
        packages: cluster/jobenv); stopped with the others."""
        self.ports["lighthouse"] = free_ports(1, self.host)[0]
        svc = ServiceProcess("lighthouse", lighthouse.argv(sys.executable, self.host, self.ports["lighthouse"]),
                             self.logs / "lighthouse.log", env)
        self.processes["lighthouse"] = svc
        svc.start()
        url = f"http://{self.host}:{self.ports['lighthouse']}"
        wait_until("torchft Lighthouse", lambda: lighthouse.ready(url) or not svc.alive(), 60, f"; see {svc.log}")
        if not svc.alive():
            raise ClusterError(f"torchft's Lighthouse exited at start; see {svc.log}")

    def _create_routes(self) -> None:
        h = self.host
        create_routes(self.proxy_api, {"etcd": (f"{h}:{self.ports['proxy_etcd']}", self.etcd.endpoint),
                                       "s3": (f"{h}:{self.ports['proxy_s3']}", f"{h}:{self.ports['s3']}")})

    def action(self, service: str, action: str) -> None:
        """kill | start | pause | unpause one service in place (etcd keeps its data and port)."""
        if action not in ACTIONS:
            raise ClusterError(f"unknown service action {action!r}; actions: {', '.join(ACTIONS)}")
        if service == "etcd":
            {"kill": self.etcd.kill, "start": self.etcd.start, "pause": self.etcd.pause,
             "unpause": self.etcd.resume}[action]()
            return
        svc = self.processes.get("proxy" if service == "toxiproxy" else service)
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

    def alive(self) -> list[int]:
        return [s.proc.pid for s in self.processes.values() if s.alive()]

    def stop(self) -> None:
        for svc in self.processes.values():
            svc.stop()
        if self.etcd is not None:
            self.etcd.stop()
