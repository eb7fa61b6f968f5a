"""Unit tests: owner tokens and finding a node's processes across sessions."""
import os
import subprocess
import sys
import time

from chaosbench.cluster import owner, proctree


def test_owner_token_alive_only_while_process_lives():
    assert owner.alive(owner.token())
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    tok = owner.token(p.pid)
    assert owner.alive(tok)
    p.kill(); p.wait()
    assert not owner.alive(tok)
    assert not owner.alive("garbage")


def test_kill_all_takes_children_in_their_own_sessions():
    marker = {"CB_TEST_MARK": f"m{os.getpid()}{time.time_ns()}"}
    # parent starts a child in a new session (like torchrun's workers), then both sleep
    code = ("import subprocess,sys,time; subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'],"
            "start_new_session=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **marker}, start_new_session=True)
    try:
        deadline = time.time() + 10
        while len(proctree.find(marker)) < 2 and time.time() < deadline:
            time.sleep(0.05)
        pids = proctree.find(marker)
        assert len(pids) == 2
        proctree.kill_all(marker)
        p.wait(timeout=5)
        time.sleep(0.2)
        assert [q for q in proctree.find(marker) if not proctree.zombie(q)] == []
    finally:
        proctree.kill_all(marker)
