"""Node primitives: kill, stop, start, pause, disconnect, wipe, grow, warm standbys. Every backend
implements each one itself (docker: docker/backend.py, local: local/backend.py, Slurm:
slurm/backend.py); here are their contracts and the limit add_node and release_standby share."""
from __future__ import annotations

from pathlib import Path

from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.primitives import backend_primitive


class NodePrimitives:
    @backend_primitive
    def kill_node(self, node: str) -> None:
        """SIGKILL the whole node at once."""

    @backend_primitive
    def stop_node(self, node: str) -> None:
        """Stop the node gracefully."""

    @backend_primitive
    def start_node(self, node: str) -> None:
        """(Re)start a stopped or killed node."""

    def start_nodes(self, nodes: list[str]) -> None:
        """(Re)start several nodes as one group (kill_all's restart). A backend whose start is slow
        per node overrides this to start them together, so all of them make the first rendezvous."""
        for node in nodes:
            self.start_node(node)

    @backend_primitive
    def pause_node(self, node: str) -> None:
        """Freeze every process of the node (SIGSTOP / docker pause)."""

    @backend_primitive
    def unpause_node(self, node: str) -> None:
        """Resume a paused node."""

    @backend_primitive
    def disconnect(self, node: str) -> None:
        """Loud: the node's connections fail at once (heal_network reconnects it)."""

    @backend_primitive
    def wipe_node_storage(self, node: str, nvme: bool = True, shm: bool = True) -> None:
        """Empty the node's NVMe and/or shared memory (a replaced machine's blank disks)."""

    @backend_primitive
    def nvme_dir(self, node: str) -> Path:
        """The node's NVMe directory as a host path, for corruption faults."""

    @backend_primitive
    def shm_dir(self, node: str) -> Path:
        """The node's /dev/shm as a host path."""

    @backend_primitive
    def add_node(self) -> str:
        """Scale up: start one more node; returns its name."""

    # -- warm standbys: a scheduler's replacement machines, booted before they are needed ----------
    @backend_primitive
    def add_standby(self) -> str:
        """Start a node that boots (container, torch imports) but stays out of the rendezvous until
        release_standby: a replacement ready before a loss, held where torchrun's own hot spares
        (spare_nodes, its redundancy list) livelock on torch 2.15 (docs/recovery.md). Returns its name."""

    @backend_primitive
    def release_standby(self, node: str) -> None:
        """Let a standby's agent join the rendezvous (it then counts toward max_nodes)."""

    def _check_room_for_node(self, what: str = "add_node",
                             fix: str = "raise cluster max_nodes or spare_nodes") -> None:
        """add_node's and release_standby's limit (`what` and `fix` name the caller and the way out). Dead
        nodes do not count: a lost node's replacement is a new node (a new name); nor do standbys still
        held (node_names leaves them out)."""
        limit = self.spec.max_nodes + self.spec.spare_nodes
        live = self._live_nodes()
        if len(live) >= limit and self._wait_for_preempted(live):
            live = self._live_nodes()
        if len(live) >= limit:
            raise ClusterError(f"{what}: {len(live)} nodes running = max_nodes={self.spec.max_nodes} + "
                               f"spare_nodes={self.spec.spare_nodes}; {fix}")

    def _live_nodes(self) -> list[str]:
        return [n for n in self.node_names() if not self.node_status(n).startswith("exited")]

    def _wait_for_preempted(self, live: list[str]) -> bool:
        """A preempted node is on its way out: its notice went, its kill comes at the end of its grace.
        A replacement asked for meanwhile (a scheduler's replacement is booked at the notice) waits for
        that kill instead of being refused while the node drains. Returns whether it waited."""
        going = [t for t in self._preemption_timers(live) if t.is_alive()]
        for timer in going:
            timer.join(timeout=timer.interval + 60)   # the grace, then kill_node itself
        return bool(going)
