"""Clean-up under abuse: `chaosbench run` gets SIGINT (as a terminal sends it: to its whole process
group), SIGTERM, SIGHUP or SIGKILL at a seeded random point -- during cluster start, training or
teardown, sometimes followed by a second Ctrl-C. A run stopped by a catchable signal leaves nothing
of its own behind; after a SIGKILL, `chaosbench clean` leaves nothing: 0 containers, networks,
volumes, loop disks and devices, shm dirs, processes and iptables rules of ours.

Leftovers are counted per harness (owner token), so other runs on the machine never interfere.
TRIALS per backend: ABUSE_TRIALS (default 4, about 35 s each on docker, 20 s local).
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaosbench.cluster import loopfs, proctree
from chaosbench.cluster import owner as owner_mod
from chaosbench.cluster.docker.cli import docker_unusable, leftovers, owners
from chaosbench.cluster.local.backend import SHM_ROOT

REPO = Path(__file__).resolve().parents[2]
TRIALS = int(os.environ.get("ABUSE_TRIALS", "4"))
SEED = int(os.environ.get("ABUSE_SEED", "18"))
SCENARIO = """\
name: abuse_{backend}
cluster: {{nodes: 2, backend: {backend}, elastic: {{min_nodes: 1, max_nodes: 2}}, nvme_size_mb: 64}}
trainer: {{config: trainer/configs/tiny.yaml, overrides: {{training.max_steps: 400, training.step_sleep_s: 0.1}}}}
faults:
  - at: {{step: 10}}
    kill_worker: {{node: node-1}}
expect: {{reaches_step: 150}}
run: {{timeout_s: 240}}
"""
# seconds after start to cover: cluster start, training and, for the late draws, teardown. A docker
# run of SCENARIO ends ~27 s in (9 s of cluster start and teardown, ~18 s of training): a draw far
# past its end only waits for it and then finds "run had ended".
WINDOW = {"docker": (1.0, 32.0), "local": (0.5, 25.0)}


def _mine(tok: str, pid: int) -> bool:
    parts = tok.rsplit(":", 2)
    return len(parts) == 3 and parts[1] == str(pid)


def _projects(pid: int, backend: str) -> set[str]:
    found = {p for p, tok in owners().items() if _mine(tok, pid)} if backend == "docker" else set()
    if loopfs.ROOT.exists():
        for base in loopfs.ROOT.iterdir():
            try:
                if _mine((base / "owner").read_text(), pid):
                    found.add(base.name)
            except OSError:
                pass
    return found


def _left(pid: int, projects: set[str], backend: str) -> dict[str, list]:
    left: dict[str, list] = {}
    if backend == "docker":
        for p in projects | _projects(pid, backend):
            for kind, names in leftovers(p).items():
                left.setdefault(kind, []).extend(names)
    left["processes"] = [q for q, tok in proctree.find_with_key(owner_mod.OWNER_ENV).items()
                         if _mine(tok, pid) and not proctree.zombie(q)]
    left["shm dirs"] = [str(d) for d in SHM_ROOT.glob("chaosbench-cb*")
                        if (d / "owner").is_file() and _mine((d / "owner").read_text(), pid)]
    left["loop disks"] = [p for p in projects if (loopfs.ROOT / p).exists()]
    losetup = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout if shutil.which("losetup") else ""
    left["loop devices"] = [line for line in losetup.splitlines() if any(f"/{p}/" in line for p in projects)]
    if shutil.which("iptables-save"):   # our chain exists only inside node containers, never on the host
        save = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
        left["iptables rules"] = [line for line in save.splitlines() if "CHAOSBENCH" in line]
    return {k: v for k, v in left.items() if v}


def _abuse(tmp_path: Path, backend: str, trial: int) -> str:
    rng = random.Random(f"{SEED}:{backend}:{trial}")
    sig = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL][(trial + SEED) % 4]
    delay = rng.uniform(*WINDOW[backend])
    second_ctrl_c = sig != signal.SIGKILL and rng.random() < 0.5
    path = tmp_path / f"abuse-{backend}-{trial}.yaml"
    path.write_text(SCENARIO.format(backend=backend))
    env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
    env.pop(owner_mod.OWNER_ENV, None)
    with open(tmp_path / f"run-{trial}.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "chaosbench.cli", "run", str(path), "-q", "--report-dir",
                                 str(tmp_path / "reports")], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)   # its own group: killpg is a terminal's Ctrl-C
    what = f"trial {trial}: {signal.Signals(sig).name} after {delay:.1f} s" + (" + 2nd Ctrl-C" if second_ctrl_c else "")
    projects: set[str] = set()
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline and proc.poll() is None:
        projects |= _projects(proc.pid, backend)
        time.sleep(0.5)
    projects |= _projects(proc.pid, backend)
    try:
        os.killpg(proc.pid, sig)
        if second_ctrl_c:
            time.sleep(rng.uniform(0.2, 3.0))
            os.killpg(proc.pid, signal.SIGINT)
    except ProcessLookupError:
        what += " (run had ended)"
    try:
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"{backend} {what}: the run did not end within 300 s of the signal; "
                    f"log: {(tmp_path / f'run-{trial}.log').read_text()[-3000:]}")
    if sig != signal.SIGKILL:   # a catchable signal: the run cleans up after itself
        left = _left(proc.pid, projects, backend)
        assert not left, f"{backend} {what} left {left}; log: {(tmp_path / f'run-{trial}.log').read_text()[-3000:]}"
    r = subprocess.run([sys.executable, "-m", "chaosbench.cli", "clean"] + (["--no-docker"] if backend == "local" else []),
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    left = _left(proc.pid, projects, backend)
    assert not left, f"{backend} {what}: after `chaosbench clean` left {left}; clean said: {r.stdout}"
    return what


@pytest.mark.parametrize("backend", [pytest.param("local", marks=pytest.mark.integration),
                                     pytest.param("docker", marks=pytest.mark.docker)])
@pytest.mark.timeout(1800)
def test_signals_at_random_points_leave_nothing_behind(tmp_path, backend, record_property):
    if backend == "docker":
        why = docker_unusable()
        if why is not None:
            pytest.skip(f"docker backend unusable: {why}")
    done = [_abuse(tmp_path, backend, t) for t in range(TRIALS)]
    record_property("trials", f"{backend}: {len(done)} trials: " + "; ".join(done))
