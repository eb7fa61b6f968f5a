"""torchrun (torch.distributed.run): the default launcher, torch elastic's agent as torch ships it."""
from __future__ import annotations

from chaosbench.launchers.base import Launcher


class Torchrun(Launcher):
    name = "torchrun"


LAUNCHER = Torchrun()
