"""The timeline the chart draws: taken from result.json, or rebuilt from events/ when absent.

The runner normally writes `timeline` into result.json; a run that broke before that point (verdict
"error") may have events but no timeline, and its report should still show what happened.
"""

from __future__ import annotations

from typing import Any, Callable

Events = dict[str, list[dict[str, Any]]]


def timeline_of(result: dict[str, Any], parse_events: Callable[[], Events]) -> dict[str, Any]:
    given = result.get("timeline")
    if isinstance(given, dict) and given.get("steps"):
        return _normalised(given)
    events = parse_events()
    return _normalised(from_events(events)) if events else _normalised(given or {})


def _normalised(tl: dict[str, Any]) -> dict[str, Any]:
    def rows(name: str) -> list:
        value = tl.get(name)
        return value if isinstance(value, list) else []

    def has_ts(r: Any) -> bool:
        return isinstance(r, dict) and isinstance(r.get("ts"), (int, float))

    return {
        "steps": [r for r in rows("steps") if has_ts(r) and isinstance(r.get("step"), (int, float))],
        "world_size": [
            (float(p[0]), int(p[1]))
            for p in rows("world_size")
            if isinstance(p, (list, tuple)) and len(p) == 2
            and isinstance(p[0], (int, float)) and isinstance(p[1], (int, float))
        ],
        "restarts": [r for r in rows("restarts") if has_ts(r)],
        "rendezvous": [r for r in rows("rendezvous") if has_ts(r)],
        "checkpoints": [r for r in rows("checkpoints") if has_ts(r)],
    }


def from_events(events: Events) -> dict[str, Any]:
    steps, restarts, rendezvous, checkpoints = [], [], [], []
    seen_incarnations: set[tuple] = set()
    for lines in events.values():
        for e in lines:
            ts, kind = e.get("ts"), e.get("event")
            if not isinstance(ts, (int, float)):
                continue
            node, rank = e.get("node"), e.get("rank")
            incarnation = (node, rank, e.get("restart_count"))
            if incarnation not in seen_incarnations:
                seen_incarnations.add(incarnation)
                if (e.get("restart_count") or 0) > 0:
                    restarts.append({"ts": ts, "node": node, "restart_count": e.get("restart_count")})
            if kind == "step":
                steps.append({k: e.get(k) for k in ("ts", "node", "rank", "step", "world_size",
                                                     "restart_count", "loss")})
            elif kind == "phase" and e.get("phase") == "rendezvous":
                rendezvous.append({"ts": ts, "node": node})
            elif kind in ("checkpoint_saved", "checkpoint_failed"):
                checkpoints.append({"ts": ts, "node": node, "tier": e.get("tier"), "step": e.get("step"),
                                    "ok": kind == "checkpoint_saved"})
    steps.sort(key=lambda r: r["ts"])
    world_size: list[list] = []
    for r in steps:  # world size as seen by the training steps: changes only
        ws = r.get("world_size")
        if isinstance(ws, int) and (not world_size or world_size[-1][1] != ws):
            world_size.append([r["ts"], ws])
    return {"steps": steps, "world_size": world_size, "restarts": restarts,
            "rendezvous": rendezvous, "checkpoints": checkpoints}


def faults_from_log(actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Faults rebuilt from faults.jsonl, for a run that broke before result.json listed them."""
    faults: dict[str, dict[str, Any]] = {}
    for a in actions:
        if not isinstance(a.get("ts"), (int, float)):
            continue
        key = str(a.get("id") or f"{a.get('fault')}:{a.get('target')}")
        f = faults.setdefault(key, {"id": a.get("id") or key, "type": a.get("fault"), "target": a.get("target"),
                                    "trigger": "", "params": a.get("params") or {}, "injected_at": None,
                                    "healed_at": None})
        if a.get("action") == "inject" and f["injected_at"] is None:
            f["injected_at"] = a["ts"]
        elif a.get("action") == "heal":
            f["healed_at"] = a["ts"]
    return list(faults.values())
