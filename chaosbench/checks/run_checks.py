"""Checks on the run as a whole: progress, restarts, loss, checkpoint files, fatal errors, logs."""
from __future__ import annotations

import re
import statistics

from chaosbench.checks.base import NO_EVENTS, failed, not_evaluated, passed
from chaosbench.checks.history import History
from chaosbench.checks.invariant_records import WINDOW, finite
from chaosbench.checks.lineage import first_reports, lineage
from chaosbench.checks.registry import check
from chaosbench.checks.observed import confirmed_steps
from chaosbench.checks.recovery_checks import preconditions, unrestarted
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect, LossContinuity


@check("reaches_step", needs="events or observed steps")
def reaches_step(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """Training reached step N (within within_seconds of its start)."""
    if e.reaches_step is None:
        return None
    name = "reaches_step"
    expected = f"step {e.reaches_step}" + (f" within {e.within_seconds:g} s" if e.within_seconds else "")
    if not h.events:
        return not_evaluated(name, expected, NO_EVENTS)
    stop = h.harness.get("stop_reason")
    why = f" (run stopped: {stop})" if stop else ""
    steps = confirmed_steps(h)   # a watcher's line that only looks like progress earns nothing
    hit = [ev for ev in steps if int(ev.get("step", 0)) >= e.reaches_step]
    best = max((int(ev["step"]) for ev in steps), default=None)
    lin = lineage(h)
    if best is not None and lin.stride is not None:   # reached means trained up to it, step by step
        top, _, gap = lin.contiguous_top(any_rank=True)
        if top is None or top < e.reaches_step:
            return failed(name, expected, top, f"highest step reached without a gap: {top}"
                          + (f" (then {gap})" if gap else "") + why)
        hit = [{"ts": min(ts for r in lin.rounds for s, ts in first_reports(r).items() if e.reaches_step <= s <= top)}]
    if best is None and h.max_step() is not None:
        return not_evaluated(name, expected, "the only progress lines seen are single lines no process printed a "
                                             f"steady sequence around (highest: {h.max_step()}), which only look like "
                                             f"progress{why}")
    if best is None:   # workers ran, but nothing ever said which step they were at
        return not_evaluated(name, expected, "no step was seen: give the scenario a trainer.progress regex "
                                             "matching the job's progress lines, or call chaosbench.instrument's "
                                             f"step() (docs/byo-trainer.md){why}")
    if not hit:
        return failed(name, expected, best, f"highest step reached: {best}{why}")
    start = h.harness.get("training_started_at") or h.events[0]["ts"]
    took = round(hit[0]["ts"] - start, 2)
    observed = f"step {e.reaches_step} after {took} s"
    if e.within_seconds is not None and took > e.within_seconds:
        return failed(name, expected, observed, f"reached step {e.reaches_step} {took} s after training "
                                                f"started, over the {e.within_seconds:g} s budget")
    return passed(name, expected, observed, f"reached step {e.reaches_step} {took} s after training started")


@check("no_restart", needs="events")
def no_restart(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """No worker restarted (an outage the job rides out)."""
    if not e.no_restart:
        return None
    name, expected = "no_restart", 0
    if not h.events:
        return not_evaluated(name, expected, NO_EVENTS)
    slots: dict[tuple, set[int]] = {}
    for node, lr, pid, gen in h.incarnation_starts():   # gen: a restarted container may reuse the pid
        slots.setdefault((node, lr), set()).add((pid, gen))
    restarts = {f"{n}/local{lr}": len(p) - 1 for (n, lr), p in slots.items() if len(p) > 1}
    if restarts:
        return failed(name, expected, sum(restarts.values()),
                      "worker restarts: " + ", ".join(f"{k} x{v}" for k, v in sorted(restarts.items())))
    return passed(name, expected, 0, f"{len(slots)} worker(s), each ran as a single process throughout")


@check("loss_continuity", needs="events with loss, a restore")
def loss_continuity(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """The loss after each restore is within max_increase of the loss before it."""
    cfg = e.loss_continuity
    if cfg is None or cfg is False:
        return None
    cfg = LossContinuity() if cfg is True else cfg
    name, expected = "loss_continuity", f"loss after restore (first, and median over {WINDOW} steps) <= {1 + cfg.max_increase:g} x before"
    steps = [ev for ev in h.of("step") if ev.get("loss") is not None]
    if not steps:
        return not_evaluated(name, expected, NO_EVENTS if not h.events else "step events carry no loss")
    # a restart that never trained again is a failure, not a recovery to skip
    if (pre := preconditions(name, expected, h, recs)) is not None:
        return pre
    bad = [ev for ev in steps if not finite(ev["loss"])]
    if bad:   # NaN compares false with everything: say it, never fold it into a maximum
        return failed(name, expected, str(bad[0]["loss"]), f"{len(bad)} step(s) with a non-finite loss; first "
                      f"{bad[0].get('node')} rank {bad[0].get('rank')} step {bad[0].get('step')}: {bad[0]['loss']}")
    worst, lines = 0.0, []
    for r in recs:
        before = [float(ev["loss"]) for ev in steps if ev["ts"] < r.injected_at][-3:]
        after = [float(ev["loss"]) for ev in steps if ev["ts"] >= r.first_step_at]
        if not before or not after:
            return not_evaluated(name, expected, f"{r.fault_id}: no loss recorded before or after the restore")
        ref = statistics.fmean(before)
        # the first loss, and the median over the first WINDOW steps: a rise from the second step on counts
        window = statistics.median(after[:WINDOW * 2])
        ratio = max(after[0], window) / ref if ref > 0 else float("inf")
        worst = max(worst, ratio)
        lines.append(f"{r.fault_id}: loss {ref:.4f} before -> {after[0]:.4f} after, median {window:.4f} over the "
                     f"next {min(len(after), WINDOW * 2)} reports (x{ratio:.3f})")
    ok = worst <= 1 + cfg.max_increase
    return (passed if ok else failed)(name, expected, round(worst, 4), "; ".join(lines) + unrestarted(h, recs))


@check("checkpoints_valid", needs="inventory",
       help="every published checkpoint (memory, NVMe, S3) matches its manifest")
def checkpoints_valid(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """Every published checkpoint is complete and matches its manifest.

    Temp directories of an interrupted atomic write (a node killed mid-save) are expected leftovers
    the loader ignores; they are listed, not failed. A published directory (empty, without a
    manifest, or with data that does not match it) is what a restore could wrongly pick up: that
    fails, whatever stray temp files it also holds. Tiers and nodes the inventory could not see
    are named; none seen at all is not evaluated.
    """
    if not e.checkpoints_valid:
        return None
    name, expected = "checkpoints_valid", "every published checkpoint complete and matching its checksum"
    inv = h.inventory
    if inv is None:
        return not_evaluated(name, expected, "no checkpoint inventory was taken (the backend exposes no "
                                             "checkpoint directories)")
    ckpts = inv.get("checkpoints", [])
    unseen = inv.get("unseen", [])
    blind = "; could not see " + ", ".join(f"{u['node']}/{u['tier']} ({u['reason']})" for u in unseen) \
        if unseen else ""
    published = [c for c in ckpts if c.get("published", True)]
    leftovers = [c for c in ckpts if not c.get("published", True)]
    if not published:
        found = f"{len(inv.get('files', []))} file(s), {len(leftovers)} temp leftover(s)"
        return not_evaluated(name, expected, f"no published checkpoint found ({found}){blind}")
    if all(c.get("valid") is None and c.get("reason") == "no manifest.json" for c in published):
        return not_evaluated(name, expected, f"{len(published)} checkpoint director(ies) found but no manifest "
                                             f"to verify them against (docs/events.md: checkpoint layout){blind}")
    stray = {(f["node"], f["path"].rsplit("/", 1)[0]) for f in inv.get("files", []) if f.get("partial")}
    stray = [c for c in published if (c["node"], c["dir"]) in stray]
    tiers = sorted({f"{c['tier']}" for c in published})
    notes = (f"; {len(leftovers)} temp leftover(s) of interrupted writes, ignored by the loader" if leftovers else "") \
        + (f"; stray temp file(s) inside {', '.join(c['node'] + ':' + c['dir'] for c in stray[:5])}" if stray else "") \
        + blind
    bad = [f"{c['node']}:{c['dir']} ({c['reason']})" for c in published if c.get("valid") is not True]
    if bad:
        return failed(name, expected, len(bad), f"{len(bad)} incomplete or corrupt checkpoint(s): "
                                                f"{', '.join(bad[:5])}{notes}")
    return passed(name, expected, len(published), f"{len(published)} checkpoint(s) verified by checksum "
                                                  f"({', '.join(tiers)}){notes}")


@check("no_fatal", needs="events")
def no_fatal(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """No worker logged a fatal error."""
    if not e.no_fatal:
        return None
    name, expected = "no_fatal", 0
    if not h.events:
        return not_evaluated(name, expected, NO_EVENTS)
    if h.observed_only:   # the job writes no `fatal`: judge from what its torchrun agents logged
        return _no_failure_observed(h, name, expected)
    fatal = h.of("fatal")
    if fatal:
        first = fatal[0]
        return failed(name, expected, len(fatal), f"{len(fatal)} fatal event(s); first on {first.get('node')} "
                                                  f"rank {first.get('rank')}: {first.get('error_type', '')} "
                                                  f"{first.get('error', '')}".strip())
    return passed(name, expected, 0, "no fatal event")


def _no_failure_observed(h: History, name: str, expected: int) -> CheckResult:
    """A job without events cannot say `fatal`; a failed worker group or a launcher that exited non-zero
    is the outside evidence of one. Without agent lines there is no evidence either way."""
    if not h.agent_events:
        return not_evaluated(name, expected, "the job wrote no events and no torchrun agent line was seen "
                                             "(run it under the node watcher, or emit fatal(): docs/byo-trainer.md)")
    bad = [a for a in h.agent_events if a.get("event") == "worker_group_failed"
           or (a.get("event") == "launcher_exit" and a.get("exit_code") not in (0, None))]
    if bad:
        first = bad[0]
        what = (f"exit code {first.get('exit_code')}" if first.get("event") == "launcher_exit"
                else first.get("line", "worker group failed"))
        return failed(name, expected, len(bad), f"{len(bad)} failure(s) seen by the node watcher; first on "
                                                f"{first.get('node')}: {what}")
    return passed(name, expected, 0, f"no worker group failure in {len(h.agent_events)} torchrun agent event(s)")


@check("log_regex", needs="logs")
def log_regex(h: History, e: Expect, recs: list[Recovery]) -> list[CheckResult]:
    """A pattern is present or absent in the logs (one result per pattern)."""
    out = []
    for rule in e.log_regex:
        name = f"log_regex:{rule.pattern}"
        expected = f"{rule.expect} in {rule.node or 'any'} log"
        # 'node-1' names node-1.log and ray/node-1/..., not node-10.log
        logs = {k: v for k, v in h.logs.items() if rule.node is None
                or any(re.match(re.escape(rule.node) + r"(?![0-9A-Za-z])", part) for part in k.split("/"))}
        if not logs:
            out.append(not_evaluated(name, expected, f"no logs were collected{' for ' + rule.node if rule.node else ''}"))
            continue
        if rule.expect == "absent" and not any(v.strip() for v in logs.values()):
            out.append(not_evaluated(name, expected, f"the log(s) {', '.join(sorted(logs))} are empty: an absent "
                                                     "pattern proves nothing"))
            continue
        rx = re.compile(rule.pattern)
        hits = [(k, m.group(0)) for k, text in logs.items() for m in [rx.search(text)] if m]
        observed = "present" if hits else "absent"
        where = f" (first in {hits[0][0]}: {hits[0][1][:120]!r})" if hits else f" in {len(logs)} log(s)"
        res = passed if observed == rule.expect else failed
        out.append(res(name, expected, observed, f"pattern {observed}{where}"))
    return out


@check("event_contract", always=True, needs="events",
       help="an event line with wrongly typed fields was left out (shown only when it fails)")
def event_contract(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """Always on, and only present when it fails: an event line whose known fields have the wrong type
    (docs/events.md) was left out of every other check; say so instead of judging without it."""
    if not h.rejected_lines:
        return None
    return failed("event_contract", "every event line well-typed (docs/events.md)", len(h.rejected_lines),
                  f"{len(h.rejected_lines)} event line(s) left out of the checks: "
                  + "; ".join(h.rejected_lines[:5]))
