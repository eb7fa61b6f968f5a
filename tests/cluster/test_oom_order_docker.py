"""memory_pressure's ballast settles the OOM killer's order in a real memory cgroup: the worker goes
first and, should the kernel need a second victim (a fresh-clone CI saw the agent killed 11 ms after
the worker), the ballast itself, never the agent. The ballast here never leaves on its own, so the
second kill always comes; without the ballast's oom_score_adj the same history kills the agent."""
import json
import subprocess
import textwrap

import pytest

from chaosbench.cluster import available_backends
from chaosbench.cluster.docker.memory import BALLAST, BALLAST_MARK

_why = available_backends()["docker"]
pytestmark = [pytest.mark.docker, pytest.mark.timeout(300),
              pytest.mark.skipif(_why is not None, reason=f"docker backend unusable: {_why}")]

# a process holding N MiB of its own pages until killed
HOLD = "import sys, time; b = b'x' * (int(sys.argv[1]) << 20); print('ready', flush=True); time.sleep(300)"

# pid 1 of a 300-MiB container: an "agent" (60 MiB), a "worker" (120 MiB), then the ballast
# (260 MiB: more than the worker's death frees, so a second kill must come)
SCENE = textwrap.dedent("""
    import json, subprocess, sys
    hold, ballast, give_worker = sys.argv[1], sys.argv[2], sys.argv[3] == '1'
    agent = subprocess.Popen([sys.executable, '-c', hold, '60'], stdout=subprocess.PIPE, text=True)
    worker = subprocess.Popen([sys.executable, '-c', hold, '120'], stdout=subprocess.PIPE, text=True)
    assert agent.stdout.readline().strip() == 'ready' and worker.stdout.readline().strip() == 'ready'
    b = subprocess.Popen([sys.executable, '-c', ballast, '%s', '260', *([str(worker.pid)] if give_worker else [])])
    worker.wait()
    try:
        b.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    print(json.dumps({'worker': worker.returncode, 'ballast': b.poll(), 'agent': agent.poll()}))
    b.kill(); agent.kill()
""" % BALLAST_MARK)


def _never_leaves(src: str) -> str:
    """The ballast with its exits at the first kill removed: a watcher that never ran in time."""
    out = src.replace("    os._exit(0)\nbefore", "    pass\nbefore").replace("        os._exit(0)\n", "        pass\n")
    assert out.count("os._exit(0)") == 0, "the ballast's exits moved: update this test"
    return out


def _run(image: str, ballast: str, give_worker: bool) -> dict:
    out = subprocess.run(["docker", "run", "--rm", "-m", "300m", "--memory-swap", "300m", "--label",
                          "chaosbench.test=oom-order", "--entrypoint", "python", image, "-c", SCENE,
                          HOLD, ballast, "1" if give_worker else "0"],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def image():
    from chaosbench.cluster.docker.images import node_image
    return node_image()


def test_the_second_oom_kill_takes_the_ballast_never_the_agent(image):
    got = _run(image, _never_leaves(BALLAST), give_worker=True)
    assert got["worker"] == -9, got          # the worker first: far larger, same oom_score_adj
    assert got["ballast"] == -9, got         # then the ballast, whose death frees its memfd
    assert got["agent"] is None, got         # the agent lives


def test_without_the_raised_scores_the_same_history_kills_the_agent(image):
    # the control: the ballast's adj lines stripped, the kernel picks the agent as the second victim
    plain = _never_leaves(BALLAST).replace("sys.argv[3:] + ['self']", "[]")
    got = _run(image, plain, give_worker=False)
    assert got["worker"] == -9 and got["agent"] == -9 and got["ballast"] is None, got
