"""`chaosbench doctor`: preflight checks for a distributed training setup, and stuck-run diagnosis."""
from .diagnose import Diagnosis, diagnose_run, is_stuck
from .preflight import run_preflight
from .result import CheckResult, Status
from .target import DoctorInputError, Target, from_env, from_scenario

__all__ = ["CheckResult", "Status", "Target", "DoctorInputError", "from_env", "from_scenario", "run_preflight",
           "Diagnosis", "diagnose_run", "is_stuck", "main"]


def main(argv=None) -> int:
    from .cli import main as _main
    return _main(argv)
