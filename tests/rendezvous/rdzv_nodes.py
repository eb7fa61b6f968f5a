"""Local torchrun "nodes" for rendezvous tests: each a torchrun agent in its own session, killable
as a whole process tree (torchrun puts its workers in sessions of their own, so killing the
agent's process group alone would leave an orphaned worker)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from chaosbench.cluster import owner

WORKER = Path(__file__).with_name("rdzv_worker.py")

# Short timeouts so a lost node is noticed in seconds (defaults are minutes).
RDZV_CONF = {
    "c10d": "join_timeout=60,last_call_timeout=1,close_timeout=10,keep_alive_interval=1,"
            "keep_alive_max_attempt=3,heartbeat=5",
    "c10d-links": "join_timeout=60,last_call_timeout=1,close_timeout=10,keep_alive_interval=1,"
                  "keep_alive_max_attempt=3,heartbeat=5",
    "etcd-v3": "join_timeout=60,last_call_timeout=1,close_timeout=10,keep_alive_interval=1,"
               "keep_alive_max_attempt=3,heartbeat=5,ttl=120,retry_timeout=30,connect_timeout=5",
    "etcd": "timeout=60,last_call_timeout=1",
    "etcd-v2": "join_timeout=60,last_call_timeout=1,close_timeout=10,keep_alive_interval=1,"
               "keep_alive_max_attempt=3,heartbeat=5,read_timeout=10",
}


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


class Node:
    def __init__(self, name: str, tmp: Path, backend: str, endpoint: str, run_id: str,
                 extra_conf: str = "", nnodes: str = "1:2", env: dict | None = None):
        self.name = name
        self.events = tmp / "events"
        self.stop_file = tmp / "STOP"
        self.events.mkdir(parents=True, exist_ok=True)
        self.log_path = tmp / f"{name}.log"
        conf = RDZV_CONF[backend] + ("," + extra_conf if extra_conf else "")
        self.cmd = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}",
                    "--nproc-per-node=1", f"--rdzv-backend={backend}", f"--rdzv-endpoint={endpoint}",
                    f"--rdzv-id={run_id}", f"--rdzv-conf={conf}", "--max-restarts=10",
                    "--monitor-interval=0.5", "--local-addr=127.0.0.1",
                    str(WORKER), str(self.events), str(self.stop_file)]
        self.env = env or {}
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Node":
        env = dict(os.environ, RDZV_TEST_NODE=self.name, GLOO_SOCKET_IFNAME="lo",
                   PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python", OMP_NUM_THREADS="1",
                   LOGLEVEL="INFO", **self.env)
        # Owner-tagged like a cluster's processes: if pytest dies before the fixture stops them,
        # the next cluster start reaps them (chaosbench.cluster.local.backend.sweep).
        env[owner.OWNER_ENV] = owner.token()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        return self

    def kill(self) -> None:
        """SIGKILL the agent, its workers and anything they started (a node lost)."""
        if self.proc is None or self.proc.returncode is not None:
            return   # never started, or killed and reaped already: its pid may belong to another process now
        pids = [self.proc.pid] + descendants(self.proc.pid)
        for pid in pids:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def events(events_dir: Path) -> list[dict]:
    out = []
    for path in sorted(events_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
    return out


def wait_for(predicate, timeout: float, what: str, nodes: list[Node], poll: float = 0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        for node in nodes:
            if node.proc is not None and node.proc.poll() is not None and node.proc.returncode != 0:
                raise AssertionError(f"{node.name} exited with {node.proc.returncode} while waiting "
                                     f"for {what}:\n{node.log_tail()}")
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{node_logs(nodes)}")


def node_logs(nodes: list[Node]) -> str:
    """Each node's log tail under a '--- name ---' header (test_rendezvous_torchrun parses these sections)."""
    return "\n".join(f"--- {n.name} ---\n{n.log_tail()}" for n in nodes)


def steps_at_world(events_dir: Path, world: int, nodes: set[str], since: float = 0.0,
                   min_steps: int = 3) -> bool:
    """Every node in `nodes` logged >= min_steps collectives at this world size after `since`."""
    seen: dict[str, int] = {}
    for e in events(events_dir):
        if e["world"] == world and e["sum"] == world and e["ts"] >= since and e["node"] in nodes:
            seen[e["node"]] = seen.get(e["node"], 0) + 1
    return all(seen.get(n, 0) >= min_steps for n in nodes)
