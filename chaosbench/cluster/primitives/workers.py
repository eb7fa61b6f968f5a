"""Worker primitives: one local rank's worker (kill / freeze / thaw, found in the node by node/procs.py)
and a cooperative fault's command to the job. Written once over the backends' hooks."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from chaosbench.cluster.errors import ClusterError, UnsupportedFault
from chaosbench.cluster.node import scripts
from chaosbench.cluster.primitives import primitive


class WorkerPrimitives:
    @primitive(via="start_training")
    def send_job_command(self, fault_id: str, payload: dict) -> Path:
        """A cooperative fault's command to the job (chaosbench.instrument reads it at its next step):
        `<events_dir>/inject/<fault_id>.json`, written atomically. Built on start_training: a backend that
        runs the job shares events_dir with its nodes; one whose nodes write elsewhere (node_events_dir,
        streamed back) cannot deliver it. The workers create `<id>.fired` beside it, so the directory gets
        the events directory's own mode (they write events there already)."""
        node_dir = getattr(self, "node_events_dir", None)
        if node_dir is not None and str(node_dir) != str(self.events_dir):
            raise UnsupportedFault(f"backend '{self.backend}' does not support send_job_command: its nodes write "
                                   f"events to {node_dir}, not to {self.events_dir} (set a shared filesystem)")
        inject = self.events_dir / "inject"
        inject.mkdir(mode=0o755, parents=True, exist_ok=True)
        inject.chmod(stat.S_IMODE(self.events_dir.stat().st_mode))
        path = inject / f"{fault_id}.json"
        tmp = inject / f"{fault_id}.json.tmp"
        tmp.write_text(json.dumps({"v": 1, "id": fault_id, "run_id": self.spec.run_id, **payload}))
        os.chmod(tmp, 0o644)   # read by the workers, whoever they run as
        os.replace(tmp, path)
        return path

    # one local rank's worker (its subtree; never the agent), found by node/procs.py's workers
    def _signal_worker(self, node: str, local_rank: int, sig: str) -> list[str]:
        self._check_node(node)
        pids = self._run_in_node(node, scripts.PROCS, "workers", sig, str(local_rank),
                                 *self._marker_args(node)).split()
        if not pids:
            raise ClusterError(f"{node}: no worker with LOCAL_RANK={local_rank} is running")
        return pids

    @primitive(via="_run_in_node")
    def kill_worker(self, node: str, local_rank: int = 0) -> None:
        """SIGKILL one worker; its agent sees it die and restarts the workers (memory tier)."""
        self._signal_worker(node, local_rank, "KILL")

    @primitive(via="_run_in_node")
    def freeze_worker(self, node: str, local_rank: int = 0) -> None:
        """SIGSTOP one worker: a hung rank whose agent still heartbeats (the gray failure)."""
        self._signal_worker(node, local_rank, "STOP")

    @primitive(via="_run_in_node")
    def thaw_worker(self, node: str, local_rank: int = 0) -> None:
        self._signal_worker(node, local_rank, "CONT")
