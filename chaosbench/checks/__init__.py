"""Checks: small functions over the recorded history (events + fault log + exits + logs).

Each check registers itself with the `expect:` keys that ask for it (checks/registry.py)."""
from __future__ import annotations

from chaosbench.checks.history import History
from chaosbench.checks.observed import complete_from_observation
from chaosbench.checks.recovery import recoveries
from chaosbench.checks.registry import all_checks
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect


def evaluate(h: History, e: Expect) -> tuple[list[Recovery], list[CheckResult]]:
    """Run every registered check (each returns nothing when `expect` does not ask for it); mark the
    ones the scenario made optional."""
    recs = recoveries(h)
    complete_from_observation(h, recs)   # a job without events: what the node watcher saw
    results: list[CheckResult] = []
    for d in all_checks():
        out = d.fn(h, e, recs)
        out = out if isinstance(out, list) else ([out] if out is not None else [])
        for r in out:
            r.optional = r.optional or d.name in e.optional   # an invariant may say so itself
        results += out
    return recs, results
