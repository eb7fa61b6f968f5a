"""Generate the compose project of one run: services etcd, toxiproxy, s3 and node-0..N-1.

The file is the compose specification without a `version:` key, which Debian's docker-compose 1.29
and `docker compose` v2 both read. Everything carries labels so a sweep can find leftovers; there
are no host ports and no fixed names outside the project, so parallel runs never clash.
"""
from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from dataclasses import dataclass, field

import yaml

from chaosbench.cluster import jobenv
from chaosbench.cluster.base import ClusterSpec
from chaosbench.cluster.docker.cli import LABEL_PREFIX
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.docker.images import REPO, SOURCE_MOUNT
from chaosbench.cluster.node.clock import CLOCK_DIR_IN_NODE, node_clock
from chaosbench.cluster.launch import S3_BUCKET, gated, hosts_store, is_warm, node_plan
from chaosbench.cluster.docker.venv_volume import VENV_IN_IMAGE
from chaosbench.services import lighthouse

ETCD_PORT, PROXY_API_PORT, S3_PORT, C10D_PORT = 2379, 8474, 5000, 29400
# Ports the proxy listens on inside its container for the two routes.
PROXY_ETCD_PORT, PROXY_S3_PORT = 2379, 5000
EVENTS_IN_NODE, NVME_IN_NODE, MEMORY_IN_NODE = "/chaosbench/events", "/nvme", "/dev/shm/chaosbench"
WORKDIR_IN_NODE = "/workspace"   # the user's project (trainer.workdir), read-only
CONTROL_IN_NODE, GO_FILE = "/chaosbench/control", "go"   # the run's go signal (launch.gated), read-only
READY_IN_NODE = "/chaosbench/ready"   # where a warm-start node says its imports are done (one file per node)
SERVICES = ("etcd", "toxiproxy", "s3")
LIGHTHOUSE = "lighthouse"   # torchft's Lighthouse, only where trainer.launcher is torchft (services/lighthouse.py)


def services_for(spec: ClusterSpec) -> tuple[str, ...]:
    """The run's service containers: etcd, the proxy, S3, and the Lighthouse for torchft."""
    return SERVICES + ((LIGHTHOUSE,) if spec.launcher == "torchft" else ())


# A held standby boots at the lowest CPU weight: on one host it takes only what the training leaves
# idle, as a replacement machine booting on its own would (release_standby restores the default)
STANDBY_CPU_SHARES, DEFAULT_CPU_SHARES = 2, 1024


def go_file_of(node: str, standby: bool) -> str:
    """The file a node waits for: the run's go, or (a standby) its own, written when it is released."""
    return f"{GO_FILE}-{node}" if standby else GO_FILE


@dataclass
class ComposePlan:
    project: str
    image: str
    subnet: ipaddress.IPv4Network
    owner: str
    events_host_dir: str
    nvme_host_dirs: dict[str, str | None] = field(default_factory=dict)   # node -> loop mount, or None: tmpfs
    gpus: bool = False
    toxiproxy_image: str | None = None   # a real Toxiproxy image instead of ours
    source_dir: str = str(REPO)           # host checkout mounted read-only into our containers
    control_host_dir: str | None = None   # nodes wait for its GO_FILE (None: they start training at once)
    venv_volume: str | None = None        # our image's /opt/venv as a volume (venv_volume.py), or None
    job_image: str | None = None          # trainer nodes: our image plus the job's packages (cluster/jobenv)
    standby: set[str] = field(default_factory=set)   # nodes held on their own go file (go_file_of)
    ready_host_dir: str | None = None     # warm-start nodes create <node> here when their imports are done
    ready_files: dict[str, str] = field(default_factory=dict)   # node -> its ready file (set by render)

    def ip(self, name: str) -> str:
        hosts = list(self.subnet.hosts())
        fixed = {"etcd": 2, "toxiproxy": 3, "s3": 4, LIGHTHOUSE: 5}
        if name in fixed:
            return str(hosts[fixed[name] - 1])
        return str(hosts[9 + int(name.rsplit("-", 1)[1])])   # node-i -> .10+i

    @property
    def network(self) -> str:
        return f"{self.project}_net"

    def container(self, service: str) -> str:
        return f"{self.project}-{service}"

    def labels(self, role: str) -> dict[str, str]:
        return {f"{LABEL_PREFIX}.project": self.project, f"{LABEL_PREFIX}.owner": self.owner,
                f"{LABEL_PREFIX}.role": role}


def rdzv_endpoint(plan: ComposePlan, spec: ClusterSpec) -> str:
    if spec.launcher == "torchft":   # no cross-node rendezvous: the groups' quorum is the Lighthouse's
        return f"{plan.ip(LIGHTHOUSE)}:{lighthouse.PORT}"
    if hosts_store(spec.rendezvous):
        return f"{plan.ip('node-0')}:{C10D_PORT}"    # node-0's agent hosts the c10d store
    return f"{plan.ip('toxiproxy')}:{PROXY_ETCD_PORT}"   # etcd, through the fault proxy


def _service(plan: ComposePlan, name: str, role: str, command: list[str], image: str | None = None,
             **extra) -> dict:
    svc = {"image": image or plan.image, "container_name": plan.container(name), "hostname": name,
           "command": command, "labels": plan.labels(role), "init": True,
           "networks": {"net": {"ipv4_address": plan.ip(name)}}}
    if image is None:   # our image runs the project's code from the read-only source mount
        svc["volumes"] = [f"{plan.source_dir}:{SOURCE_MOUNT}:ro"]
        if plan.venv_volume:   # torch's files from the host's disk, not through the image's layers
            svc["volumes"].append(f"{plan.venv_volume}:{VENV_IN_IMAGE}:ro")
    for key, value in extra.items():
        svc[key] = svc.get(key, []) + value if key == "volumes" else value
    return svc


def clock_of(plan: ComposePlan, node: str):
    """The node's clock control file on the host and its libfaketime preload env (node/clock.py)."""
    from pathlib import Path
    return node_clock(Path(plan.events_host_dir).parent, node, CLOCK_DIR_IN_NODE, SOURCE_MOUNT)


def node_service(plan: ComposePlan, spec: ClusterSpec, node: str) -> dict:
    s3_url = f"http://{plan.ip('toxiproxy')}:{PROXY_S3_PORT}"
    user_image = spec.trainer_image
    clock = clock_of(plan, node) if spec.fake_clock else None
    p = node_plan(spec, node, python="python3" if user_image else "python", rdzv_endpoint=rdzv_endpoint(plan, spec),
                  s3_url=s3_url, events_dir=EVENTS_IN_NODE, nvme_dir=NVME_IN_NODE, memory_dir=MEMORY_IN_NODE,
                  workdir=WORKDIR_IN_NODE if spec.workdir else None, clock_env=clock[1] if clock else None)
    volumes = [f"{plan.events_host_dir}:{EVENTS_IN_NODE}"]
    if clock:   # the clock control file, rewritten by the harness on the host (clock_skew)
        volumes.append(f"{clock[0].parent}:{CLOCK_DIR_IN_NODE}:ro")
    env, argv = dict(p.env), p.argv
    if plan.control_host_dir:   # created with the cluster, training on the go signal
        volumes.append(f"{plan.control_host_dir}:{CONTROL_IN_NODE}:ro")
        ready = None
        if plan.ready_host_dir and is_warm(argv):   # the harness's go waits for these (start_training)
            volumes.append(f"{plan.ready_host_dir}:{READY_IN_NODE}")
            ready = f"{READY_IN_NODE}/{node}"
            plan.ready_files[node] = str(Path(plan.ready_host_dir) / node)
        argv = gated(argv, f"{CONTROL_IN_NODE}/{go_file_of(node, node in plan.standby)}", ready)
    if spec.workdir:
        volumes.append(f"{spec.workdir}:{WORKDIR_IN_NODE}:ro")
    if plan.job_image and not user_image:   # the job's packages first, also with a PYTHONPATH in cluster.env
        env = jobenv.job_env(env, jobenv.PREFIX_IN_IMAGE)
    if user_image:   # the user's image has no chaosbench installed: the node watcher and
        volumes.append(f"{plan.source_dir}:{SOURCE_MOUNT}:ro")   # instrument module come from the mount
        env["PYTHONPATH"] = ":".join(x for x in (SOURCE_MOUNT, env.get("PYTHONPATH")) if x)
    tmpfs = []
    host_nvme = plan.nvme_host_dirs.get(node)
    if host_nvme:
        volumes.append(f"{host_nvme}:{NVME_IN_NODE}")
    else:   # no root for a loop device: a size-limited tmpfs (lost when the container stops)
        tmpfs.append(f"{NVME_IN_NODE}:size={spec.nvme_size_mb}m")
    # tmpfs and /dev/shm count against the memory limit: leave room for the trainer on top.
    mem_mb = spec.shm_size_mb + (0 if host_nvme else spec.nvme_size_mb) + int(
        os.environ.get("CHAOSBENCH_NODE_MEMORY_MB", "4096"))
    extra = {"environment": env, "volumes": volumes, "shm_size": f"{spec.shm_size_mb}m",
             "mem_limit": f"{mem_mb}m", "cap_add": ["NET_ADMIN"], "stop_grace_period": "10s"}
    if node in plan.standby:
        extra["cpu_shares"] = STANDBY_CPU_SHARES
    if tmpfs:
        extra["tmpfs"] = tmpfs
    if p.cwd:
        extra["working_dir"] = p.cwd
    argv = with_disk_layer(spec, node, argv, extra)
    # compose interpolates $VAR in the file: `$$` keeps a literal `$` for the node's shell (PREPARE's
    # "$CHAOSBENCH_CHECKPOINT_DIR", a user's "$HOME" argument, a progress regex ending in `$`)
    svc = _service(plan, node, "node", [a.replace("$", "$$") for a in argv], image=user_image, **extra)
    if plan.job_image and not user_image:   # still our image (source mount, venv volume): only the tag differs
        svc["image"] = plan.job_image
    return svc


def with_disk_layer(spec: ClusterSpec, node: str, argv: list[str], extra: dict) -> list[str]:
    """The node command behind the disk layer's `start` (mounted over the node's tiers at each start of the
    container, before its launcher) where spec.disk_layers asks for it: FUSE needs /dev/fuse and
    CAP_SYS_ADMIN in the node (and no AppArmor confinement where the host has AppArmor). Its control
    directory is in the container's own filesystem: a fault outlives a restart of the node, as a bad
    disk does (bitflip_on_read's restore after kill_all needs that)."""
    layer = spec.disk_layers.get(node)
    if not layer:
        return argv
    if spec.trainer_image:
        raise ClusterError(f"{node}: disk faults need the disk layer, which runs with the node image's python "
                           f"(mfusepy); trainer.image {spec.trainer_image!r} has neither: drop trainer.image")
    tiers = {"nvme": NVME_IN_NODE, "memory": MEMORY_IN_NODE}
    extra["cap_add"] = [*extra.get("cap_add", []), "SYS_ADMIN"]
    extra["devices"] = ["/dev/fuse"]
    if os.path.exists("/sys/kernel/security/apparmor"):
        extra["security_opt"] = ["apparmor:unconfined"]
    from chaosbench.cluster.node.disk_layer import start_argv
    return start_argv("python", f"{SOURCE_MOUNT}/chaosbench/cluster/node/disk_layer.py", layer, tiers, argv)


def render(plan: ComposePlan, spec: ClusterSpec, nodes: list[str]) -> dict:
    etcd_ip = plan.ip("etcd")
    services = {
        "etcd": _service(plan, "etcd", "etcd", [
            "etcd", "--name", "etcd", "--data-dir", "/var/lib/etcd-data", "--enable-v2",
            "--listen-client-urls", f"http://0.0.0.0:{ETCD_PORT}",
            "--advertise-client-urls", f"http://{etcd_ip}:{ETCD_PORT}", "--log-level", "warn"]),
        "s3": _service(plan, "s3", "s3", [
            "python", "-m", "chaosbench.services.s3", "--host", "0.0.0.0", "--port", str(S3_PORT),
            "--bucket", S3_BUCKET]),
    }
    if plan.toxiproxy_image:   # Shopify's image: entrypoint /toxiproxy, API on 8474
        services["toxiproxy"] = _service(plan, "toxiproxy", "proxy", ["-host=0.0.0.0"],
                                         image=plan.toxiproxy_image)
    else:
        services["toxiproxy"] = _service(plan, "toxiproxy", "proxy", [
            "python", "-m", "chaosbench.proxy", "--host", "0.0.0.0", "--port", str(PROXY_API_PORT)])
    if LIGHTHOUSE in services_for(spec):   # torchft's own server: runs where the job's packages are
        services[LIGHTHOUSE] = _service(plan, LIGHTHOUSE, LIGHTHOUSE, lighthouse.argv("python", "0.0.0.0", lighthouse.PORT))
        services[LIGHTHOUSE]["image"] = plan.job_image or plan.image   # its PYTHONPATH has torchft
    for node in nodes:
        services[node] = node_service(plan, spec, node)
    doc = {
        "services": services,
        "networks": {"net": {
            "driver": "bridge", "labels": plan.labels("network"),
            "ipam": {"config": [{"subnet": str(plan.subnet)}]}}},
    }
    if plan.venv_volume:   # made by images.node_venv_volume, shared by runs: never the project's
        doc["volumes"] = {plan.venv_volume: {"external": True}}
    return doc


def render_gpu_override(plan: ComposePlan, nodes: list[str]) -> dict:
    """GPU reservations + NCCL settings for every node (used when the host has NVIDIA GPUs)."""
    gpu = {"deploy": {"resources": {"reservations": {"devices": [
        {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]}}},
        "environment": {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1",
                        "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN")}}
    return {"services": {n: gpu for n in nodes}}


def dump(doc: dict) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
