"""Run-level invariants over what the job recorded: numerics, consistency, evidence (invariants.py has
the others and registers them all)."""
from __future__ import annotations

import math
import re
import statistics

from chaosbench.checks.base import NO_EVENTS, failed, not_evaluated, passed
from chaosbench.checks.ending import ending_of
from chaosbench.checks.restore_evidence import contradictions
from chaosbench.checks.history import History
from chaosbench.checks.lineage import Lineage, Round, lineage
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect, LossContinuity

WINDOW = 10            # steps after a restore whose loss is judged
DEFAULT_INCREASE = 1.0  # without expect.loss_continuity: the loss after a restore at most doubles


def finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def step_losses(steps: list[dict]) -> dict[int, float]:
    """step -> the mean loss the ranks reported for it (non-finite ones left to the finiteness test)."""
    got: dict[int, list[float]] = {}
    for x in steps:
        if x.get("loss") is not None and finite(x["loss"]):
            got.setdefault(int(x["step"]), []).append(float(x["loss"]))
    return {s: statistics.fmean(v) for s, v in got.items()}


def restore_ratio(lin: Lineage, r: Round) -> tuple[float, str] | None:
    """The loss after round r's restore against the loss before: the median over its first WINDOW
    steps against the median the earlier rounds recorded at those same steps (a restore resumes the
    same trajectory), or against the last 3 steps before the round where those steps were never
    trained before. None: no loss to compare."""
    after = step_losses([x for m in r.trained for x in m.steps])
    window = sorted(after)[:WINDOW]
    earlier = step_losses([x for q in lin.rounds[:r.index] for m in q.trained for x in m.steps])
    if not window or not earlier:
        return None
    same = [s for s in window if s in earlier]
    if len(same) >= 3:
        ref, how = statistics.median(earlier[s] for s in same), f"the same {len(same)} steps before"
    else:
        last = [earlier[s] for s in sorted(earlier)[-3:]]
        ref, how = statistics.fmean(last), "the last 3 steps before"
    now = statistics.median(after[s] for s in window)
    first = after[window[0]]
    ratio = max(now, first) / ref if ref > 0 else float("inf")
    return ratio, (f"round {r.index}: steps {window[0]}..{window[-1]} loss median {now:.4f} (first {first:.4f}) vs "
                   f"{ref:.4f} over {how} (x{ratio:.3f})")


def numerics(h: History, e: Expect) -> CheckResult:
    cfg = e.loss_continuity if isinstance(e.loss_continuity, LossContinuity) else \
        LossContinuity() if e.loss_continuity is True else None
    limit = 1 + (cfg.max_increase if cfg else DEFAULT_INCREASE)
    name, expected = "invariant:numerics", f"loss finite at every step; after each restore <= x{limit:g} before"
    lin = lineage(h)
    steps = [x for i in lin.incarnations for x in i.steps if x.get("loss") is not None]
    if not steps:
        return not_evaluated(name, expected, NO_EVENTS if not h.events else
                             "no step carries a loss (the node watcher sees no loss)" if lin.observed else
                             "step events carry no loss")
    bad = [f"{x.get('node')} rank {x.get('rank')} step {x.get('step')}: loss {x.get('loss')}"
           for x in steps if not finite(x["loss"])]
    lines = []
    for r in lin.rounds[1:]:
        got = restore_ratio(lin, r) if r.trained else None
        if got is None:
            continue
        ratio, line = got
        lines.append(line)
        if ratio > limit:
            bad.append(f"loss after a restore rose x{ratio:.3f} (> x{limit:g}): {line}")
    if bad:
        return failed(name, expected, len(bad), "non-finite or discontinuous loss: " + "; ".join(bad[:5]))
    return passed(name, expected, f"{len(steps)} finite", "; ".join(lines) or "no restore to judge continuity over")


def consistency(h: History, e: Expect) -> CheckResult:
    name, expected = "invariant:consistency", "the harness's ending and highest step agree with the events"
    if not h.harness:
        return not_evaluated(name, expected, "no run record (harness.json) to hold the events against")
    lin = lineage(h)
    ending, stop = ending_of(h), str(h.harness.get("stop_reason") or "")
    top, _, gap = lin.contiguous_top(any_rank=True)
    highest = h.max_step()
    bad = []
    m = re.match(r"reached step (\d+)", stop)
    if ending == "reached_step" and m and (top is None or top < int(m.group(1))):
        bad.append(f"the harness stopped at '{stop}', but the lineage reaches step {top} without a gap"
                   + (f" ({gap})" if gap else ""))
    m = re.search(r"highest step (\d+)", stop)
    if m and (highest is None or highest < int(m.group(1))):
        bad.append(f"the harness saw step {m.group(1)} ({stop[:80]}), the events only {highest}")
    if ending in ("reached_step", "settled") and not lin.world and h.events:
        bad.append(f"the run ended {ending}, but no step every rank reported was recorded")
    if bad:
        return failed(name, expected, ending, "; ".join(bad))
    return passed(name, expected, ending, f"ending {ending or 'not recorded'}; lineage reaches step {top}")


def _same_copy(invalid: dict, node: str, source: str | None) -> bool:
    """Did this checkpoint_invalid reject the copy that was then loaded? A rank that found its own copy
    corrupt may load the same step from a peer (source: peer); a rejection by every rank together (the
    reference trainer's "every rank falls back") rejects every copy."""
    if "every rank falls back" in str(invalid.get("error", "")):
        return True
    return str(invalid.get("node")) == node and source != "peer"


def evidence(h: History, e: Expect) -> CheckResult:
    name, expected = "invariant:evidence", ("every restore verified by checksum, not one the job called invalid, "
                                            "and backed by the inventory taken before it")
    lin = lineage(h)
    loaded = [(i, r) for i, r in lin.restores if r.kind == "loaded"]
    if not loaded:
        return passed(name, expected, 0, "no checkpoint was loaded" + (" (a job without events: the node watcher "
                                                                         "sees no restore)" if lin.observed else ""))
    bad, unknown = [], []
    for inc, r in loaded:
        if "checksum_ok" in (r.event or {}) and not r.checksum_ok:
            bad.append(f"{inc.label} loaded {r.tier}@{r.step} with checksum_ok={r.checksum_ok!r}")
        rejected = [x for m in lin.rounds[inc.round].members for x in m.events
                    if x.get("event") == "checkpoint_invalid" and x.get("step") == r.step
                    and (x.get("tier") is None or r.tier is None or x.get("tier") == r.tier) and x["ts"] <= r.ts
                    and _same_copy(x, inc.node, r.source)]
        if rejected:
            bad.append(f"{inc.label} loaded {r.tier}@{r.step}, which {rejected[0].get('node')} rank "
                       f"{rejected[0].get('rank')} called invalid before ({rejected[0].get('error', '')[:80]})")
    by_fault: dict[str, list] = {}
    for inc, r in loaded:
        if r.fault_id is None:
            continue   # a restore before any fault: a checkpoint of an earlier run, nothing to hold it against
        inv = h.inventories.get(r.fault_id)
        if inv is None and (h.inventory is not None or h.inventories):   # this harness takes them: one is missing
            bad.append(f"{inc.label} loaded {r.tier}@{r.step} after {r.fault_id}, but no inventory of that fault "
                       f"is in the record (inventories/{r.fault_id}.json)")
        elif inv is None:
            unknown.append(f"{inc.label}'s restore after {r.fault_id}: no inventory was taken at that fault")
        # an inventory begun after a fast restore (local recoveries take 0.3 s, the walk starts once the
        # fault's action returned) still backs it when it holds that checkpoint: contradictions() below
        # holds every claim against the inventory's contents either way
        by_fault.setdefault(r.fault_id, []).append({"node": inc.node, "local_rank": inc.local_rank, "tier": r.tier,
                                                    "step": r.step, "source": r.source, "ts": r.ts,
                                                    "live": (r.event or {}).get("live")})
    for fid, claims in by_fault.items():
        fw = next(f for f in h.faults if f.id == fid)
        problems, _ = contradictions(h, Recovery(fault_id=fid, injected_at=fw.injected_at, claims=claims))
        bad += problems
    if bad:
        return failed(name, expected, len(bad), "; ".join(bad[:5]))
    if unknown:
        return not_evaluated(name, expected, "; ".join(unknown[:3]))
    return passed(name, expected, len(loaded), f"{len(loaded)} checkpoint load(s), each verified and backed by the "
                                               "harness's inventory")
