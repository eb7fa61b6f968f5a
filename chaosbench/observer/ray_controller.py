"""Ray Train's controller, read from its own log: the worker group's failures and restarts as agent events.

Ray Train's controller (one actor on the head) writes JSON lines, one object per line with `timestamp_ns`,
`message`, `run_name` and `component: controller`, to `logs/train/ray-train-sys-controller-<id>.log`
(DEBUG and up) and `ray-train-app-controller-<id>.log` (INFO and up; the same lines again). chaosbench
collects them under `<run>/logs/ray/<node>/train/` (cluster/ray/backend.py, address.py RAY_LOGS).
`controller_events(logs, run_id)` turns them into the node watcher's agent events (launchers/base.py
AGENT_EVENTS), stamped with the controller's own clock, `node` the controller's, `launcher: ray`:

- `worker_group_failed`: the controller's failure policy judged a failed group (`decision` retry or raise,
  `error_count`, the `hosts` of the ranks it names) or the new group's start timed out; the detection sign;
- `worker_group_restart`: its decision to start (again) with `world_size` workers, or to resize (`from`);
- `rendezvous_start`: it began starting a group of `world_size` workers;
- `rendezvous_done`: the group started (`world_size`, `pids`): the train function runs on every worker;
- `ray_snapshot_found`: a new controller found the run's checkpoint list in storage (`path`) and offers its
  newest checkpoint to the group (Ray 2.60 logs no checkpoint path when it restarts a group in one run).

Lines of another run (a site cluster's session keeps every job's controller log: `run_name` differs
from the run's id) are left out, and a line the same in both files is read once.
"""
from __future__ import annotations

import json
import re

CONTROLLER_LOG = re.compile(r"(?:^|/)train/ray-train-(?:sys|app)-controller-[^/]+\.log$")

# Ray Train 2.60.0 (ray.train.v2: controller.py, failure_policy, elastic.py, worker_group.py,
# checkpoint_manager.py): a message (its first line for the first pattern) -> the agent event it makes.
# Matched case-blind and loose on whitespace; named groups become the event's fields.
PATTERNS: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(p, re.I), event) for p, event in (
    (r"^\s*\[FailurePolicy\]\s*(?P<decision>RETRY|RAISE)\b", "worker_group_failed"),
    (r"worker\s+group\s+startup\s+timed\s+out\s+after\s+(?P<timeout_s>[\d.]+)\s*seconds", "worker_group_failed"),
    (r"ready\s+resources\s+for\s+(?P<world_size>\d+)\s+workers.*deciding\s+to\s+start", "worker_group_restart"),
    (r"deciding\s+to\s+resize\s+the\s+worker\s+group\s+from\s+(?P<from>\d+)\s*->\s*(?P<world_size>\d+)",
     "worker_group_restart"),
    (r"attempting\s+to\s+start\s+training\s+worker\s+group\s+of\s+size\s+(?P<world_size>\d+)", "rendezvous_start"),
    (r"^\s*started\s+training\s+worker\s+group\s+of\s+size\s+(?P<world_size>\d+)", "rendezvous_done"),
    (r"run\s+snapshot\s+was\s+found\s+in\s+storage\s+folder\s+at:\s*'(?P<path>[^']+)'", "ray_snapshot_found"),
))
_COUNT = re.compile(r"error\s+count:\s*(\d+)", re.I)
_HOST = re.compile(r"hostname='([^']+)'")
_PID = re.compile(r"\bpid=(\d+)")


def is_controller_log(key: str) -> bool:
    """A path under the run's logs/ (History.logs' key) that holds a Ray Train controller's lines."""
    return bool(CONTROLLER_LOG.search(key))


def controller_events(logs: dict[str, str], run_id: str | None = None) -> list[dict]:
    """The agent events of every controller log in `logs` (path under logs/ -> text), by time."""
    seen: set[tuple] = set()
    out: list[dict] = []
    for key in sorted(k for k in logs if is_controller_log(k)):
        node = _node_of(key)
        for text in logs[key].splitlines():
            line = _parse(text)
            if line is None or (run_id and line.get("run_name") and str(line["run_name"]) != run_id):
                continue
            mark = (line["timestamp_ns"], line["message"])
            if mark in seen:
                continue
            seen.add(mark)
            ev = event_of(line["message"])
            if ev is not None:
                name, fields = ev
                out.append({"ts": line["timestamp_ns"] / 1e9, "event": name, "node": node, "launcher": "ray",
                            "observed": True, "source": f"logs/{key}", **fields})
    return sorted(out, key=lambda e: e["ts"])


def event_of(message: str) -> tuple[str, dict] | None:
    """(agent event, fields) for one controller message, or None for a line that says nothing of the group."""
    for pattern, name in PATTERNS:
        m = pattern.search(message)
        if m is None:
            continue
        fields = {k: _value(v) for k, v in m.groupdict().items() if v is not None}
        if "decision" in fields:
            fields["decision"] = str(fields["decision"]).lower()
            count = _COUNT.search(message)
            if count:
                fields["error_count"] = int(count.group(1))
        if name == "worker_group_failed":
            hosts = sorted(set(_HOST.findall(message)))
            if hosts:
                fields["hosts"] = hosts
        if name == "rendezvous_done":
            fields["pids"] = [int(p) for p in _PID.findall(message)]
        fields["line"] = message.strip().splitlines()[0][:300] if message.strip() else ""
        return name, fields
    return None


def _parse(text: str) -> dict | None:
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        line = json.loads(text)
    except ValueError:
        return None
    if not isinstance(line, dict) or not isinstance(line.get("message"), str):
        return None
    ts = line.get("timestamp_ns")
    if not isinstance(ts, int) or isinstance(ts, bool) or ts <= 0:
        return None
    if line.get("component") not in (None, "controller"):
        return None
    return line


def _node_of(key: str) -> str:
    """logs/ray/<node>/train/<file> -> <node> (the head, where the controller runs)."""
    parts = key.split("/")
    i = parts.index("train") if "train" in parts else 0
    return parts[i - 1] if i >= 1 else "ray-head"


def _value(v: str):
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v
