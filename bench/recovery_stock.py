"""The stock baseline for bench/recovery.py: two local torchrun agents with default rendezvous
settings running bench/toy_ddp.py. Offers the few Cluster methods the bench calls
(up/start_training/kill_node/pause_node/down, events_dir), so both sides run the same loop.

Each node's processes carry marker variables, so a kill finds agent and workers whatever session
they moved to (chaosbench.cluster.proctree), exactly as the local cluster backend kills a node.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from chaosbench.cluster import proctree
from chaosbench.cluster.lifecycle import UpDown
from chaosbench.services.ports import free_port

REPO = Path(__file__).resolve().parents[1]
MARKER = "CHAOSBENCH_BENCH_STOCK"


class StockCluster(UpDown):
    backend = "local"

    def __init__(self, run_dir: Path, rendezvous: str, nodes: int = 2, step_sleep: float = 0.02,
                 ckpt_every: int = 5, liveness: bool = False):
        self.run_dir, self.rdzv, self.nodes = Path(run_dir), rendezvous, nodes
        self.liveness = liveness
        self.step_sleep, self.ckpt_every = step_sleep, ckpt_every
        self.token = uuid.uuid4().hex
        self.run_id = f"stock{self.token[:10]}"
        self.etcd = None
        self._procs: dict[str, subprocess.Popen] = {}
        self._endpoint = ""

    @property
    def events_dir(self) -> Path:
        return self.run_dir / "events"

    def node_names(self) -> list[str]:
        return [f"node-{i}" for i in range(self.nodes)]

    def up(self) -> None:
        for d in ("events", "logs", "ckpt"):
            (self.run_dir / d).mkdir(parents=True, exist_ok=True)
        if self.rdzv == "c10d":
            self._endpoint = f"127.0.0.1:{free_port()}"
        else:   # etcd-v3 (chaosbench's torchrun backend) or etcd (v2, torch's own)
            from chaosbench.services.etcd_server import EtcdServer
            self.etcd = EtcdServer(self.run_dir / "etcd-data", host="127.0.0.1", name=f"etcd-{self.run_id}")
            self.etcd.start()
            self._endpoint = self.etcd.endpoint

    def _argv(self, node: str) -> list[str]:
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1:2", "--nproc-per-node=1",
                f"--rdzv-backend={self.rdzv}", f"--rdzv-endpoint={self._endpoint}", f"--rdzv-id={self.run_id}",
                "--max-restarts=10"]
        if self.rdzv == "c10d":
            # Not a tuning: on one machine both agents match the endpoint host; name the store's
            # host so the killed node (node-1) is never the one holding the rendezvous store.
            argv.append(f"--rdzv-conf=is_host={'true' if node == 'node-0' else 'false'}")
        elif self.rdzv == "etcd-v3" and not self.liveness:
            # The baseline is torch's dynamic rendezvous as shipped: polling, no liveness leases
            # (chaosbench's etcd-v3 backend turns them on by default).
            argv.append("--rdzv-conf=liveness_ttl=0")
        return argv + [str(REPO / "bench" / "toy_ddp.py"), "--ckpt-dir", str(self.run_dir / "ckpt"),
                       "--ckpt-every", str(self.ckpt_every), "--step-sleep", str(self.step_sleep)]

    def start_training(self) -> None:
        for node in self.node_names():
            env = {**os.environ, MARKER: self.token, "CHAOSBENCH_NODE": node, "CHAOSBENCH_RUN_ID": self.run_id,
                   "CHAOSBENCH_EVENTS_DIR": str(self.events_dir), "PYTHONUNBUFFERED": "1",
                   "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
            with open(self.run_dir / "logs" / f"{node}.log", "ab") as out:
                self._procs[node] = subprocess.Popen(self._argv(node), env=env, cwd=REPO, stdout=out,
                                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                     start_new_session=True)

    def _markers(self, node: str | None = None) -> dict[str, str]:
        return {MARKER: self.token, **({"CHAOSBENCH_NODE": node} if node else {})}

    def kill_node(self, node: str) -> None:
        proctree.kill_all(self._markers(node))

    def pause_node(self, node: str) -> None:
        proctree.signal_all(proctree.find(self._markers(node)), signal.SIGSTOP)

    def down(self) -> None:
        try:
            proctree.kill_all(self._markers())
            for p in self._procs.values():
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if self.etcd is not None:
                self.etcd.stop()
            shutil.rmtree(self.run_dir / "etcd-data", ignore_errors=True)
