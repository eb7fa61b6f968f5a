"""Checks: small functions over the recorded history (events + fault log + exits + logs)."""
from __future__ import annotations

from chaosbench.checks.ending import run_ending
from chaosbench.checks.faults import fault_checks
from chaosbench.checks.history import History
from chaosbench.checks.observed import complete_from_observation
from chaosbench.checks.recovery import recoveries
from chaosbench.checks.recovery_checks import (max_lost_steps, max_recovery_seconds, recovered_from,
                                               world_size_after, world_sizes)
from chaosbench.checks.run_checks import (checkpoints_valid, event_contract, log_regex, loss_continuity,
                                          no_fatal, no_restart, reaches_step)
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect

CHECKS = (recovered_from, max_lost_steps, max_recovery_seconds, world_size_after, world_sizes,
          reaches_step, no_restart, loss_continuity, checkpoints_valid, no_fatal, log_regex, fault_checks,
          event_contract, run_ending)


def evaluate(h: History, e: Expect) -> tuple[list[Recovery], list[CheckResult]]:
    """Run every check the expectations ask for; mark the ones the scenario made optional."""
    recs = recoveries(h)
    complete_from_observation(h, recs)   # a job without events: what the node watcher saw
    results: list[CheckResult] = []
    for check in CHECKS:
        out = check(h, e, recs)
        results += out if isinstance(out, list) else ([out] if out is not None else [])
    for r in results:
        r.optional = r.name.split(":")[0] in e.optional
    return recs, results
