"""`record_integrity`: the verdict rests on a whole record (docs/result.md, "Record integrity").

Always on, and no scenario can make it optional or relax it: a part missing or unparsable, a garbled
line, an event of another run or one stamped after the evidence was collected fails the run, each
named with its part and fix (History.load finds them: checks/record.py). A record older than a rule
passes it as not judged, saying so: it cannot show what it predates.
"""
from __future__ import annotations

from chaosbench.checks.base import failed, passed
from chaosbench.checks.history import History
from chaosbench.checks.registry import check
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect

SHOWN = 10   # problems named in the reason; the count says the rest


@check("record_integrity", always=True, needs="the run directory")
def record_integrity(h: History, e: Expect, recs: list[Recovery]) -> CheckResult:
    """Every required part of the run record is present and parsable."""
    name, expected = "record_integrity", "every required part present and parsable"
    if h.integrity:
        more = len(h.integrity) - SHOWN
        return failed(name, expected, f"{len(h.integrity)} problem(s)",
                      "; ".join(str(p) for p in h.integrity[:SHOWN]) + (f"; and {more} more" if more > 0 else ""))
    old = f" (record schema {h.schema_version}; not judged, the record predates it: {'; '.join(h.unjudged)})" \
        if h.unjudged else ""
    return passed(name, expected, "whole", "every required part present and parsable" + old)
