"""The launchers a scenario can run its job under (`trainer.launcher`), one module each (docs/frameworks.md).

`get(name)` imports the launcher's module on demand: a node that runs torchrun never imports the others.
"""
from __future__ import annotations

import importlib

from chaosbench.launchers.base import Launcher, Rendezvous

# scenario value -> module under chaosbench/launchers/ (each defines LAUNCHER)
MODULES = {"torchrun": "torchrun", "ft_launcher": "ft_launcher", "dlrover-run": "dlrover", "torchft": "torchft"}
NAMES = tuple(MODULES)
DEFAULT = "torchrun"

__all__ = ["DEFAULT", "Launcher", "NAMES", "Rendezvous", "get"]


def get(name: str) -> Launcher:
    if name not in MODULES:
        raise KeyError(f"unknown launcher {name!r}: use one of {', '.join(NAMES)}")
    return importlib.import_module(f"chaosbench.launchers.{MODULES[name]}").LAUNCHER
