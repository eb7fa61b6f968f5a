"""preempt_node: a preemption notice (SIGTERM to every process of the node), then the kill after a
grace. Written once over the in-node commands (node/scripts.py PROCS); kill_node is each backend's."""
from __future__ import annotations

import sys
import threading

from chaosbench.cluster.errors import ClusterError
from chaosbench.cluster.node import scripts
from chaosbench.cluster.primitives import primitive


class PreemptionPrimitives:
    @primitive(via="_run_in_node")
    def preempt_node(self, node: str, grace_s: float = 30.0) -> None:
        """SIGTERM every process of the node (launcher, agent, workers), as a preemption notice does;
        SIGKILL whatever of it is left after grace_s (kill_node), unless the node was started again
        meanwhile. Returns at once: the grace runs on a timer, cancelled by teardown."""
        if grace_s < 0:
            raise ClusterError(f"preempt_node grace_s={grace_s}: must be >= 0")
        self._check_node(node)
        incarnation = self._incarnation(node)
        self._run_in_node(node, scripts.PROCS, "node", "TERM", *self._marker_args(node))

        def kill_the_rest():
            if self._incarnation(node) != incarnation:
                return   # a new incarnation of the node: not ours to kill
            try:
                self.kill_node(node)
            except ClusterError as exc:
                if not self.node_status(node).startswith("exited"):
                    print(f"chaosbench: preempt_node({node}): the kill after {grace_s:g} s failed: {exc}",
                          file=sys.stderr)
        timer = threading.Timer(grace_s, kill_the_rest)
        timer.daemon = True
        self._preemptions.setdefault(node, []).append(timer)   # add_node waits for it (nodes.py)
        timer.start()

    def _incarnation(self, node: str) -> object:
        """Changes whenever the node is started again (a preemption's kill must not hit its successor)."""
        return None
