"""The outcome of one doctor check: status, what was seen, and what to do about it."""
from __future__ import annotations

import enum
import time
from dataclasses import asdict, dataclass, field
from typing import Callable


class Status(str, enum.Enum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"   # not applicable or could not be evaluated; the evidence says which and why


@dataclass
class CheckResult:
    name: str
    status: Status
    evidence: str
    fix: str = ""
    duration_s: float = 0.0
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["status"] = self.status.value
        return d


def timed(fn: Callable[..., CheckResult | list[CheckResult]], *args, **kwargs) -> list[CheckResult]:
    """Run a check, stamp its duration, and turn an unexpected crash into a FAIL, not a traceback."""
    t0 = time.monotonic()
    try:
        out = fn(*args, **kwargs)
    except Exception as e:  # a broken check must not hide the other checks' results
        out = CheckResult(getattr(fn, "__name__", "check"), Status.FAIL,
                          f"the check itself crashed: {type(e).__name__}: {e}",
                          "report this as a chaosbench bug")
    results = out if isinstance(out, list) else [out]
    took = time.monotonic() - t0
    for r in results:
        if not r.duration_s:
            r.duration_s = round(took, 4)
    return results


def worst(results: list[CheckResult]) -> Status:
    statuses = {r.status for r in results}
    for s in (Status.FAIL, Status.WARN, Status.PASS):
        if s in statuses:
            return s
    return Status.SKIP
