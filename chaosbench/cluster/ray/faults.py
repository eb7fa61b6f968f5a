"""The Ray backend's own fault primitives on the containerised cluster, by process inside a container.

A training worker is a Ray actor process whose title is `ray::RayTrainWorker...` (Ray sets it); a
node's raylet is the `raylet` process under its `ray start --block`. Signals go through `docker
exec kill`, so the node's container (and its NVMe, /dev/shm and other processes) stays.

A node's object store is filled from the head, through Ray: a small job (object_store.py under
`docker exec -i`) whose actor is pinned to the node puts objects there and holds them while the job's
stdin is open; closing it frees them. Its output (what it put, what the node's store reported) is
`logs/<node>-fill_object_store.log` and the fault log's records.
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from chaosbench.cluster.docker import cli as docker_cli
from chaosbench.cluster.docker.cli import compose, docker
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.ray.compose import HEAD, head_ip

TRAIN_WORKER = "ray::RayTrainWorker"
OBJECT_STORE = (Path(__file__).with_name("object_store.py")).read_text()
FILL_START_S = 240   # a Python worker on a loaded 2-core node, then the puts and the spilling they cause


class RayFaults:
    def _pids(self, node: str, pattern: str) -> list[str]:
        """Pids in `node`'s container whose command line contains `pattern`, oldest first."""
        out = docker("exec", self._node(node), "pgrep", "-f", "--", pattern, check=False)
        return sorted(out.split(), key=int)

    def _train_worker(self, node: str, local_rank: int) -> str:
        pids = self._pids(node, TRAIN_WORKER)
        if local_rank >= len(pids):
            raise ClusterError(f"{node}: no Ray Train worker #{local_rank} (found {len(pids)}: {pids}); the "
                               f"group may be restarting")
        return pids[local_rank]   # ranks by start order on the node: Ray numbers a node's workers as it starts them

    def _signal_worker(self, node: str, local_rank: int, sig: str) -> list[str]:
        pid = self._train_worker(node, local_rank)
        docker("exec", self._node(node), "kill", f"-{sig}", pid)
        return [pid]

    def kill_raylet(self, node: str) -> None:
        pids = self._pids(node, "/raylet")
        if not pids:
            raise ClusterError(f"{node}: no raylet is running")
        docker("exec", self._node(node), "kill", "-KILL", *pids)

    def _cut_targets(self, node: str, peers: list[str] | None) -> list[str]:
        """As docker's, and with no peers named the head too: a partitioned Ray node is cut off from the GCS,
        which then declares it dead. Naming the peers (`peers: [node-0, node-1]`) leaves the head reachable:
        a partition between workers only, which the GCS does not see (docs/ray.md)."""
        out = super()._cut_targets(node, peers)
        return out + [head_ip(self.plan)] if peers is None else out

    def kill_head(self) -> None:
        docker("kill", "-s", "KILL", self.plan.container(HEAD))

    def start_head(self) -> None:
        compose(self.project, self._files, "start", HEAD)

    # -- the object store ------------------------------------------------------------------
    @property
    def _fillers(self) -> dict[str, tuple[subprocess.Popen, Path, str]]:
        return self.__dict__.setdefault("_store_fillers", {})

    def fill_object_store(self, node: str, mb: int | None = None, fraction: float | None = None) -> dict:
        if node in self._fillers:
            raise ClusterError(f"{node}: its object store is already being filled; heal that fault first")
        ip, tag = self.plan.ip(node), f"chaosbench-fill-{node}-{time.time_ns()}"
        self._node(node)
        log = self.run_dir / "logs" / f"{node}-fill_object_store.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            p = subprocess.Popen(["docker", "exec", "-i", self.plan.container(HEAD), "python", "-c", OBJECT_STORE,
                                  ip, str(mb or 0), str(fraction or 0), tag], stdin=subprocess.PIPE, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True, env=docker_cli._env())
        self._fillers[node] = (p, log, tag)
        line = self._filler_line(p, log, tag, "filled", FILL_START_S)
        if line is None or "error" in line:
            self._end_filler(node)
            why = line["error"] if line else f"no word from it within {FILL_START_S} s"
            raise ClusterError(f"{node}: could not fill its object store: {why} (log: {log})")
        if not line.get("on_node"):
            self._end_filler(node)
            raise ClusterError(f"{node}: the filler actor ran on another node ({line}); nothing was filled there")
        return {k: v for k, v in line.items() if k not in ("tag", "phase")}

    def release_object_store(self, node: str) -> dict:
        """Free what fill_object_store put; what the node's store said after ({'released': {...}})."""
        if node not in self._fillers:
            return {"released": None}
        line = self._end_filler(node)
        return {"released": (line or {}).get("store")}

    def _end_filler(self, node: str) -> dict | None:
        p, log, tag = self._fillers.pop(node)
        try:
            p.stdin.close()   # the job frees its objects and says what the store holds then
        except OSError:
            pass
        line = self._filler_line(p, log, tag, "released", 30)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()   # the docker CLI; the job in the head ends with its stdin, or with the head
            p.wait(timeout=10)
        return line

    @staticmethod
    def _filler_line(p: subprocess.Popen, log: Path, tag: str, phase: str, within_s: float) -> dict | None:
        """The filler `tag`'s JSON line for `phase` (or its error) from its log, waiting up to within_s."""
        deadline = time.monotonic() + within_s
        while True:
            over = p.poll() is not None or time.monotonic() > deadline   # before the read: its last line counts
            for raw in log.read_text(errors="replace").splitlines():
                try:
                    line = json.loads(raw) if raw.startswith("{") else None
                except ValueError:
                    continue
                if isinstance(line, dict) and line.get("tag") == tag and (line.get("phase") == phase or "error" in line):
                    return line
            if over:
                return None
            time.sleep(0.25)

    def _stop(self) -> list[str]:
        for node in list(self._fillers):   # a fill the run left in place goes before the containers do
            self._end_filler(node)
        return super()._stop()
