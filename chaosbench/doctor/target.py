"""What the doctor checks: a training setup described by a scenario file and/or the environment.

Scenario and trainer config files are read as plain YAML dicts, so the doctor keeps working on a
file the scenario engine would reject (explaining a broken setup is the point).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from chaosbench.scenario.loader import resolve_trainer_config

ETCD_BACKENDS = ("etcd", "etcd-v2", "etcd-v3")


class DoctorInputError(ValueError):
    """A file or flag the doctor was given is unusable (CLI exit code 2)."""


@dataclass
class Target:
    source: str                                  # "env" or "scenario"
    env: dict[str, str] = field(default_factory=dict)
    scenario_file: str | None = None
    nodes: int | None = None
    procs_per_node: int | None = None
    min_nodes: int | None = None
    max_nodes: int | None = None
    rendezvous: str | None = None                # c10d | etcd | etcd-v2 | etcd-v3 | static
    rdzv_endpoint: str | None = None             # host:port
    run_id: str | None = None
    etcd_endpoint: str | None = None             # http://host:port
    trainer_config_file: str | None = None
    trainer_config: dict = field(default_factory=dict)
    wants_gpu: bool = False
    wait_s: float = 0.0                          # master-readiness wait

    @property
    def checkpoint(self) -> dict:
        return self.trainer_config.get("checkpoint") or {}

    @property
    def model(self) -> dict:
        """The reference trainer keeps it under training.model; a top-level model section also works."""
        return (self.trainer_config.get("training") or {}).get("model") or self.trainer_config.get("model") or {}


def _load_yaml(path: str, what: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise DoctorInputError(f"{path}: {what} file not found; pass an existing file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise DoctorInputError(f"{path}: not valid YAML ({e}); fix the syntax") from e
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise DoctorInputError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def _int(value, where: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise DoctorInputError(f"{where}: expected an integer, got {value!r}") from None


def apply_overrides(config: dict, overrides: dict, where: str) -> dict:
    """Apply scenario overrides of the form {"section.field": value} to a trainer config dict."""
    for key, value in (overrides or {}).items():
        parts = str(key).split(".")
        node = config
        for part in parts[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise DoctorInputError(f"{where}: override '{key}' goes through non-mapping '{part}'")
            node = nxt
        node[parts[-1]] = value
    return config


def _parse_nnodes(value: str | None) -> tuple[int | None, int | None]:
    if not value:
        return None, None
    lo, _, hi = value.partition(":")
    return _int(lo, "PET_NNODES"), _int(hi or lo, "PET_NNODES")


def from_env(env: dict[str, str] | None = None, config_file: str | None = None) -> Target:
    env = dict(os.environ if env is None else env)
    lo, hi = _parse_nnodes(env.get("PET_NNODES"))
    t = Target(source="env", env=env, min_nodes=lo, max_nodes=hi,
               nodes=hi, procs_per_node=_int(env.get("PET_NPROC_PER_NODE") or env.get("LOCAL_WORLD_SIZE"),
                                             "PET_NPROC_PER_NODE/LOCAL_WORLD_SIZE"),
               rendezvous=env.get("PET_RDZV_BACKEND"), rdzv_endpoint=env.get("PET_RDZV_ENDPOINT"),
               run_id=env.get("CHAOSBENCH_RUN_ID") or env.get("TORCHELASTIC_RUN_ID") or env.get("PET_RDZV_ID"),
               etcd_endpoint=env.get("CHAOSBENCH_ETCD_ENDPOINT"))
    config_file = config_file or env.get("CHAOSBENCH_TRAINER_CONFIG")
    if config_file:
        t.trainer_config_file = config_file
        t.trainer_config = _load_yaml(config_file, "trainer config")
    _derive_etcd(t)
    return t


def from_scenario(path: str, env: dict[str, str] | None = None, config_file: str | None = None) -> Target:
    data = _load_yaml(path, "scenario")
    cluster = data.get("cluster") or {}
    if not isinstance(cluster, dict):
        raise DoctorInputError(f"{path}: field 'cluster' must be a mapping")
    elastic = cluster.get("elastic") or {}
    nodes = _int(cluster.get("nodes"), f"{path}: cluster.nodes")
    t = Target(source="scenario", env=dict(os.environ if env is None else env), scenario_file=path,
               nodes=nodes, procs_per_node=_int(cluster.get("procs_per_node", 1), f"{path}: cluster.procs_per_node"),
               min_nodes=_int(elastic.get("min_nodes", nodes), f"{path}: cluster.elastic.min_nodes"),
               max_nodes=_int(elastic.get("max_nodes", nodes), f"{path}: cluster.elastic.max_nodes"),
               rendezvous=cluster.get("rendezvous", "c10d"),
               run_id=data.get("run_id") or data.get("name"),
               wants_gpu=bool(cluster.get("gpus") or cluster.get("gpus_per_node")))
    for k, v in (cluster.get("env") or {}).items():   # scenario env (e.g. NCCL_SOCKET_IFNAME) wins
        t.env[str(k)] = str(v)
    trainer = data.get("trainer") or {}
    config_file = config_file or trainer.get("config")
    if config_file:
        # as the runner finds it: the working directory, the scenario's folder, then chaosbench's own
        found = resolve_trainer_config(config_file, Path(path))
        resolved = str(found) if found is not None else config_file
        t.trainer_config_file = resolved
        t.trainer_config = _load_yaml(resolved, f"trainer config (from {path}: trainer.config)")
        apply_overrides(t.trainer_config, trainer.get("overrides") or {}, f"{path}: trainer.overrides")
    _derive_etcd(t)
    return t


def _derive_etcd(t: Target) -> None:
    """With an etcd rendezvous backend, the rendezvous endpoint *is* etcd."""
    if not t.etcd_endpoint and t.rendezvous in ETCD_BACKENDS and t.rdzv_endpoint:
        ep = t.rdzv_endpoint.split(",")[0]
        t.etcd_endpoint = ep if "://" in ep else f"http://{ep}"


def split_hostport(endpoint: str, default_port: int | None = None) -> tuple[str, int | None]:
    ep = endpoint.split("://", 1)[-1].split("/", 1)[0].split(",")[0]
    if ep.startswith("["):  # [ipv6]:port
        host, _, rest = ep[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, sep, port = ep.rpartition(":")
        if not sep:
            host, port = ep, ""
    return host, (int(port) if port.isdigit() else default_port)
