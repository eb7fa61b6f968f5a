"""How the run ended, as a check: a run that hung, timed out or lost every node never passes.

The runner records the ending in harness.json (`ending`, with `stop_reason` in words): the normal
endings are `reached_step` (expect.reaches_step reached, every fault done and settled),
`settled` (expect.trains_after_settle steps trained after the last fault settled) and `completed` (no step target; every node exited 0). Any other ending fails the run, whatever the
other checks say, unless the scenario names it (`expect: {ends: stuck}` for a story about a hang).
A loaded record whose harness.json is missing, empty or without a stop reason fails, naming the
part (checks/record.py): a run that cannot say how it ended never passes. Only a history built in
memory (tests) without a harness record has no ending to judge: no check.
"""
from __future__ import annotations

from chaosbench.checks.base import failed, passed
from chaosbench.checks.history import History
from chaosbench.checks.registry import check
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect

NORMAL = ("reached_step", "settled", "completed")
# stop_reason prefixes of runs recorded before `ending` was written
_BY_PREFIX = (("reached step", "reached_step"), ("trained ", "settled"), ("timeout", "timeout"), ("stuck", "stuck"),
              ("every node exited", "nodes_exited"))


def ending_of(h: History) -> str | None:
    ending = h.harness.get("ending")
    if ending:
        return str(ending)
    stop = str(h.harness.get("stop_reason") or "")
    return next((e for prefix, e in _BY_PREFIX if stop.startswith(prefix)), None)


@check("ending", "ends", always=True, last=True, needs="the run's stop reason")
def run_ending(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """How the run stopped: a normal ending, or the one expect.ends names."""
    name = "ending"
    want = e.ends
    expected = want or " or ".join(NORMAL)
    if "stop_reason" not in h.harness and "ending" not in h.harness:
        if h.source is None:
            return None
        why = "; ".join(str(p) for p in h.integrity if p.part == "harness.json") or "harness.json: no stop reason"
        return failed(name, expected, None, f"the run's ending is unknown: {why}")
    ending = ending_of(h)
    stop = h.harness.get("stop_reason") or "no stop reason recorded"
    if ending is None:
        return failed(name, expected, None, f"the run's ending is unknown ({stop})")
    if ending == "error":
        return failed(name, expected, ending, f"the harness broke: {stop}")
    ok = ending == want if want else ending in NORMAL
    if ok:
        return passed(name, expected, ending, f"the run ended {ending}" + ("" if want is None else " as expected")
                      + f": {stop}")
    hint = "" if want else f"; a scenario about this ending says `expect: {{ends: {ending}}}`"
    return failed(name, expected, ending, f"the run ended {ending}, expected {expected}: {stop}{hint}")
