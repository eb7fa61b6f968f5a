"""Run summaries for result.json: timeline, per-tier checkpoint statistics, goodput."""
from __future__ import annotations

import statistics

from chaosbench.checks.history import History
from chaosbench.instrument.tiers import TIERS
from chaosbench.result import Goodput, TierStats, Timeline


def timeline(h: History) -> Timeline:
    t = Timeline()
    ws_last = None
    seen_restart: set[tuple] = set()
    for ev in h.events:
        name, node = ev.get("event"), ev.get("node")
        if name == "step":
            t.steps.append({k: ev.get(k) for k in ("ts", "node", "rank", "step", "world_size", "restart_count", "loss")})
            if ev.get("world_size") is not None and ev["world_size"] != ws_last:
                ws_last = ev["world_size"]
                t.world_size.append([ev["ts"], ws_last])
        elif name == "phase" and ev.get("phase") == "rendezvous":
            t.rendezvous.append({"ts": ev["ts"], "node": node})
        elif name in ("checkpoint_saved", "checkpoint_failed"):
            t.checkpoints.append({"ts": ev["ts"], "node": node, "tier": ev.get("tier"), "step": ev.get("step"),
                                  "ok": name == "checkpoint_saved"})
        rc = ev.get("restart_count")
        if rc and (node, rc) not in seen_restart:
            seen_restart.add((node, rc))
            t.restarts.append({"ts": ev["ts"], "node": node, "restart_count": rc})
    return t


def _median(xs):
    return statistics.median(xs) if xs else None


def checkpoint_stats(h: History) -> dict[str, TierStats]:
    out = {}
    if not any(str(e.get("event", "")).startswith("checkpoint_") for e in h.events):
        return out   # a job that reports no checkpoints: "not measured", not "0 saves"
    for tier in TIERS:
        saved = [e for e in h.of("checkpoint_saved") if e.get("tier") == tier]
        failed = [e for e in h.of("checkpoint_failed") if e.get("tier") == tier]
        skipped = [e for e in h.of("checkpoint_skipped") if e.get("tier") == tier]
        s = TierStats(saves=len(saved), failures=len(failed), skipped=len(skipped),
                      errors=sorted({str(e.get("error", "")) for e in failed})[:20])
        s.stall_s_median = _median([float(e["stall_s"]) for e in saved if e.get("stall_s") is not None])
        s.total_s_median = _median([float(e["total_s"]) for e in saved if e.get("total_s") is not None])
        b = _median([int(e["bytes"]) for e in saved if e.get("bytes") is not None])
        s.bytes_median = int(b) if b is not None else None
        rates = [e["bytes"] / e["total_s"] / 1e6 for e in saved if e.get("bytes") and e.get("total_s")]
        s.throughput_mb_s = round(_median(rates), 2) if rates else None
        out[tier] = s
    return out


def goodput(h: History) -> Goodput:
    """Useful progress per second overall, versus the fault-free rate before the first fault."""
    steps = h.of("step")
    g = Goodput()
    if len(steps) < 2:
        return g
    first_fault = h.faults[0].injected_at if h.faults else None
    pre = [e for e in steps if first_fault is None or e["ts"] < first_fault]
    if len(pre) >= 2 and pre[-1]["ts"] > pre[0]["ts"]:
        g.baseline_steps_per_s = round((int(pre[-1]["step"]) - int(pre[0]["step"])) / (pre[-1]["ts"] - pre[0]["ts"]), 4)
    span = steps[-1]["ts"] - steps[0]["ts"]
    best = max(int(e["step"]) for e in steps)
    if span > 0:
        g.overall_steps_per_s = round((best - int(steps[0]["step"])) / span, 4)
    if g.baseline_steps_per_s and g.overall_steps_per_s is not None:
        g.ratio = round(g.overall_steps_per_s / g.baseline_steps_per_s, 4)
    return g
