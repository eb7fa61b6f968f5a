"""The warm-start client checks who holds the socket name before it sends anything (trainer/warm_start.py).

The name is no secret (every process of the host's network namespace reads it in /proc/net/unix) and it
is free for anyone to bind once the server is gone (the OOM killer, a fault). A squatter that binds it
then must get nothing from a worker's client: not its argv, not its environment (the S3 secret), not its
stdin/stdout/stderr. The worker starts cold instead.
"""
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WS = [sys.executable, "-m", "trainer.warm_start"]

# binds the abstract name (retrying while the real server still holds it), then reports what one client sent
SQUATTER = textwrap.dedent("""
    import os, socket, sys, time
    name, uid = sys.argv[1], int(sys.argv[2])
    if uid:
        os.setgid(uid); os.setuid(uid)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    deadline = time.monotonic() + 30
    while True:
        try:
            s.bind("\\0" + name)
            break
        except OSError:
            if time.monotonic() > deadline:
                print("NOBIND", flush=True); sys.exit(1)
            time.sleep(0.02)
    s.listen(8)
    print("BOUND", flush=True)
    s.settimeout(20)
    try:
        conn, _ = s.accept()
    except OSError:
        print("NOCONN", flush=True); sys.exit(0)
    conn.settimeout(10)
    try:
        data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    except OSError:
        data, fds = b"", []
    print("GOT", len(data), len(fds), data[:300].decode(errors="replace"), flush=True)
""")

JOB = "import sys; print('job ran', flush=True); sys.exit(0)\n"


def _squat(name: str, uid: int) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", SQUATTER, name, str(uid)], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.strip() == "BOUND", f"the squatter could not bind {name!r}: {line!r}"
    return p


def _wait_for(path: Path, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)
    return path.read_text().strip()


@pytest.mark.parametrize("uid", [0, 65534], ids=["same-uid-other-process", "other-uid"])
def test_a_squatter_on_the_name_of_a_dead_server_gets_nothing_and_the_worker_starts_cold(tmp_path, uid):
    if uid and os.getuid() != 0:
        pytest.skip("needs root to run the squatter as another uid (65534)")
    if not uid:
        uid = os.getuid()
    (tmp_path / "job.py").write_text(JOB)
    tmp_path.chmod(0o755)
    # the node launcher: kill its own warm server (as the OOM killer would), wait for the squatter, start a worker
    launcher = tmp_path / "launcher.sh"
    launcher.write_text(textwrap.dedent(f"""
        echo "$CHAOSBENCH_WARM_SOCKET" > name
        until srv=$(pgrep -f "trainer.warm_start serve" -P $$); do sleep 0.05; done
        kill -KILL $srv
        while [ ! -e squatted ]; do sleep 0.05; done
        SECRET_KEY=s3cr3t {' '.join(WS)} run job.py; echo "rc=$?"
    """))
    node = subprocess.Popen([*WS, "node", "--preload", "json", "--", "bash", str(launcher)], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    squatter = None
    try:
        squatter = _squat(_wait_for(tmp_path / "name"), 0 if uid == os.getuid() else uid)
        (tmp_path / "squatted").write_text("")
        out, _ = node.communicate(timeout=60)
        got, _ = squatter.communicate(timeout=30)
    finally:
        for p in (node, squatter):
            if p is not None and p.poll() is None:
                p.kill()
    assert got.startswith("GOT 0 0"), f"the squatter received the client's request: {got}"
    assert "s3cr3t" not in got
    assert "rc=0" in out and "job ran" in out, out
    assert "is not this node's warm server" in out and "cold start" in out, out


def test_a_client_without_the_servers_identity_sends_nothing(tmp_path):
    """CHAOSBENCH_WARM_SOCKET alone (a node not started by `warm_start node`, or an env copied from one):
    the client cannot tell the server from a squatter, so it does not connect."""
    (tmp_path / "job.py").write_text(JOB)
    name = f"chaosbench-warm-test-{os.getpid()}"
    squatter = _squat(name, 0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAOSBENCH_WARM")}
    try:
        p = subprocess.run([*WS, "run", "job.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                           env={**env, "PYTHONPATH": str(REPO), "CHAOSBENCH_WARM_SOCKET": name, "SECRET_KEY": "x"})
        squatter.kill()
        got, _ = squatter.communicate(timeout=30)
    finally:
        if squatter.poll() is None:
            squatter.kill()
    assert "GOT" not in got, got
    assert p.returncode == 0 and "job ran" in p.stdout and "cold start" in p.stderr, p.stderr
    assert "CHAOSBENCH_WARM_SERVER" in p.stderr


def test_the_real_server_still_serves_its_own_workers(tmp_path):
    """The check does not refuse the server it is meant to find."""
    (tmp_path / "job.py").write_text("import os; print('job', os.getppid(), flush=True)\n")
    p = subprocess.run([*WS, "node", "--preload", "json", "--", "bash", "-c", f"{' '.join(WS)} run job.py"],
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "job " in p.stdout, p.stdout + p.stderr
    assert "cold start" not in p.stderr, p.stderr
