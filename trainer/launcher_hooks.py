"""The training loop's calls that a launcher's framework reads, each a no-op where that framework is absent.

ft_launcher (nvidia-resiliency-ext) restarts a worker group whose rank stops sending heartbeats to its rank
monitor; the rank monitor's socket is in the worker's environment only under ft_launcher, and the package is
installed only where the scenario runs it (docs/frameworks.md), so torchrun runs never import it.
"""
from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)
FT_SOCKET = "FT_RANK_MONITOR_IPC_SOCKET"   # nvidia_resiliency_ext.fault_tolerance.data


class FtHeartbeat:
    """One heartbeat per step to ft_launcher's rank monitor (RankMonitorClient), as its documentation teaches."""

    def __init__(self) -> None:
        self.client = None
        if FT_SOCKET not in os.environ:
            return
        try:
            from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient
        except ImportError:
            log.warning("%s is set but nvidia-resiliency-ext is not importable: no heartbeats", FT_SOCKET)
            return
        self.client = RankMonitorClient()
        self.client.init_workload_monitoring()

    def beat(self) -> None:
        if self.client is not None:
            self.client.send_heartbeat()

    def close(self) -> None:
        if self.client is not None:
            self.client.shutdown_workload_monitoring()
            self.client = None
