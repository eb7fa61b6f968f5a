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


def harness_mid_fault(source: str, run_dir: Path):
    """Run a harness script (python source; argv[1] is run_dir) in its own session until it prints
    'READY <project>' with its fault in place; (its process, the project)."""
    import subprocess
    import sys
    p = subprocess.Popen([sys.executable, "-c", source, str(run_dir)], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    line = p.stdout.readline()
    assert line.startswith("READY"), f"harness did not come up: {line!r}"
    return p, line.split()[1]


def sigkill_then_clean(p, project: str, container: str, timeout: float = 30) -> None:
    """SIGKILL the harness mid-fault, then the docker sweep `chaosbench clean` runs: the project's
    containers, networks and volumes are gone, and so is the node's last process (with it its
    namespaces: network rules, mounts)."""
    import os
    import signal

    from chaosbench.cluster.docker.cli import docker, leftovers, sweep
    pid = docker("inspect", "-f", "{{.State.Pid}}", container).strip()
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    assert leftovers(project)["containers"], "expected the killed harness to leave its nodes"
    assert project in sweep()
    assert leftovers(project) == {"containers": [], "networks": [], "volumes": []}
    deadline = time.monotonic() + timeout
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not os.path.exists(f"/proc/{pid}"), "the node's process (and its namespaces) outlived clean"
