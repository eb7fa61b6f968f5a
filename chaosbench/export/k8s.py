"""Render a scenario's cluster as Kubernetes manifests: the same trainer, on a real cluster.

Objects (plain dicts in the Kubernetes API's JSON shape):
- ConfigMap  <name>-config     the trainer config (scenario overrides applied, NVMe dir on the pod's volume);
                               for the user's own job (trainer.script / module / command) only the proxy routes
- Service    <name>-nodes      headless; gives pod <name>-nodes-0 the stable name the c10d rendezvous uses
- Job        <name>-nodes      Indexed; NODE_RANK = completion index; torchrun + trainer (or the user's script,
                               run in --workdir of the user's image) per pod, with the CHAOSBENCH_* env of
                               docs/byo-trainer.md so a script's checkpoint dir and rendezvous resolve alike
- etcd Deployment + Service    when the rendezvous backend is etcd / etcd-v3
- proxy Deployment + Service   Toxiproxy-compatible; trainers reach etcd and S3 through it, so those
                               links can be degraded exactly as in the local/docker clusters
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from chaosbench.cluster.launch import REF, hosts_store, warm_start_argv
from chaosbench.doctor.target import DoctorInputError, apply_overrides
from chaosbench.reference_trainer import DEFAULT_CONFIG
from chaosbench.scenario.loader import resolve_trainer_config

C10D_PORT = 29400
MASTER_PORT = 29500
ETCD_PORT = 2379
PROXY_API_PORT = 8474
PROXY_ETCD_PORT = 22379
PROXY_S3_PORT = 29000
NVME_MOUNT = "/var/lib/chaosbench/nvme"
EVENTS_MOUNT = "/var/lib/chaosbench/events"
CONFIG_MOUNT = "/etc/chaosbench"
SHM_MOUNT = "/dev/shm"
DEFAULT_IMAGE = "chaosbench/trainer:latest"
WORKDIR = "/workspace"   # where the user's image holds their project (as the docker backend mounts it)


class ExportError(DoctorInputError):
    pass


def dns_name(s: str) -> str:
    """RFC 1123 label: lowercase alphanumerics and '-', at most 40 chars here to leave room for suffixes."""
    out = re.sub(r"[^a-z0-9-]+", "-", s.lower()).strip("-")[:40].strip("-")
    if not out:
        raise ExportError(f"scenario name {s!r} gives no valid Kubernetes name; set 'name' to letters/digits")
    return out


def _labels(name: str, component: str) -> dict:
    return {"app.kubernetes.io/name": "chaosbench", "app.kubernetes.io/instance": name,
            "app.kubernetes.io/component": component}


def _env(d: dict) -> list[dict]:
    return [{"name": k, "value": str(v)} for k, v in d.items()]


def _service(name: str, component: str, ports: dict[str, int]) -> dict:
    spec = {"selector": _labels(name, component),
            "ports": [{"name": n, "port": p, "targetPort": p, "protocol": "TCP"} for n, p in ports.items()]}
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{name}-{component}", "labels": _labels(name, component)}, "spec": spec}


def _deployment(name: str, component: str, container: dict, volumes: list | None = None) -> dict:
    labels = _labels(name, component)
    pod = {"containers": [container]}
    if volumes:
        pod["volumes"] = volumes
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": f"{name}-{component}", "labels": labels},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod}}}


def load_scenario(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ExportError(f"{path}: scenario file not found")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ExportError(f"{path}: not valid YAML ({e})") from e
    if not isinstance(data, dict) or not isinstance(data.get("cluster", {}), dict):
        raise ExportError(f"{path}: expected a mapping with a 'cluster' mapping")
    data["_file"] = str(p)
    return data


def _user_job(trainer: dict) -> bool:
    return any(trainer.get(k) for k in ("command", "script", "module"))


def _trainer_config(sc: dict) -> dict:
    trainer = sc.get("trainer") or {}
    if _user_job(trainer):
        return {}
    cfg_path = trainer.get("config") or DEFAULT_CONFIG
    p = resolve_trainer_config(cfg_path, Path(sc["_file"]))   # cwd, the scenario's folder, chaosbench's own
    if p is None:
        raise ExportError(f"{sc['_file']}: trainer.config {cfg_path!r} not found; give a path that exists")
    cfg = yaml.safe_load(p.read_text()) or {}
    apply_overrides(cfg, trainer.get("overrides") or {}, f"{sc['_file']}: trainer.overrides")
    cfg.setdefault("checkpoint", {})["nvme_dir"] = NVME_MOUNT   # the pod's size-limited volume
    return cfg


def render(sc: dict, image: str | None = None, etcd_image: str = "quay.io/coreos/etcd:v3.5.17",
           proxy_image: str | None = None, namespace: str | None = None, workdir: str = WORKDIR) -> list[dict]:
    """The manifests for scenario dict `sc` (as loaded by `load_scenario`). `image`: the trainer image
    (default: the scenario's trainer.image, else chaosbench/trainer:latest); `workdir`: where that image
    holds the user's project, for trainer.script / module."""
    image = image or (sc.get("trainer") or {}).get("image") or DEFAULT_IMAGE
    user = _user_job(sc.get("trainer") or {})
    name = dns_name(str(sc.get("name") or Path(sc["_file"]).stem))
    cl = sc.get("cluster") or {}
    elastic = cl.get("elastic") or {}
    nodes = int(cl.get("nodes", 2))
    lo, hi = int(elastic.get("min_nodes", nodes)), int(elastic.get("max_nodes", nodes))
    procs = int(cl.get("procs_per_node", 1))
    backend = cl.get("rendezvous", "c10d")
    if backend not in ("c10d", "c10d-links", "etcd", "etcd-v2", "etcd-v3"):
        raise ExportError(f"{sc['_file']}: cluster.rendezvous {backend!r} invalid; choose c10d, c10d-links, etcd-v3 or etcd")
    gpus = int(cl.get("gpus_per_node") or cl.get("gpus") or 0)
    run_id = name
    cfg = _trainer_config(sc)
    s3 = (cfg.get("checkpoint") or {}).get("s3") or {}
    objs: list[dict] = []

    # proxy routes (POST /populate shape): etcd always when used, S3 when the S3 tier is on
    routes = []
    if not hosts_store(backend):
        routes.append({"name": "etcd", "listen": f"0.0.0.0:{PROXY_ETCD_PORT}",
                       "upstream": f"{name}-etcd:{ETCD_PORT}", "enabled": True})
    if s3.get("enabled") and s3.get("endpoint_url"):
        up = re.sub(r"^https?://", "", s3["endpoint_url"]).split("/")[0]
        routes.append({"name": "s3", "listen": f"0.0.0.0:{PROXY_S3_PORT}", "upstream": up, "enabled": True})
        cfg["checkpoint"]["s3"]["endpoint_url"] = f"http://{name}-proxy:{PROXY_S3_PORT}"

    config_data = {"trainer.yaml": yaml.safe_dump(cfg, sort_keys=False)} if cfg else {}
    config_data["proxies.json"] = json.dumps(routes, indent=2)
    objs.append({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": f"{name}-config", "labels": _labels(name, "config")}, "data": config_data})

    # headless Service: pod <name>-nodes-<i> resolves as <name>-nodes-<i>.<name>-nodes, even before it is
    # ready (publishNotReadyAddresses), which c10d needs: node 0 hosts the store before anyone is "ready"
    svc = _service(name, "nodes", {"c10d": C10D_PORT, "master": MASTER_PORT})
    svc["spec"].update(clusterIP="None", publishNotReadyAddresses=True)
    objs.append(svc)

    if hosts_store(backend):
        endpoint = f"{name}-nodes-0.{name}-nodes:{C10D_PORT}"
    else:
        endpoint = f"{name}-proxy:{PROXY_ETCD_PORT}"
        etcd_cmd = ["etcd", "--name=etcd", "--data-dir=/var/lib/etcd",
                    f"--listen-client-urls=http://0.0.0.0:{ETCD_PORT}",
                    f"--advertise-client-urls=http://{name}-etcd:{ETCD_PORT}"]
        if backend in ("etcd", "etcd-v2"):
            etcd_cmd.append("--enable-v2")   # torchrun's etcd backends speak the v2 API (etcd <= 3.5)
        objs.append(_service(name, "etcd", {"client": ETCD_PORT}))
        objs.append(_deployment(name, "etcd", {
            "name": "etcd", "image": etcd_image, "command": etcd_cmd,
            "ports": [{"containerPort": ETCD_PORT, "name": "client"}],
            "readinessProbe": {"httpGet": {"path": "/health", "port": ETCD_PORT}, "periodSeconds": 2},
            "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}]},
            [{"name": "data", "emptyDir": {}}]))

    proxy_ports = {"api": PROXY_API_PORT, **{r["name"]: int(r["listen"].rsplit(":", 1)[1]) for r in routes}}
    if proxy_image:   # a real Toxiproxy image: its own flags
        proxy_cmd = ["/toxiproxy", "-host=0.0.0.0", f"-port={PROXY_API_PORT}", f"-config={CONFIG_MOUNT}/proxies.json"]
    else:
        proxy_cmd = ["python", "-m", "chaosbench.proxy", "--host", "0.0.0.0", "--port", str(PROXY_API_PORT),
                     "--config", f"{CONFIG_MOUNT}/proxies.json"]
    objs.append(_service(name, "proxy", proxy_ports))
    objs.append(_deployment(name, "proxy", {
        # the user's own image need not hold chaosbench: its proxy then runs from chaosbench's image
        "name": "proxy", "image": proxy_image or (DEFAULT_IMAGE if user else image),
        "command": proxy_cmd,
        "ports": [{"containerPort": p, "name": n} for n, p in proxy_ports.items()],
        "readinessProbe": {"httpGet": {"path": "/version", "port": PROXY_API_PORT}, "periodSeconds": 2},
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True}]},
        [{"name": "config", "configMap": {"name": f"{name}-config"}}]))

    objs.append(_job(name, sc, cfg, nodes, lo, hi, procs, backend, endpoint, run_id, gpus, image,
                     workdir if user else None))
    if namespace:
        for o in objs:
            o["metadata"]["namespace"] = namespace
    return objs


def _job(name, sc, cfg, nodes, lo, hi, procs, backend, endpoint, run_id, gpus, image, workdir) -> dict:
    cl = sc.get("cluster") or {}
    elastic = cl.get("elastic") or {}
    timeouts = cl.get("rdzv_timeouts") or {}
    rdzv_conf = ",".join(f"{k}={v}" for k, v in timeouts.items())
    trainer = sc.get("trainer") or {}
    torchrun = ["torchrun", f"--nnodes={lo}:{hi}", f"--nproc-per-node={procs}", f"--rdzv-backend={backend}",
                f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}",
                f"--max-restarts={int(elastic.get('max_restarts', 10))}"]
    worker = ["-m", "trainer.train", "--config", f"{CONFIG_MOUNT}/trainer.yaml"]
    if trainer.get("command"):
        command = [_k8s_refs(a) for a in trainer["command"]]
    elif trainer.get("script") or trainer.get("module"):   # the user's job, under torchrun as the backends run it
        job = [trainer["script"]] if trainer.get("script") else ["-m", trainer["module"]]
        command = torchrun + [*job, *(_k8s_refs(str(a)) for a in trainer.get("args") or [])]
    elif cl.get("warm_start", True):   # as the cluster backends run it
        command = warm_start_argv("python", torchrun, worker)
    else:
        command = torchrun + worker
    env = [{"name": "NODE_RANK", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}]
    env += _env({
        "CHAOSBENCH_NODE": "node-$(NODE_RANK)", "CHAOSBENCH_RUN_ID": run_id, "CHAOSBENCH_EVENTS_DIR": EVENTS_MOUNT,
        # the pod network's interface; fail fast instead of gloo's 30-minute default on a hung peer
        "GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        **({"PET_RDZV_CONF": rdzv_conf} if rdzv_conf else {}),   # torchrun reads --rdzv-conf from here
        # what every launched command gets (docs/byo-trainer.md), with the pod's volumes as NVMe and memory
        "CHAOSBENCH_NVME_DIR": NVME_MOUNT, "CHAOSBENCH_MEMORY_DIR": SHM_MOUNT,
        "CHAOSBENCH_CHECKPOINT_DIR": f"{SHM_MOUNT if trainer.get('checkpoint_dir') == 'memory' else NVME_MOUNT}/checkpoints",
        "CHAOSBENCH_RDZV_BACKEND": backend, "CHAOSBENCH_RDZV_ENDPOINT": endpoint, "CHAOSBENCH_RDZV_CONF": rdzv_conf,
        "CHAOSBENCH_NNODES": f"{lo}:{hi}", "CHAOSBENCH_NPROC_PER_NODE": procs,
        **(cl.get("env") or {}),
    })
    env += [{"name": k, "valueFrom": {"secretKeyRef": {"name": f"{name}-s3", "key": k, "optional": True}}}
            for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")]
    container = {
        "name": "trainer", "image": image, "command": command, "env": env,
        "ports": [{"containerPort": C10D_PORT, "name": "c10d"}, {"containerPort": MASTER_PORT, "name": "master"}],
        "volumeMounts": [{"name": "shm", "mountPath": SHM_MOUNT}, {"name": "nvme", "mountPath": NVME_MOUNT},
                         {"name": "events", "mountPath": EVENTS_MOUNT},
                         {"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True}],
    }
    if workdir:   # the user's job runs in their project, inside their image
        container["workingDir"] = workdir
    shm_mb, nvme_mb = int(cl.get("shm_size_mb", 512)), int(cl.get("nvme_size_mb", 256))
    # tmpfs counts against the pod's memory: the limit must sit above the shm size
    container["resources"] = {"limits": {"memory": f"{shm_mb + 2048}Mi"}, "requests": {"memory": "1Gi"}}
    if gpus:
        container["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
    labels = _labels(name, "nodes")
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{name}-nodes", "labels": labels},
        "spec": {
            "completionMode": "Indexed", "completions": nodes, "parallelism": nodes,
            "backoffLimit": int(elastic.get("max_restarts", 10)) * nodes,
            "template": {"metadata": {"labels": labels}, "spec": {
                "subdomain": f"{name}-nodes",   # pod DNS <job>-<index>.<subdomain>
                "restartPolicy": "OnFailure",
                "containers": [container],
                "volumes": [
                    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_mb}Mi"}},
                    {"name": "nvme", "emptyDir": {"sizeLimit": f"{nvme_mb}Mi"}},
                    {"name": "events", "emptyDir": {}},
                    {"name": "config", "configMap": {"name": f"{name}-config"}},
                ]}}}}


def _k8s_refs(arg: str) -> str:
    """$CHAOSBENCH_X / ${CHAOSBENCH_X} as the kubelet expands variables in a command: $(CHAOSBENCH_X)."""
    return REF.sub(lambda m: f"$({m.group(1) or m.group(2)})", arg)


class _Dumper(yaml.SafeDumper):
    """No &anchors/*aliases (shared label dicts), multi-line strings as readable | blocks."""
    def ignore_aliases(self, data):
        return True


_Dumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s,
                                                             style="|" if "\n" in s else None))


def dump(obj: dict) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False)


def to_yaml(objs: list[dict]) -> str:
    return "---\n".join(dump(o) for o in objs)


def write(objs: list[dict], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, o in enumerate(objs):
        p = out_dir / f"{i:02d}-{o['kind'].lower()}-{o['metadata']['name']}.yaml"
        p.write_text(dump(o))
        paths.append(p)
    return paths


