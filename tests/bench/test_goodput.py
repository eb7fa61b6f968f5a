"""bench/goodput.py's bookkeeping: net progress and which node dies next. No cluster, no timing."""
import json
import time

import pytest

from .loader import import_bench


@pytest.fixture(scope="module")
def goodput():
    yield from import_bench("goodput")


def _step(ts, step, node="node-0", pid=1):
    return {"ts": ts, "event": "step", "step": step, "node": node, "pid": pid, "world_size": 3}


def test_net_progress_counts_redone_steps_once(goodput):
    # steps 1..100 at 10/s, a loss rolls back to 95, then 96..120 again
    ev = [_step(i / 10, i) for i in range(1, 101)] + [_step(15 + i / 10, 95 + i, pid=2) for i in range(1, 26)]
    steps = goodput._steps(ev + [{"ts": 1.0, "event": "phase", "phase": "training"}])
    assert goodput._highest_by(steps, 5.0) == 50
    assert goodput._highest_by(steps, 100.0) - goodput._highest_by(steps, 5.0) == 70   # 120 - 50, not 50 + 25
    assert goodput._highest_by(steps, -1) == 0


class _Cluster:
    def __init__(self, events_dir, status):
        self.events_dir, self._status = events_dir, status

    def node_status(self, node):
        return self._status.get(node, "running")


def test_victim_is_the_longest_training_live_node(goodput, tmp_path):
    now = time.time()
    ev = [_step(now - 50, 1, "node-0"), _step(now - 40, 1, "node-1"), _step(now - 30, 1, "node-3"),
          _step(now - 1, 9, "node-0"), _step(now - 1, 9, "node-1"), _step(now - 1, 9, "node-3"),
          _step(now - 60, 1, "node-2")]                      # node-2 stopped training long ago
    (tmp_path / "events-all-local0.jsonl").write_text("\n".join(json.dumps(e) for e in ev) + "\n")
    c = _Cluster(tmp_path, {})
    assert goodput._victim(c, killed=set(), protect=set()) == "node-0"
    assert goodput._victim(c, killed={"node-0"}, protect=set()) == "node-1"
    assert goodput._victim(c, killed=set(), protect={"node-0", "node-1"}) == "node-3"
    with pytest.raises(RuntimeError, match="no training node"):
        goodput._victim(_Cluster(tmp_path, {"node-3": "exited:-9"}), killed={"node-0", "node-1"}, protect=set())


def test_a_loss_costs_its_stalled_seconds_against_the_rate_just_before_it(goodput):
    """10 steps/s; at t=30 nothing for 2 s and a rollback of 3 steps: ~2.3 s lost. A second history
    with the same loss but every rate doubled (the machine ran faster) costs the same seconds."""
    def history(rate):
        ev = [_step(i / rate, i) for i in range(1, 30 * rate)]
        top = ev[-1]["step"]
        ev += [_step(32 + i / rate, top - 3 + i, pid=2) for i in range(1, 40 * rate)]
        return goodput._steps(ev)
    slow, fast = goodput._loss_cost(history(10), 30.0, 100.0), goodput._loss_cost(history(20), 30.0, 100.0)
    assert 2.1 < slow < 2.5 and 2.1 < fast < 2.5
    undisturbed = goodput._steps([_step(i / 10, i) for i in range(1, 1000)])
    assert abs(goodput._loss_cost(undisturbed, 30.0, 100.0)) < 0.2
    assert goodput._loss_cost(history(10), 30.0, 40.0) < 2.6       # a window cut short by the run's end
