"""The timeline the chart draws, as the analyse step wrote it into result.json (checks/summary.py:
the one place it is derived from the events), normalised so a damaged field reads as absent.

A record without a timeline (written by a runner that broke before it) shows no chart: `chaosbench
recheck` derives it again from the events.
"""

from __future__ import annotations

from typing import Any


def timeline_of(result: dict[str, Any]) -> dict[str, Any]:
    given = result.get("timeline")
    return _normalised(given if isinstance(given, dict) else {})


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
