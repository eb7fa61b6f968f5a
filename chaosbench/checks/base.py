"""Check results and helpers shared by the check functions."""
from __future__ import annotations

from typing import Any

from chaosbench.result import CheckResult


def passed(name: str, expected: Any, observed: Any, reason: str) -> CheckResult:
    return CheckResult(name=name, status="passed", expected=expected, observed=observed, reason=reason)


def failed(name: str, expected: Any, observed: Any, reason: str) -> CheckResult:
    return CheckResult(name=name, status="failed", expected=expected, observed=observed, reason=reason)


def not_evaluated(name: str, expected: Any, reason: str) -> CheckResult:
    return CheckResult(name=name, status="not_evaluated", expected=expected, observed=None, reason=reason)


NO_EVENTS = "the trainer wrote no events (docs/events.md), so this cannot be measured"
