"""Shared by the backend integration tests: read the events files, wait for conditions."""
from __future__ import annotations

import json
import time
from pathlib import Path


def events(events_dir: Path) -> list[dict]:
    out = []
    for f in sorted(Path(events_dir).glob("events-*.jsonl")):
        for line in f.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass   # the last line of a killed writer may be cut
    return out


def wait_for(what: str, pred, timeout: float, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = pred()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def max_step(evs: list[dict], **where) -> int:
    return max((e["step"] for e in evs if e["event"] == "step"
                and all(e.get(k) == v for k, v in where.items())), default=0)


def train_kill_recover(cluster, victim: str = "node-1", survivor: str = "node-0", steps: int = 10,
                       timeout: float = 240) -> dict:
    """Train to `steps`, SIGKILL `victim`, and return the first step the survivor made alone."""
    cluster.start_training()
    wait_for(f"step {steps} at world size 2",
             lambda: max_step(events(cluster.events_dir), world_size=2) >= steps, timeout)
    killed_at = time.time()
    cluster.kill_node(victim)
    assert cluster.node_status(victim).startswith(("exited", "absent"))

    def resumed():
        alone = [e for e in events(cluster.events_dir) if e["event"] == "step" and e["node"] == survivor
                 and e["world_size"] == 1 and e["ts"] > killed_at]
        return alone[0] if alone else None
    first = wait_for("the survivor training alone", resumed, timeout)
    return {"first_alone": first, "killed_at": killed_at, "events": events(cluster.events_dir)}
