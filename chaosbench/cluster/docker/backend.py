"""The reference backend: one compose project per run, generated from the ClusterSpec.

Nodes and services get static addresses on a per-run /24; the harness reaches them on those
addresses directly (Linux bridge), so no host port is published and parallel runs cannot clash.
"""
from __future__ import annotations

import ipaddress
import json
import os
import random
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from chaosbench.cluster import loopfs

from chaosbench.cluster.docker import images, memory as docker_memory
from chaosbench.cluster import jobenv, owner as owner_mod
from chaosbench.cluster.jobenv import probe as jobenv_probe
from chaosbench.cluster.base import Cluster, ClusterSpec
from chaosbench.cluster.errors import ClusterError, UnsupportedFault
from chaosbench.cluster.docker.compose_file import (MEMORY_IN_NODE, ETCD_PORT, GO_FILE, go_file_of, DEFAULT_CPU_SHARES, NVME_IN_NODE, PROXY_API_PORT, PROXY_ETCD_PORT,
                                             PROXY_S3_PORT, S3_PORT, LIGHTHOUSE, ComposePlan, clock_of, dump,
                                             rdzv_endpoint, render, render_gpu_override, services_for)
from chaosbench.services import lighthouse
from chaosbench.cluster.docker.cli import compose, compose_cmd, docker, leftovers, remove_project, sweep
from chaosbench.cluster.host_services import ServiceEndpoints
from chaosbench.cluster.node import scripts
from chaosbench.cluster.node.disk_layer import CONTROL_DIR as DISK_CONTROL_DIR
from chaosbench.cluster.node.scripts import Script
from chaosbench.cluster.launch import validate
from chaosbench.cluster.services_api import (create_routes, etcd_ready, proxy_ready, s3_ready,
                                             wait_until)

CPU_PERIOD_US = 100_000   # throttle_node's CFS period (docker's default)
# How long the go waits for the nodes' imports (start_training): ~5 s here with three nodes on two
# cores; the bound only stops a node whose server never gets ready from holding the run.
READY_WAIT_S = float(os.environ.get("CHAOSBENCH_READY_WAIT_S", "120"))
SERVICE_ALIASES = {"proxy": "toxiproxy", "toxiproxy": "toxiproxy", "etcd": "etcd", "s3": "s3"}


def _pick_subnet() -> ipaddress.IPv4Network:
    """A /24 no docker network uses yet (docker itself refuses an overlap, so a race only retries)."""
    used = []
    for nid in docker("network", "ls", "-q").split():
        for cfg in json.loads(docker("network", "inspect", nid))[0].get("IPAM", {}).get("Config") or []:
            if cfg.get("Subnet") and ":" not in cfg["Subnet"]:
                used.append(ipaddress.ip_network(cfg["Subnet"]))
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{random.randint(200, 250)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise ClusterError("no free /24 in 10.200.0.0-10.250.255.0 for the cluster network")


def _gpus_available() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return "nvidia" in docker("info", "--format", "{{json .Runtimes}}", check=False)


# what the user's image must import for each rendezvous (torch's etcd backends use python-etcd)
IMAGE_NEEDS = {"etcd-v3": ("torch", "etcd3"), "etcd": ("torch", "etcd"), "etcd-v2": ("torch", "etcd")}


def check_trainer_image(image: str, rendezvous: str, requirements: list[str] = ()) -> list[str]:
    """trainer.image: present locally and its python3 imports what the nodes will run, before a cluster
    starts (otherwise every node exits at once and the run only says 'exited:1'); returns name==version
    of the job's requirements found in it."""
    if not docker("images", "-q", image, check=False).strip():
        raise ClusterError(f"trainer.image {image!r} is not among the local docker images (none is pulled "
                           f"here); build it (`docker build -t {image} .`) or fix the name")
    modules = IMAGE_NEEDS.get(rendezvous, ("torch",))
    # the probe prints its own verdict, so docker()'s check=False ("" when docker run itself fails) still
    # tells a python3 that did not run apart from one that could not import
    probe = (f"try:\n import {', '.join(modules)}\n print('ok')\n"
             f"except Exception as e:\n print(f'{{type(e).__name__}}: {{e}}')")
    out = docker("run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c", probe,
                 check=False, timeout=120).strip()
    if out != "ok":
        why = out.splitlines()[-1] if out else "python3 did not run in it"
        raise ClusterError(f"trainer.image {image!r}: its python3 cannot import {', '.join(modules)} ({why}); "
                           f"the nodes run torchrun with the {rendezvous} rendezvous in it: build it FROM an "
                           f"image with torch{' and ' + modules[1] if len(modules) > 1 else ''}, or drop "
                           f"trainer.image to use chaosbench's node image")
    if requirements:   # the user's image is theirs: we do not derive from it, we check it has them
        out = docker("run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c",
                     jobenv_probe.source(requirements), check=False, timeout=120)
        lacking = jobenv_probe.missing(out)
        if lacking:
            raise ClusterError(f"trainer.image {image!r} lacks {', '.join(lacking)} of trainer.requirements: "
                               f"chaosbench installs the job's packages into its own node image only; add "
                               f"them to your image (RUN pip install {' '.join(lacking)}), or drop trainer.image")
        return jobenv_probe.versions(out)
    return []


NO_NETEM = ("neither sch_netem nor nfnetlink_queue + the NFQUEUE target on this kernel; loss_pct and rate_kbit "
            "work here (delay, jitter, duplicate, corrupt and reorder need one of them)")


class DockerCluster(Cluster):
    backend = "docker"
    unsupported_why = {"netem_link": NO_NETEM}

    @classmethod
    def withheld(cls) -> frozenset[str]:
        return frozenset() if scripts.netem_mechanism() else frozenset({"netem_link"})

    @property
    def netem_mechanism(self) -> str | None:   # the nodes share the host's kernel
        return scripts.netem_mechanism()

    def __init__(self, spec: ClusterSpec, image: str | None = None, toxiproxy_image: str | None = None,
                 gpus: bool | None = None):
        validate(spec)
        super().__init__(spec)
        self._image = image
        self._toxiproxy_image = toxiproxy_image
        self._gpus = gpus
        self.compose_dir = self.run_dir / "compose"
        self._disconnected: set[str] = set()
        self._squeezed: dict[str, dict] = {}   # node -> its own memory limits, while memory_pressure holds it
        self.plan: ComposePlan | None = None
        self._files: list[str] = []

    # -- lifecycle -------------------------------------------------------------------------
    def _sweep_dead(self) -> None:
        sweep()

    def _start(self) -> None:
        image = self._image or images.node_image()
        if self.spec.trainer_image:
            self.job_packages = check_trainer_image(self.spec.trainer_image, self.spec.rendezvous,
                                                    self.spec.requirements)
        job_image = None
        if self.spec.requirements and not self.spec.trainer_image:   # built (or found) before any container
            job_image = jobenv.docker_image(image, self.spec.requirements, self.spec.requirements_origin)
            self.job_packages = jobenv.packages(job_image)
        (self.run_dir / "events").mkdir(parents=True, exist_ok=True)
        self.compose_dir.mkdir(parents=True, exist_ok=True)
        self.plan = ComposePlan(
            project=self.project, image=image, subnet=_pick_subnet(), owner=owner_mod.token(),
            events_host_dir=str(self.run_dir / "events"), control_host_dir=str(self._control_dir()),
            ready_host_dir=str(self._ready_dir()),
            gpus=_gpus_available() if self._gpus is None else self._gpus,
            toxiproxy_image=self._toxiproxy_image or os.environ.get("CHAOSBENCH_TOXIPROXY_IMAGE") or None,
            venv_volume=images.node_venv_volume(image), job_image=job_image)
        for node in self._nodes:
            self._make_disk(node)
        self._write_files()
        for attempt in range(3):
            try:
                # the nodes too: they start now, next to the services, and wait for the go file
                compose(self.project, self._files, "up", "-d", "--no-recreate", *services_for(self.spec), *self._nodes,
                        timeout=300)
                break
            except ClusterError as exc:   # another run took the subnet between our check and `up`
                if "overlap" not in str(exc).lower() or attempt == 2:
                    raise
                compose(self.project, self._files, "down", "-v", "--remove-orphans", "-t", "1")
                self.plan.subnet = _pick_subnet()
                self._write_files()
        self._wait_services()

    def _wait_services(self) -> None:
        self.services = ServiceEndpoints(proxy_api=f"http://{self.plan.ip('toxiproxy')}:{PROXY_API_PORT}",
                                         s3_endpoint=f"http://{self.plan.ip('s3')}:{S3_PORT}")
        hint = f"; see `docker logs {self.project}-<service>`"
        wait_until("etcd", lambda: etcd_ready(f"http://{self.plan.ip('etcd')}:{ETCD_PORT}"), 60, hint)
        wait_until("S3 endpoint", lambda: s3_ready(f"http://{self.plan.ip('s3')}:{S3_PORT}"), 90, hint)
        wait_until("fault proxy", lambda: proxy_ready(self.proxy_api), 60, hint)
        self._create_routes()
        wait_until("etcd through the proxy",
                   lambda: etcd_ready(f"http://{self.plan.ip('toxiproxy')}:{PROXY_ETCD_PORT}"), 90, hint)
        if LIGHTHOUSE in services_for(self.spec):
            wait_until("torchft Lighthouse", lambda: lighthouse.ready(f"http://{self.plan.ip(LIGHTHOUSE)}:{lighthouse.PORT}"),
                       90, hint)

    def _create_routes(self) -> None:
        create_routes(self.proxy_api, {
            "etcd": (f"0.0.0.0:{PROXY_ETCD_PORT}", f"{self.plan.ip('etcd')}:{ETCD_PORT}"),
            "s3": (f"0.0.0.0:{PROXY_S3_PORT}", f"{self.plan.ip('s3')}:{S3_PORT}")})

    def _make_disk(self, node: str) -> None:
        if loopfs.supported() is None:
            self.plan.nvme_host_dirs[node] = str(loopfs.create(self.project, node, self.spec.nvme_size_mb))
        else:
            self.plan.nvme_host_dirs[node] = None

    def _write_files(self) -> None:
        main = self.compose_dir / "docker-compose.yml"
        main.write_text(dump(render(self.plan, self.spec, self._nodes)))
        self._files = [str(main)]
        if self.plan.gpus:
            gpu = self.compose_dir / "docker-compose.gpu.yml"
            gpu.write_text(dump(render_gpu_override(self.plan, self._nodes)))
            self._files.append(str(gpu))

    def _control_dir(self) -> Path:
        """Where the go file appears (mounted read-only in every node); none yet: nodes wait."""
        d = self.run_dir / "control"
        d.mkdir(parents=True, exist_ok=True)
        (d / GO_FILE).unlink(missing_ok=True)
        return d

    def _ready_dir(self) -> Path:
        """Where warm-start nodes say their imports are done (mounted writable; READY_IN_NODE)."""
        d = self.run_dir / "control-ready"
        d.mkdir(parents=True, exist_ok=True)
        for stale in d.iterdir():
            stale.unlink()
        return d

    def start_training(self) -> None:
        """The nodes are up since _start, importing torch (launch.gated): the go file starts them all,
        once every warm-start node has said it is ready (the first rendezvous then runs on a quiet
        machine, not against three nodes' imports: warm_start.Server.preload)."""
        self.ready_wait = self._await_ready(READY_WAIT_S)
        (self.run_dir / "control" / GO_FILE).write_text("go\n")

    def _await_ready(self, bound_s: float) -> dict:
        """Wait until each warm-start node's ready file exists or the node is no longer running, at most
        `bound_s` (a node that never gets ready is the run's to observe, not a reason to hold it)."""
        t0 = time.monotonic()
        waiting = {n: Path(f) for n, f in (self.plan.ready_files if self.plan else {}).items()
                   if n not in self.plan.standby}
        gone: list[str] = []
        next_status = t0 + 1.0
        while waiting and time.monotonic() - t0 < bound_s:
            waiting = {n: f for n, f in waiting.items() if not f.exists()}
            if waiting and time.monotonic() >= next_status:   # a docker inspect each: once a second
                for n in [n for n in waiting if self.node_status(n) != "running"]:
                    gone.append(n)
                    del waiting[n]
                next_status = time.monotonic() + 1.0
            if waiting:
                time.sleep(0.02)
        return {"waited_s": round(time.monotonic() - t0, 2), "not_ready": sorted(waiting), "not_running": gone}

    def _state(self, service: str) -> dict | None:
        out = docker("inspect", "-f", "{{json .State}}", self.plan.container(service), check=False)
        return json.loads(out) if out.strip() else None

    def node_status(self, node: str) -> str:
        st = self._state(node) if self.plan else None
        if st is None:
            return "absent"
        if st.get("Paused"):
            return "paused"
        if st.get("Running"):
            return "running"
        return f"exited:{st.get('ExitCode')}"

    def collect(self) -> None:
        if self.plan is None:
            return
        logs = self.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        names = [*services_for(self.spec), *self._nodes]
        # one docker CLI per container and call: in parallel, the collection of a 3-node run takes the
        # time of its slowest container instead of the sum of twelve (CHANGELOG.md, harness speed)
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            states = dict(zip(names, pool.map(self._state, names)))
            present = [n for n in names if states[n] is not None]
            list(pool.map(lambda n: self._save_log(n, logs / f"{n}.log"), present))
        exits = {n: {"status": states[n].get("Status"), "exit_code": states[n].get("ExitCode"),
                     "oom_killed": states[n].get("OOMKilled")} for n in present}
        (self.run_dir / "exits.json").write_text(json.dumps(exits, indent=1))

    def _save_log(self, name: str, path: Path) -> None:
        with open(path, "wb") as out:   # the container's stdout and stderr
            try:   # own session: a Ctrl-C during collection must not reach the docker CLI
                subprocess.run(["docker", "logs", "--timestamps", self.plan.container(name)],
                               stdout=out, stderr=subprocess.STDOUT, timeout=120, start_new_session=True)
            except subprocess.TimeoutExpired:
                out.write(b"\n[chaosbench: docker logs timed out after 120 s]\n")

    def attach_hint(self) -> str:
        files = " ".join(f"-f {f}" for f in self._files)
        return (f"compose project {self.project} (containers {self.project}-<service>); events in "
                f"{self.events_dir}; proxy API {self.proxy_api}; remove it with "
                f"`{' '.join(compose_cmd())} -p {self.project} {files} down -v`")

    def _stop(self) -> list[str]:
        # by label, SIGKILL: the evidence is collected by now, and `compose down -t 2` spent 2-3 s on
        # stop signals and its own start-up to remove the same containers, network and volumes
        refused = remove_project(self.project)
        left = {k: v for k, v in leftovers(self.project, check=True).items() if v}
        left.update({"loop disks": [self.project]} if loopfs.mounted(self.project) else {})
        return [f"{k}: {', '.join(v)}" for k, v in left.items()] + (refused if left else [])

    # -- hooks -----------------------------------------------------------------------------
    def _run_in_node(self, node: str, script: Script, *args: str, timeout: float = 120) -> str:
        return docker("exec", self._node(node), *script.argv("python", *args), timeout=timeout)

    def _start_in_node(self, node: str, script: Script, *args: str) -> subprocess.Popen:
        """A long-running in-node script under `docker exec` (it ends with the container at the latest)."""
        from chaosbench.cluster.docker import cli as docker_cli
        logs = self.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{node}-{script.name}.log", "ab") as log:
            return subprocess.Popen(["docker", "exec", self._node(node), *script.argv("python", *args)], stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                    env=docker_cli._env())

    def _incarnation(self, node: str) -> object:
        return (self._state(node) or {}).get("StartedAt")

    def _nvme_in_node(self, node: str) -> str:
        return NVME_IN_NODE

    def _cut_targets(self, node: str, peers: list[str] | None) -> list[str]:
        names = peers if peers is not None else [n for n in self._nodes if n != node] + list(services_for(self.spec))
        return [self.plan.ip(SERVICE_ALIASES.get(p, p)) for p in names]

    def _link_targets(self, node: str, to: str, peer: str | None) -> tuple[str, list[str]]:
        """The node's eth0 (its own network namespace) and the addresses of its link `to`: data = the
        other trainer nodes; etcd / s3 = the proxy's port for it and the service itself; rendezvous =
        the endpoint the agents use; all = every other node and service."""
        ip = self.plan.ip
        others = [ip(n) for n in self._nodes if n != node]
        if peer is not None:
            self._check_node(peer)
            return "eth0", [ip(peer)]
        proxy = ip("toxiproxy")
        services = {"etcd": [f"{proxy}:{PROXY_ETCD_PORT}", ip("etcd")], "s3": [f"{proxy}:{PROXY_S3_PORT}", ip("s3")]}
        if to == "rendezvous":
            endpoint = rdzv_endpoint(self.plan, self.spec)
            if endpoint.split(":")[0] == ip(node):
                raise ClusterError(f"{node} hosts the c10d rendezvous store itself: degrade another node's "
                                   f"rendezvous link (or use etcd rendezvous)")
            return "eth0", [endpoint]
        if to == "all":
            return "eth0", others + [proxy, ip("etcd"), ip("s3")]
        return "eth0", others if to == "data" else services[to]

    def restore_link(self, node: str) -> dict | None:
        if self.node_status(node) == "running":   # a restarted container has a fresh network namespace
            return super().restore_link(node)
        return None

    def _service_action(self, service: str, action: str) -> None:
        if service not in SERVICE_ALIASES:
            raise ClusterError(f"unknown service {service!r}; services: etcd, s3, proxy")
        container = self.plan.container(SERVICE_ALIASES[service])
        if action == "kill":
            docker("kill", "-s", "KILL", container)
            return
        docker(action, container)   # start | pause | unpause
        if action == "start" and SERVICE_ALIASES[service] == "toxiproxy":   # routes live in the proxy's memory
            wait_until("fault proxy", lambda: proxy_ready(self.proxy_api), 30)
            self._create_routes()

    # -- faults ----------------------------------------------------------------------------
    def _node(self, node: str) -> str:
        if node not in self._nodes:
            raise ClusterError(f"unknown node {node!r}; nodes: {', '.join(self._nodes)}")
        return self.plan.container(node)

    def _exec(self, node: str, *cmd: str, timeout: float = 60) -> str:
        return docker("exec", self._node(node), *cmd, timeout=timeout)

    def kill_node(self, node: str) -> None:
        docker("kill", "-s", "KILL", self._node(node))

    def stop_node(self, node: str) -> None:
        docker("stop", "-t", "10", self._node(node), timeout=60)

    def start_node(self, node: str) -> None:
        docker("start", self._node(node))

    def pause_node(self, node: str) -> None:
        docker("pause", self._node(node))

    def unpause_node(self, node: str) -> None:
        docker("unpause", self._node(node))

    def throttle_node(self, node: str, cpu_fraction: float) -> None:
        """A cgroup CPU quota on the node's container: cpu_fraction of the CPUs it could use."""
        if not 0 < cpu_fraction <= 1:
            raise ClusterError(f"throttle_node cpu_fraction={cpu_fraction}: must be in (0, 1]")
        cpus = int(docker("info", "--format", "{{.NCPU}}").strip() or 1)
        quota = max(1000, int(CPU_PERIOD_US * cpus * cpu_fraction))
        docker("update", "--cpu-period", str(CPU_PERIOD_US), "--cpu-quota", str(quota), self._node(node))

    def unthrottle_node(self, node: str) -> None:
        docker("update", "--cpu-quota", "-1", self._node(node))

    def squeeze_memory(self, node: str, limit_mb: int | None = None, fraction: float | None = None) -> dict:
        """The container's memory cgroup limit, plus a ballast where cgroup v1 refuses to go below
        what is in use (docker/memory.py)."""
        return docker_memory.squeeze(self, node, limit_mb, fraction)

    def release_memory(self, node: str) -> dict:
        return docker_memory.release(self, node)

    def memory_kills(self, node: str) -> int | None:
        return docker_memory.kills(self, node)

    def break_name(self, node: str, name: str, mode: str, delay_s: float = 5.0) -> str:
        """In the node's own /etc/hosts and resolv.conf (scripts.BREAK_NAME). The endpoints the nodes
        are given (rendezvous, etcd and S3 through the proxy) are IP addresses here: no lookup to break."""
        endpoints = {"rendezvous": "CHAOSBENCH_RDZV_ENDPOINT", "etcd": "CHAOSBENCH_RDZV_ENDPOINT",
                     "s3": "CHAOSBENCH_S3_ENDPOINT", "proxy": "CHAOSBENCH_S3_ENDPOINT"}
        if name in endpoints:
            raise UnsupportedFault(
                f"backend 'docker' cannot break the name '{name}': its nodes reach it by IP address "
                f"({endpoints[name]} holds an address, not a host name), so no lookup happens; name a "
                f"host the node resolves instead (node-0: the workers' store is the rank-0 node's host name)")
        self._run_in_node(node, scripts.BREAK_NAME, name, mode, str(delay_s), timeout=30)
        return name

    def restore_names(self, node: str) -> None:
        """A removed container needs nothing (its files go with it): `chaosbench clean` does no more."""
        if self.node_status(node) == "running":   # a node killed or stopped meanwhile: nothing to reach
            self._run_in_node(node, scripts.RESTORE_NAMES, timeout=30)

    def _disk_tiers_in_node(self, node: str) -> dict[str, str]:
        tiers = {"nvme": NVME_IN_NODE, "memory": MEMORY_IN_NODE}
        return {t: tiers[t] for t in (self.spec.disk_layers.get(node) or {}).get("tiers", [])}

    def heal_disk(self, node: str, tier: str) -> dict | None:
        """A node not running has no layer to ask, but its control file stays in the container (its next
        start would read the fault): it is emptied with `docker cp`, and read back to verify."""
        if self.node_status(node) == "running":
            return super().heal_disk(node, tier)
        self._disk_tier(node, tier)
        import tempfile
        path = f"{DISK_CONTROL_DIR}/{tier}.json"
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "c.json").write_text("{}")
            docker("cp", str(Path(tmp, "c.json")), f"{self._node(node)}:{path}")
            docker("cp", f"{self._node(node)}:{path}", str(Path(tmp, "back.json")))
            if Path(tmp, "back.json").read_text() != "{}":
                raise ClusterError(f"{node}: the disk layer's control file {path} still holds a fault after heal")
        return None

    def disk_stats(self, node: str, tier: str) -> dict:
        return super().disk_stats(node, tier) if self.node_status(node) == "running" else {}

    def _clock_file(self, node: str) -> tuple[Path, dict[str, str]]:
        """A host directory bind-mounted read-only into the node: the harness rewrites the file there, so
        a stopped or killed node's next start reads what the fault left (and "+0" after heal)."""
        self._node(node)
        return clock_of(self.plan, node)

    def disconnect(self, node: str) -> None:
        docker("network", "disconnect", self.plan.network, self._node(node))
        self._disconnected.add(node)

    def heal_network(self, node: str) -> None:
        """Reconnect a disconnected node; remove a partition's iptables chain."""
        if node in self._disconnected:
            docker("network", "connect", "--ip", self.plan.ip(node), self.plan.network, self._node(node))
            self._disconnected.discard(node)
        if self.node_status(node) == "running":   # a partition's rules (a restarted container has none)
            super().heal_network(node)

    def nvme_dir(self, node: str) -> Path:
        self._node(node)
        host = self.plan.nvme_host_dirs.get(node)
        if not host:
            raise UnsupportedFault(f"{node}'s NVMe is a tmpfs inside the container (no loop disk: "
                                   f"{loopfs.supported()}); no host path")
        return Path(host)

    def shm_dir(self, node: str) -> Path:
        pid = docker("inspect", "-f", "{{.State.Pid}}", self._node(node)).strip()
        if pid in ("", "0"):
            raise ClusterError(f"{node} is not running: its /dev/shm exists only while it runs")
        return Path(f"/proc/{pid}/root/dev/shm")   # the container's shm, seen from the host (root)

    def wipe_node_storage(self, node: str, nvme: bool = True, shm: bool = True) -> None:
        running = self.node_status(node) == "running"
        if nvme:
            host = self.plan.nvme_host_dirs.get(node)
            if host:
                for p in Path(host).iterdir():
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
            elif running:
                self._exec(node, "sh", "-c", f"rm -rf {NVME_IN_NODE}/* {NVME_IN_NODE}/.[!.]*")
        if shm and running:   # a stopped container's /dev/shm is recreated empty on start
            self._exec(node, "sh", "-c", "rm -rf /dev/shm/* /dev/shm/.[!.]*")

    def add_node(self) -> str:
        self._check_room_for_node()
        return self._new_node()

    def _new_node(self, standby: bool = False) -> str:
        node = f"node-{len(self._nodes)}"
        self._nodes.append(node)
        if standby:
            self._standby.add(node)
            self.plan.standby.add(node)
        self._make_disk(node)
        self._write_files()
        compose(self.project, self._files, "up", "-d", "--no-recreate", "--no-deps", node)
        return node

    def add_standby(self) -> str:
        """The node's container starts and, warm-started, imports torch at the lowest CPU weight (it
        takes only what the training leaves idle); it waits for its own go file."""
        if self.plan is None or not self.plan.control_host_dir:
            raise ClusterError("add_standby: the cluster is not up")
        return self._new_node(standby=True)

    def release_standby(self, node: str) -> None:
        if node not in self._standby:
            raise ClusterError(f"release_standby: {node!r} is not a held standby; standbys: {sorted(self._standby) or 'none'}")
        self._check_room_for_node("release_standby", "release the standby once a node is gone (a trigger "
                                  "after the loss, e.g. delay_s), or raise cluster max_nodes")
        docker("update", "--cpu-shares", str(DEFAULT_CPU_SHARES), self._node(node))
        self._standby.discard(node)
        (self.run_dir / "control" / go_file_of(node, True)).write_text("go\n")
