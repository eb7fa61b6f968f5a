"""CPU and memory primitives: a straggler (throttle_node) and memory pressure (squeeze_memory).
throttle_node is written once as an in-node SIGSTOP/SIGCONT duty cycle (node/procs.py); docker
overrides it with a cgroup quota. squeeze_memory needs a memory cgroup per node: docker's own
(docker/memory.py)."""
from __future__ import annotations

import subprocess

from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.node import scripts
from chaosbench.cluster.primitives import backend_primitive, primitive

NO_CGROUP = ("its nodes have no memory cgroup of their own (a balloon would squeeze the whole host); the docker "
             "backend has it")


class CpuMemoryPrimitives:
    @primitive(via=("_start_in_node", "_run_in_node"))
    def throttle_node(self, node: str, cpu_fraction: float) -> None:
        """A straggler: the node runs `cpu_fraction` of the time (a SIGSTOP/SIGCONT duty cycle over
        its processes, run by an in-node loop until unthrottle_node). A backend with cgroups overrides it."""
        if not 0 < cpu_fraction <= 1:
            raise ClusterError(f"throttle_node cpu_fraction={cpu_fraction}: must be in (0, 1]")
        self._check_node(node)
        self._end_throttle(node)
        self._throttles[node] = self._start_in_node(node, scripts.PROCS, "throttle", str(cpu_fraction),
                                                    *self._marker_args(node))

    @primitive(via=("_start_in_node", "_run_in_node"))
    def unthrottle_node(self, node: str) -> None:
        self._check_node(node)
        self._end_throttle(node)
        # the loop resumes the node as it ends; a loop that was killed instead would leave it stopped
        self._run_in_node(node, scripts.PROCS, "node", "CONT", *self._marker_args(node))

    def _end_throttle(self, node: str) -> None:
        loop = self._throttles.pop(node, None)
        if loop is None or loop.poll() is not None:
            return
        loop.terminate()   # srun forwards SIGTERM to its step's task
        try:
            loop.wait(timeout=15)
        except subprocess.TimeoutExpired:
            loop.kill()
            loop.wait(timeout=10)

    @backend_primitive(why=NO_CGROUP)
    def squeeze_memory(self, node: str, limit_mb: int | None = None, fraction: float | None = None) -> dict:
        """Leave the node limit_mb MiB (or fraction of what its processes hold now) until the kernel
        OOM-kills its biggest process; what was set ({'limit_mb', 'held_mb', 'oom_kill', ...}).
        Needs a memory cgroup per node: a balloon on a shared host would squeeze the whole host."""

    @backend_primitive(why=NO_CGROUP)
    def release_memory(self, node: str) -> dict:
        """Restore the node's own memory limit; {'oom_kills': kills since squeeze_memory (None: unknown)}."""

    def memory_kills(self, node: str) -> int | None:
        """OOM kills on the node since squeeze_memory, read while it holds (None: no squeeze, or no
        count to read). A read, not a primitive: what the runner asks to heal the squeeze early."""
        return None
