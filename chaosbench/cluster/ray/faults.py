"""The Ray backend's own fault primitives on the containerised cluster, by process inside a container.

A training worker is a Ray actor process whose title is `ray::RayTrainWorker...` (Ray sets it); a
node's raylet is the `raylet` process under its `ray start --block`. Signals go through `docker
exec kill`, so the node's container (and its NVMe, /dev/shm and other processes) stays.
"""
from __future__ import annotations

from chaosbench.cluster.docker.cli import compose, docker
from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.ray.compose import HEAD

TRAIN_WORKER = "ray::RayTrainWorker"


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

    def kill_head(self) -> None:
        docker("kill", "-s", "KILL", self.plan.container(HEAD))

    def start_head(self) -> None:
        compose(self.project, self._files, "start", HEAD)
