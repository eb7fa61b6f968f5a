"""NVIDIA resiliency-ext's `ft_launcher`: torchrun's agent (a vendored copy) plus a rank monitor per worker
that restarts the group when a rank's heartbeats or sections stop (docs/frameworks.md).

Its argv is torchrun's (same rendezvous, nnodes, restarts) on `nvidia_resiliency_ext.fault_tolerance.launcher`;
its log is torch elastic's with an indented `Rendezvous complete` block and its own hang lines.
"""
from __future__ import annotations

import re

from chaosbench.launchers.base import Launcher, LogAdapter, Rendezvous

VERSION = "0.4.1"   # the newest wheel for CPython 3.11 on PyPI (2026-11-28)
# a rank monitor logs why (rank_monitor_server.py), then "FT timeout elapsed." and the agent restarts the group
REASON = re.compile(r"Did not get (initial|subsequent) heartbeat|Section '.*' has been open for|Was out of section for")
TIMEOUT = "FT timeout elapsed"


class FtAdapter(LogAdapter):
    """torch elastic's lines, plus one `hang_detected` per rank-monitor timeout (with the reason it logged)."""
    reason: str | None = None

    def extra(self, text: str) -> list[tuple[str, dict]]:
        if REASON.search(text):
            self.reason = text.strip()[-300:]
        if TIMEOUT not in text:
            return []
        reason, self.reason = self.reason, None
        return [("hang_detected", {"line": text.strip()[-300:], "reason": reason})]


class FtLauncher(Launcher):
    name = "ft_launcher"
    package = "nvidia-resiliency-ext"
    requirements = (f"nvidia-resiliency-ext=={VERSION}",)
    # "supports only rdzv_backend=c10d" (fault_tolerance/launcher.py): it swaps in its own c10d handler
    rendezvous = ("c10d",)
    # tried on these (docs/frameworks.md); on Slurm the package must be on every node first (docs/slurm.md)
    backends = ("local", "docker")

    def argv(self, r: Rendezvous) -> list[str]:
        argv = super().argv(r)
        # no fault_tolerance section in a config file: its defaults (docs/frameworks.md), but the NIC monitor,
        # which reads GPUs through NVML and IB counters: without a GPU it logs an NVML traceback per worker start
        # that reads as the job's own error (health_check.py get_gpu_pci_mapping)
        return [r.python, "-m", "nvidia_resiliency_ext.fault_tolerance.launcher", *argv[3:],
                "--ignore-missing-fault-tol-cfg", "--ft-enable-nic-monitor=false"]

    def adapter(self) -> LogAdapter:
        return FtAdapter()


LAUNCHER = FtLauncher()
