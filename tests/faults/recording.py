"""A cluster that records which fault primitives a fault calls (and with what), doing nothing else."""
from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

from chaosbench.cluster.base import Cluster, fault_primitives
from chaosbench.faults import FaultContext, FaultLog, get_fault

PRIMITIVES = frozenset(fault_primitives())


class RecordingCluster:
    """Stands in for a backend. Every fault primitive (chaosbench/cluster/primitives/) records its call;
    besides them a fault may read only node_names(), proxy_api and s3_endpoint, start_nodes()
    (the base's group start, which calls start_node per node), and spec (the cluster's shape)."""

    start_nodes = Cluster.start_nodes

    def __init__(self, root: Path, proxy_api: str = "http://127.0.0.1:9"):
        self.root, self.proxy_api, self.s3_endpoint = Path(root), proxy_api, "http://127.0.0.1:9"
        self.calls: list[tuple[str, tuple]] = []
        self.spec = SimpleNamespace(run_id="r", nodes=2, procs_per_node=1)

    def node_names(self) -> list[str]:
        return ["node-0", "node-1"]

    @property
    def called(self) -> set[str]:
        return {name for name, _ in self.calls}

    def __getattr__(self, name: str):
        if name not in PRIMITIVES:
            raise AttributeError(f"a fault used cluster.{name}: faults may call only the cluster's fault "
                                 f"primitives and node_names/proxy_api/s3_endpoint/start_nodes/spec")

        def primitive(*args, **kwargs):
            self.calls.append((name, args + tuple(kwargs.values())))
            return self._answer(name, args)
        return primitive

    def _answer(self, name: str, args: tuple):
        if name in ("nvme_dir", "shm_dir"):   # a node directory holding one checkpoint to corrupt
            d = self.root / name / args[0]
            (d / "step-10").mkdir(parents=True, exist_ok=True)
            (d / "step-10" / "state.pt").write_bytes(b"x" * 64)
            return d
        if name in ("add_node", "add_standby"):
            return "node-2"
        if name == "send_job_command":
            return self.root / "inject" / f"{args[0]}.json"
        return None


def make_fault(kind: str, params: dict, cluster, log_path: Path, fid: str = "f1"):
    cls = get_fault(kind)
    ctx = FaultContext(cluster=cluster, log=FaultLog(log_path), rng=random.Random(0))
    return cls(fid, cls.Params.model_validate(params), ctx)
