"""The result.json fields the report shows, so an absent field reads as null ("not measured").

Mirrors docs/result.md; a runner that omits a field gets "not measured", never an empty cell or 0.
"""

from __future__ import annotations

from typing import Any

TOP = ("run_id", "scenario", "backend", "cluster", "seed", "command", "started_at", "finished_at",
       "duration_s", "verdict", "error", "faults", "recoveries", "checks", "checkpoints", "timeline",
       "goodput", "files")
FAULT = ("id", "type", "target", "trigger", "params", "injected_at", "healed_at", "error", "verdict", "reason")
RECOVERY = ("fault_id", "injected_at", "detected_at", "rendezvous_done_at", "restored_at", "first_step_at",
            "detection_s", "rendezvous_s", "restore_s", "first_step_s", "total_s", "tier", "restored_step",
            "source", "bytes", "restore_duration_s", "step_before_fault", "lost_steps",
            "world_size_before", "world_size_after", "problems", "claims")
CHECK = ("name", "status", "expected", "observed", "reason", "optional")
TIER = ("saves", "failures", "skipped", "errors", "stall_s_median", "total_s_median", "bytes_median",
        "throughput_mb_s")
GOODPUT = ("baseline_steps_per_s", "overall_steps_per_s", "ratio")
SCENARIO = ("name", "file", "description")


def _fill(d: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    d = dict(d) if isinstance(d, dict) else {}
    for k in keys:
        d.setdefault(k, None)
    return d


def with_defaults(result: dict[str, Any]) -> dict[str, Any]:
    r = _fill(result, TOP)
    r["scenario"] = _fill(r["scenario"], SCENARIO)
    r["goodput"] = _fill(r["goodput"], GOODPUT)
    r["faults"] = [_fill(f, FAULT) for f in r["faults"] or []]
    r["recoveries"] = [_fill(x, RECOVERY) for x in r["recoveries"] or []]
    r["checks"] = [_fill(c, CHECK) for c in r["checks"] or []]
    # An empty tier object ({}) means "no events for this tier": keep it empty so it reads as such.
    r["checkpoints"] = {t: (_fill(s, TIER) if s else {}) for t, s in (r["checkpoints"] or {}).items()}
    return r
