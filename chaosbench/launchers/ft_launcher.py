"""NVIDIA resiliency-ext's `ft_launcher`: torchrun's agent (a vendored copy) plus a rank monitor per worker
that restarts the group when a rank's heartbeats or sections stop (docs/frameworks.md).

Its argv is torchrun's (same rendezvous, nnodes, restarts) on `nvidia_resiliency_ext.fault_tolerance.launcher`;
its log is torch elastic's with an indented `Rendezvous complete` block and its own hang lines.
"""
from __future__ import annotations

import re

from chaosbench.launchers.base import Launcher, LogAdapter, Rendezvous

VERSION = "0.4.1"   # the newest wheel for CPython 3.11 on PyPI (2026-11-28)
# a rank monitor that stops hearing from its rank logs one of these before the agent restarts the group
HANG = re.compile(r"(heartbeat|section) timed? ?out|did not send (the )?(initial )?heartbeat|"
                  r"Rank monitor detected|hang detected|Detected (workload|rank) (failure|hang)", re.I)


class FtAdapter(LogAdapter):
    def extra(self, text: str) -> list[tuple[str, dict]]:
        return [("hang_detected", {"line": text.strip()[-300:]})] if HANG.search(text) else []


class FtLauncher(Launcher):
    name = "ft_launcher"
    package = "nvidia-resiliency-ext"
    requirements = (f"nvidia-resiliency-ext=={VERSION}",)
    rendezvous = ("c10d", "c10d-links")   # its vendored rendezvous is the c10d one (_ft_rendezvous.py)

    def argv(self, r: Rendezvous) -> list[str]:
        argv = super().argv(r)
        # no fault_tolerance section in a config file: its defaults (docs/frameworks.md)
        return [r.python, "-m", "nvidia_resiliency_ext.fault_tolerance.launcher", *argv[3:],
                "--ignore-missing-fault-tol-cfg"]

    def adapter(self) -> LogAdapter:
        return FtAdapter()


LAUNCHER = FtLauncher()
