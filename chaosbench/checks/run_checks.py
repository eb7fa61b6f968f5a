"""Checks on the run as a whole: progress, restarts, loss, checkpoint files, fatal errors, logs."""
from __future__ import annotations

import re
import statistics

from chaosbench.checks.base import NO_EVENTS, failed, not_evaluated, passed
from chaosbench.checks.history import History
from chaosbench.result import CheckResult, Recovery
from chaosbench.scenario.model import Expect, LossContinuity


def reaches_step(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    if e.reaches_step is None:
        return None
    name = "reaches_step"
    expected = f"step {e.reaches_step}" + (f" within {e.within_seconds:g} s" if e.within_seconds else "")
    if not h.events:
        return not_evaluated(name, expected, NO_EVENTS)
    stop = h.harness.get("stop_reason")
    why = f" (run stopped: {stop})" if stop else ""
    hit = [ev for ev in h.of("step") if int(ev.get("step", 0)) >= e.reaches_step]
    best = h.max_step()
    if not hit:
        return failed(name, expected, best, f"highest step reached: {best}{why}")
    start = h.harness.get("training_started_at") or h.events[0]["ts"]
    took = round(hit[0]["ts"] - start, 2)
    observed = f"step {e.reaches_step} after {took} s"
    if e.within_seconds is not None and took > e.within_seconds:
        return failed(name, expected, observed, f"reached step {e.reaches_step} {took} s after training "
                                                f"started, over the {e.within_seconds:g} s budget")
    return passed(name, expected, observed, f"reached step {e.reaches_step} {took} s after training started")


def no_restart(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
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


def loss_continuity(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    cfg = e.loss_continuity
    if cfg is None or cfg is False:
        return None
    cfg = LossContinuity() if cfg is True else cfg
    name, expected = "loss_continuity", f"first loss after restore <= {1 + cfg.max_increase:g} x before"
    steps = [ev for ev in h.of("step") if ev.get("loss") is not None]
    if not steps:
        return not_evaluated(name, expected, NO_EVENTS if not h.events else "step events carry no loss")
    restored = [r for r in recs if r.first_step_at is not None]
    if not restored:
        return not_evaluated(name, expected, "no restore followed by a training step was recorded")
    worst, lines = 0.0, []
    for r in restored:
        before = [float(ev["loss"]) for ev in steps if ev["ts"] < r.injected_at][-3:]
        after = [float(ev["loss"]) for ev in steps if ev["ts"] >= r.first_step_at][:1]
        if not before or not after:
            return not_evaluated(name, expected, f"{r.fault_id}: no loss recorded before or after the restore")
        ref = statistics.fmean(before)
        ratio = after[0] / ref if ref > 0 else float("inf")
        worst = max(worst, ratio)
        lines.append(f"{r.fault_id}: loss {ref:.4f} before -> {after[0]:.4f} after (x{ratio:.3f})")
    ok = worst <= 1 + cfg.max_increase
    return (passed if ok else failed)(name, expected, round(worst, 4), "; ".join(lines))


def checkpoints_valid(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    """Every published checkpoint is complete and matches its manifest.

    Temp files of an interrupted atomic write (a node killed mid-save) are expected leftovers the
    loader ignores; they are listed, not failed. A published directory without a manifest, or with
    data that does not match it, is what a restore could wrongly pick up: that fails.
    """
    if not e.checkpoints_valid:
        return None
    name, expected = "checkpoints_valid", "every published checkpoint complete and matching its checksum"
    inv = h.inventory
    if inv is None:
        return not_evaluated(name, expected, "no checkpoint inventory was taken (the backend exposes no "
                                             "checkpoint directories)")
    files, ckpts = inv.get("files", []), inv.get("checkpoints", [])
    if not files:
        return not_evaluated(name, expected, "no checkpoint files were found on any node")
    temp_dirs = {(f["node"], f["path"].rsplit("/", 1)[0]) for f in files if f.get("partial")}
    published = [c for c in ckpts if (c["node"], c["dir"]) not in temp_dirs]
    verified = [c for c in published if c.get("valid") is True]
    if not verified and not any(c.get("valid") is False for c in published):
        return not_evaluated(name, expected, f"{len(files)} file(s) found but no manifest to verify them against")
    bad = [f"{c['node']}:{c['dir']} ({c['reason']})" for c in published if c.get("valid") is not True]
    leftovers = f"; {len(temp_dirs)} temp leftover(s) of interrupted writes, ignored by the loader" \
        if temp_dirs else ""
    if bad:
        return failed(name, expected, len(bad), f"{len(bad)} incomplete or corrupt checkpoint(s): "
                                                f"{', '.join(bad[:5])}{leftovers}")
    return passed(name, expected, len(verified), f"{len(verified)} checkpoint(s) verified by checksum{leftovers}")


def no_fatal(h: History, e: Expect, recs: list[Recovery]) -> CheckResult | None:
    if not e.no_fatal:
        return None
    name, expected = "no_fatal", 0
    if not h.events:
        return not_evaluated(name, expected, NO_EVENTS)
    fatal = h.of("fatal")
    if fatal:
        first = fatal[0]
        return failed(name, expected, len(fatal), f"{len(fatal)} fatal event(s); first on {first.get('node')} "
                                                  f"rank {first.get('rank')}: {first.get('error_type', '')} "
                                                  f"{first.get('error', '')}".strip())
    return passed(name, expected, 0, "no fatal event")


def log_regex(h: History, e: Expect, recs: list[Recovery]) -> list[CheckResult]:
    out = []
    for rule in e.log_regex:
        name = f"log_regex:{rule.pattern}"
        expected = f"{rule.expect} in {rule.node or 'any'} log"
        logs = {k: v for k, v in h.logs.items() if rule.node is None or rule.node in k}
        if not logs:
            out.append(not_evaluated(name, expected, f"no logs were collected{' for ' + rule.node if rule.node else ''}"))
            continue
        rx = re.compile(rule.pattern)
        hits = [(k, m.group(0)) for k, text in logs.items() for m in [rx.search(text)] if m]
        observed = "present" if hits else "absent"
        where = f" (first in {hits[0][0]}: {hits[0][1][:120]!r})" if hits else f" in {len(logs)} log(s)"
        res = passed if observed == rule.expect else failed
        out.append(res(name, expected, observed, f"pattern {observed}{where}"))
    return out
