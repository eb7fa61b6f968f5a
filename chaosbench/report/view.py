"""Turn a loaded run directory into what the report template shows, headline first.

The headline answers the four questions the report exists for: what happened, did we recover
from the right tier, how long did it take, what did it cost.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

from chaosbench import rundir
from chaosbench.instrument.tiers import TIERS
from chaosbench.observer.received import THRESHOLD_S

from .chart import build_chart
from .lineage import build_lineage
from .load import RunDir, _json_file
from .schema import with_defaults
from .timeline import faults_from_log, timeline_of

PHASES = (("detection", "detection_s"), ("rendezvous", "rendezvous_s"),
          ("restore", "restore_s"), ("first step", "first_step_s"))


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def cluster_shape(cluster: dict[str, Any]) -> str:
    if not cluster:
        return "not recorded"
    nodes, procs = cluster.get("nodes"), cluster.get("procs_per_node")
    parts = [f"{nodes if nodes is not None else '?'} nodes × {procs if procs is not None else '?'} proc"]
    lo, hi = cluster.get("min_nodes"), cluster.get("max_nodes")
    if lo is not None or hi is not None:
        parts.append(f"elastic {lo if lo is not None else '?'}–{hi if hi is not None else '?'}")
    if cluster.get("rendezvous"):
        parts.append(f"rendezvous {cluster['rendezvous']}")
    if cluster.get("launcher"):
        parts.append(f"launcher {cluster['launcher']} {cluster.get('launcher_version') or ''}".strip())
    return ", ".join(parts)


def compact_shape(cluster: dict[str, Any]) -> str:
    """'3×1 (2–3) etcd-v3': nodes × procs, elastic bounds, rendezvous; for the runs index."""
    if not cluster:
        return "not recorded"
    q = lambda k: "?" if cluster.get(k) is None else str(cluster[k])  # noqa: E731
    return f"{q('nodes')}×{q('procs_per_node')} ({q('min_nodes')}–{q('max_nodes')}) {cluster.get('rendezvous') or ''}".strip()


def check_counts(checks: list[dict[str, Any]]) -> dict[str, int]:
    c = Counter(str(ch.get("status")) for ch in checks)
    return {"passed": c["passed"], "failed": c["failed"], "not_evaluated": c["not_evaluated"],
            "total": len(checks)}


def verdict_of(result: dict[str, Any]) -> str:
    v = result.get("verdict")
    return v if v in ("passed", "failed", "error") else "unknown"


def recovered(rec: dict[str, Any]) -> bool:
    """A recovery ends with a training step; without one (and no total) training never came back."""
    return rec.get("first_step_at") is not None or rec.get("total_s") is not None


def _recovery_row(rec: dict[str, Any], fault: dict[str, Any] | None) -> dict[str, Any]:
    phases = [(name, rec.get(key)) for name, key in PHASES]
    known = sum(v for _, v in phases if _num(v) and v > 0)
    total = rec.get("total_s")
    scale = total if _num(total) and total > 0 else known
    bar = [{"name": name, "s": v, "pct": round(100 * v / scale, 2)}
           for name, v in phases if _num(v) and v > 0 and scale]
    return {"rec": rec, "fault": fault or {}, "phases": phases, "bar": bar, "recovered": recovered(rec),
            "missing_phases": [name for name, v in phases if v is None]}


MAX_HEADLINE_FAULTS = 3
MAX_HEADLINE_CHECKS = 5  # the rest are one scroll away, in the checks table


def _summary(rows: list[dict[str, Any]]) -> str:
    """Many faults (a flapping node): one line with tiers, worst recovery and total lost steps."""
    tiers = Counter(str(row["rec"].get("tier") or "tier not measured") for row in rows)
    totals = sorted(r["rec"]["total_s"] for r in rows if _num(r["rec"].get("total_s")))
    lost = [r["rec"]["lost_steps"] for r in rows if _num(r["rec"].get("lost_steps"))]
    parts = [f"{len(rows)} recoveries: " + ", ".join(f"{t} ×{n}" for t, n in tiers.most_common())]
    if totals:
        parts.append(f"recovery median {totals[len(totals) // 2]:.1f} s, worst {totals[-1]:.1f} s")
    parts.append(f"{sum(lost)} steps lost in total" if lost else "lost steps not measured")
    return "; ".join(parts) + "."


def headline(result: dict[str, Any], rows: list[dict[str, Any]],
             timeline: dict[str, Any] | None = None) -> list[str]:
    """One plain sentence per fault, then the failing checks: the ten-second answer."""
    if len(rows) > MAX_HEADLINE_FAULTS:
        return [_summary(rows)]
    lines = []
    for row in rows:
        f, r = row["fault"], row["rec"]
        what = " ".join(str(v) for v in (f.get("type"), f.get("target")) if v) or str(r.get("fault_id"))
        trig = f" ({f['trigger']})" if f.get("trigger") else ""
        tier = r.get("tier")
        step = r.get("restored_step")
        parts = [f"{what}{trig}: "]
        if not recovered(r):
            lines.append(f"{what}{trig}: NOT RECOVERED, no training step after it.")
            continue
        parts.append(f"recovered from {tier}" if tier else "restore tier not measured")
        if step is not None:
            parts.append(f" at step {step}")
        if _num(r.get("total_s")):
            parts.append(f" in {r['total_s']:.1f} s")
        if r.get("lost_steps") is not None:
            parts.append(f", {r['lost_steps']} steps lost")
        ws0, ws1 = r.get("world_size_before"), r.get("world_size_after")
        if ws0 is not None and ws1 is not None:
            parts.append(f", world size {ws0} → {ws1}")
        lines.append("".join(parts) + ".")
    faults_without = [f for f in result.get("faults") or []
                      if f.get("id") not in {row["rec"].get("fault_id") for row in rows}]
    for f in faults_without:
        what = " ".join(str(v) for v in (f.get("type"), f.get("target")) if v)
        lines.append(f"{what}: {_without_recovery(f, timeline or {})}")
    return lines


def _without_recovery(fault: dict[str, Any], timeline: dict[str, Any]) -> str:
    """A fault with no recovery: did training ride through it (an S3 outage should) or stop?"""
    start, end = fault.get("injected_at"), fault.get("healed_at")
    if not _num(start):
        return "not injected (no injection time recorded)."
    end = end if _num(end) else float("inf")
    during = [r["step"] for r in timeline.get("steps", []) if start <= r["ts"] <= end]
    restarts = [r for r in timeline.get("restarts", []) if start <= r["ts"] <= end]
    if not timeline.get("steps"):
        return "no recovery recorded."
    if during and not restarts:
        window = "while it lasted" if end != float("inf") else "after it"
        return f"no restart; training went on {window} (steps {min(during)} → {max(during)})."
    if restarts:
        return f"no recovery recorded, {len(restarts)} restart(s) during it."
    return "no recovery recorded, and no training step after it."


def tier_rows(checkpoints: dict[str, Any]) -> list[dict[str, Any]]:
    names = list(TIERS) + [t for t in checkpoints if t not in TIERS]
    rows = []
    for tier in names:
        stats = checkpoints.get(tier)
        stats = stats if isinstance(stats, dict) else {}
        errors = stats.get("errors") if isinstance(stats.get("errors"), list) else []
        grouped = Counter(e if isinstance(e, str) else repr(e) for e in errors)
        rows.append({"tier": tier, "stats": stats, "recorded": bool(stats),
                     "errors": grouped.most_common()})
    return rows


def _slurm_ids(run_dir: Path) -> str | None:
    """'job 12; node-0 on c1: 12.0, 12.3; ...' from slurm.json (backend slurm), else None."""
    ids = _json_file(run_dir, "slurm.json")
    if not isinstance(ids, dict):
        return None
    nodes = "; ".join(f"{n} on {ids.get('hosts', {}).get(n, '?')}: {', '.join(steps)}"
                      for n, steps in sorted((ids.get("steps") or {}).items()))
    return f"job {ids.get('job_id')}" + (f"; steps {nodes}" if nodes else "")


def _natural(path: str) -> list:
    """snapshot-10.pt after snapshot-9.pt."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", path)]


def held_files(run_dir: Path, t0: float | None) -> list[dict[str, Any]]:
    """What each node held on disk, seen by the harness itself: at each fault (inventories/<fault>.json)
    and after the run (checkpoints.json). A job without events shows its checkpoints here."""
    sources = [f"inventories/{n}" for n in rundir.files(run_dir, "inventories", ".json")] + ["checkpoints.json"]
    out = []
    for rel in sources:
        inv = _json_file(run_dir, rel)
        if not isinstance(inv, dict):
            continue          # absent, unreadable or a link: the run's other evidence still stands
        files = [f for f in inv.get("files") or [] if isinstance(f, dict)]
        when = f"at {inv.get('fault_id')}" if inv.get("fault_id") else "after the run"
        if _num(inv.get("taken_at")) and _num(t0):
            when += f" (t+{inv['taken_at'] - t0:.1f} s)"
        nodes: dict[str, list[dict]] = {}
        for f in files:
            nodes.setdefault(str(f.get("node")), []).append(f)
        rows = [{"node": n, "files": len(fs), "bytes": sum(f.get("bytes") or 0 for f in fs),
                 "partial": sum(1 for f in fs if f.get("partial")),
                 "newest": max((str(f.get("path")) for f in fs), key=_natural)}
                for n, fs in sorted(nodes.items())]
        out.append({"when": when, "rows": rows, "unseen": [u for u in inv.get("unseen") or [] if isinstance(u, dict)]})
    return out


def _log_link(ev: dict[str, Any]) -> str | None:
    """'#q=<text>': the logs view filtered to the evidence line (the report's own filter, see the template);
    an inventory or recovery figure links to its section of the report."""
    src = str(ev.get("source") or "")
    if src.startswith(("inventories/", "checkpoints.json")):
        return "#held"                      # the report's "Checkpoint files held per node"
    if src.startswith("result.json"):
        return "#recovery"
    if not ev.get("log") or not ev.get("text"):
        return None
    return "#q=" + quote(str(ev["text"])[:80], safe="")


def what_to_fix(diagnosis: dict[str, Any] | None, verdict: str) -> dict[str, Any] | None:
    """The report's first section: the root cause (for a run that did not pass) and each finding with its
    evidence (linked into the logs view), the change and its expected effect. None: no diagnosis file."""
    if not isinstance(diagnosis, dict):
        return None
    findings = []
    for f in diagnosis.get("findings") or []:
        if not isinstance(f, dict):
            continue
        ev = [{**e, "link": _log_link(e)} for e in f.get("evidence") or [] if isinstance(e, dict)]
        findings.append({**f, "evidence": ev})
    rc = diagnosis.get("root_cause") if isinstance(diagnosis.get("root_cause"), dict) else None
    if rc:
        rc = {**rc, "evidence": [{**e, "link": _log_link(e)} for e in rc.get("evidence") or [] if isinstance(e, dict)]}
    # the root cause of a run that did not pass; one that is just the injected fault needs no fixing
    show = rc if verdict != "passed" and rc and not rc.get("fault_id") else None
    return {"root_cause": show, "findings": findings}


def build_context(run: RunDir) -> dict[str, Any]:
    r = with_defaults(run.result)
    faults_recovered = not r["faults"] and bool(run.faults_log)
    if faults_recovered:
        r = with_defaults({**r, "faults": faults_from_log(run.faults_log)})
    faults = r["faults"]
    fault_by_id = {f.get("id"): f for f in faults}
    recovery_rows = [_recovery_row(rec, fault_by_id.get(rec.get("fault_id")))
                     for rec in r.get("recoveries") or []]
    checks = r.get("checks") or []
    timeline = timeline_of(r)
    chart = build_chart(r, timeline)
    scenario = r.get("scenario") or {}
    failing = [c for c in checks if c.get("status") == "failed"
               or (c.get("status") == "not_evaluated" and not c.get("optional"))]
    more_failing = max(0, len(failing) - MAX_HEADLINE_CHECKS)
    return {
        "r": r,
        "fix": what_to_fix(run.diagnosis, verdict_of(r)),
        "run_id": r.get("run_id") or run.path.name,
        "scenario": scenario,
        "verdict": verdict_of(r),
        "shape": cluster_shape(r.get("cluster") or {}),
        "slurm": _slurm_ids(run.path),
        "t0": chart.t0,
        "checkpoints_recorded": isinstance(run.result.get("checkpoints"), dict),
        "faults": faults,
        "recoveries": recovery_rows,
        "headline": headline(r, recovery_rows, timeline),
        "failing": failing[:MAX_HEADLINE_CHECKS],
        "more_failing": more_failing,
        "checks": checks,
        "counts": check_counts(checks),
        "tiers": tier_rows(r.get("checkpoints") or {}),
        "held": held_files(run.path, chart.t0),
        "goodput": r.get("goodput") or {},
        "chart": chart,
        "faults_from_log": faults_recovered,
        "lineage": build_lineage(run.result.get("lineage"), r, chart.t0),
        "links": [str(x) for x in run.result.get("links") or []] if isinstance(run.result.get("links"), list) else [],
        "logs": run.logs,
        "event_files": run.event_files,
        "faults_log": run.faults_log,
        "exits": run.exits,
        "clock_skew": _skew(run.result.get("clock_skew")),
        "clock_threshold": THRESHOLD_S,
    }


def _skew(skew: Any) -> dict[str, dict]:
    """result.json's clock_skew (the analyse step's, only where a node went beyond the threshold)."""
    if not isinstance(skew, dict):
        return {}
    return {str(n): s for n, s in sorted(skew.items()) if isinstance(s, dict)}
