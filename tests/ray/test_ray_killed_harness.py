"""A SIGKILLed harness on `--backend ray`: `chaosbench run` is killed (as `kill -9` would, the harness
process only) while a Ray Train run trains and a fill_object_store holds node-1's store, so what it
started is all in place: the head, the worker nodes, the services, their network and volumes, the
driver's `docker exec` on the head and the filler job's. Before `chaosbench clean` the cluster and
the driver's exec are there; after it nothing of the run is left: no container, network, volume, nor
any process carrying the killed harness's owner token (an orphaned `docker exec` ends with its head).

39.7 s and 47.0 s on two cores (Ray's start, the filler's start, the sweep); in the chaos suite."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaosbench.cluster import available_backends, proctree
from chaosbench.cluster import owner as owner_mod
from chaosbench.cluster.docker.cli import leftovers
from tests.cluster.test_abuse_cleanup import _left, _mine, _projects

REPO = Path(__file__).resolve().parents[2]
SCENARIO = """\
name: ray_killed_harness
cluster:
  backend: ray
  nodes: 2
  elastic: {min_nodes: 1, max_nodes: 2}
trainer:
  config: trainer/configs/tiny.yaml
  overrides: {training.step_sleep_s: 0.1, training.max_steps: 5000}
  ray: {max_failures: 1, storage: shared}
faults:
  - at: {step: 5}
    fill_object_store: {node: node-1, mb: 40}
    duration_s: 600
expect: {trains_after_settle: 20}
run: {timeout_s: 600}
"""


def _injected(report_dir: Path) -> dict | None:
    for log in report_dir.glob("*/faults.jsonl"):
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            if rec["fault"] == "fill_object_store" and rec["action"] == "inject":
                return rec
    return None


def _ours(pid: int) -> list[int]:
    return [q for q, tok in proctree.find_with_key(owner_mod.OWNER_ENV).items()
            if _mine(tok, pid) and not proctree.zombie(q)]


@pytest.mark.chaos
@pytest.mark.timeout(900)
def test_a_sigkilled_harness_mid_fault_leaves_nothing_after_clean(tmp_path):
    why = available_backends()["ray"]
    if why:
        pytest.skip(f"backend ray: {why}")
    (tmp_path / "s.yaml").write_text(SCENARIO)
    env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
    env.pop(owner_mod.OWNER_ENV, None)
    reports = tmp_path / "reports"
    with open(tmp_path / "run.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "chaosbench.cli", "run", str(tmp_path / "s.yaml"), "-q",
                                 "--report-dir", str(reports)], cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        projects: set[str] = set()
        deadline = time.monotonic() + 420
        while (rec := _injected(reports)) is None:
            projects |= _projects(proc.pid, "docker")
            assert proc.poll() is None, f"the run ended before its fault: {(tmp_path / 'run.log').read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no fill within 420 s: {(tmp_path / 'run.log').read_text()[-3000:]}"
            time.sleep(1)
        projects |= _projects(proc.pid, "docker")
        assert rec["params"]["put_mb"] == 40.0 and rec["params"]["on_node"], rec
        (project,) = projects
        assert {f"{project}-ray-head", f"{project}-node-0", f"{project}-node-1"} <= set(leftovers(project)["containers"])
        held = _ours(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    # what the killed harness left: its cluster and the driver's `docker exec` (the filler's may end
    # by itself once its stdin, the harness's pipe, closes: not asserted)
    left = _left(proc.pid, projects, "docker")
    assert left.get("containers") and left.get("networks"), left
    assert [q for q in _ours(proc.pid) if q in held], f"expected the driver's docker exec alive; held {held}"
    r = subprocess.run([sys.executable, "-m", "chaosbench.cli", "clean"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert project in r.stdout, r.stdout
    deadline = time.monotonic() + 30   # an orphaned `docker exec` notices its container is gone
    while (left := _left(proc.pid, projects, "docker")) and time.monotonic() < deadline:
        time.sleep(1)
    assert not left, f"after `chaosbench clean`: {left}; clean said: {r.stdout}"
