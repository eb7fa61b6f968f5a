"""A fake cluster for runner unit tests: threads that write the event stream a trainer would.

It models just enough of an elastic run: every node steps in lockstep; killing a node makes the
survivors restart (new pids) after a short pause and restore the newest memory snapshot.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from chaosbench.cluster.base import Cluster
from chaosbench.cluster.errors import ClusterError


class FakeCluster(Cluster):
    backend = "fake"
    supported_faults = frozenset({"kill_node", "start_node", "pause_node", "unpause_node"})

    def __init__(self, spec, step_s=0.01, snapshot_every=5, hang_after_kill=False, fail_up=False,
                 fatal_at_down=False):
        super().__init__(spec)
        self.fatal_at_down = fatal_at_down   # a peer's worker failing as the teardown kills its partner
        self.step_s, self.every, self.hang, self.fail_up = step_s, snapshot_every, hang_after_kill, fail_up
        self.alive = {f"node-{i}": True for i in range(spec.nodes)}
        self.calls: list[str] = []
        self._stop = threading.Event()
        self._thread = None
        self._killed = threading.Event()

    @property
    def events_dir(self) -> Path:
        return Path(self.spec.run_dir) / "events"

    proxy_api = "http://127.0.0.1:9"
    s3_endpoint = "http://127.0.0.1:9"

    def up(self):
        self.calls.append("up")
        if self.fail_up:
            raise ClusterError("etcd did not become healthy in 30 s")

    def start_training(self):
        self.calls.append("start_training")
        self._thread = threading.Thread(target=self._train, daemon=True)
        self._thread.start()

    def node_names(self):
        return list(self.alive)

    def node_status(self, node):
        return "running" if self.alive[node] else "exited:-9"

    def collect(self):
        self.calls.append("collect")
        (Path(self.spec.run_dir) / "exits.json").write_text(json.dumps({n: self.node_status(n) for n in self.alive}))

    def down(self):
        self.calls.append("down")
        self._stop.set()
        if self._thread:
            self._thread.join(5)
        if self.fatal_at_down:
            self._emit("node-0", 0, 2, 0, 7, "fatal", error="Connection reset by peer")
        self.torn_down = True

    def kill_node(self, node):
        self.calls.append(f"kill_node {node}")
        self.alive[node] = False
        self._killed.set()

    def start_node(self, node):
        self.calls.append(f"start_node {node}")

    def pause_node(self, node):
        self.calls.append(f"pause_node {node}")

    def unpause_node(self, node):
        self.calls.append(f"unpause_node {node}")

    def _emit(self, node, rank, world, restart, pid, event, **kw):
        with open(self.events_dir / f"events-{node}-local0.jsonl", "a") as f:
            f.write(json.dumps({"ts": time.time(), "event": event, "node": node, "rank": rank, "local_rank": 0,
                                "world_size": world, "restart_count": restart, "pid": pid, **kw}) + "\n")

    def _train(self):
        self.events_dir.mkdir(parents=True, exist_ok=True)
        step, restart, snap = 0, 0, 0
        while not self._stop.is_set():
            nodes = [n for n, a in self.alive.items() if a]
            if self._killed.is_set():
                self._killed.clear()
                for n in nodes:
                    self._emit(n, 0, len(nodes) + 1, restart, 100 + restart, "fatal", error="peer closed")
                if self.hang:
                    self._stop.wait()
                    return
                time.sleep(0.2)
                restart += 1
                for r, n in enumerate(nodes):
                    pid = 1000 * restart + r
                    self._emit(n, r, len(nodes), restart, pid, "phase", phase="rendezvous")
                    self._emit(n, r, len(nodes), restart, pid, "checkpoint_loaded", tier="memory", step=snap,
                               source="local", duration_s=0.01, checksum_ok=True, bytes=10)
                step = snap
            step += 1
            for r, n in enumerate(nodes):
                self._emit(n, r, len(nodes), restart, 1000 * restart + r if restart else 100, "step",
                           step=step, loss=3.0 - step * 0.001)
            if step % self.every == 0:
                snap = step
                for r, n in enumerate(nodes):
                    self._emit(n, r, len(nodes), restart, 1000 * restart + r if restart else 100, "checkpoint_saved",
                               tier="memory", step=step, bytes=10)
            time.sleep(self.step_s)
