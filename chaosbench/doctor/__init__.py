"""`chaosbench doctor`: preflight checks for a distributed training setup, and stuck-run diagnosis."""
import importlib

# Loaded on first use: `chaosbench` imports doctor.cli at every start, and the checks' imports are not free.
_HOME = {"Diagnosis": "diagnose", "diagnose_run": "diagnose", "is_stuck": "diagnose", "run_preflight": "preflight",
         "CheckResult": "result", "Status": "result", "DoctorInputError": "target", "Target": "target",
         "from_env": "target", "from_scenario": "target"}

__all__ = [*_HOME, "main"]


def __getattr__(name):
    if name in _HOME:
        return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv=None) -> int:
    from .cli import main as _main
    return _main(argv)
