"""The node watcher over real processes: a launcher that starts two workers (as torchrun does: the
worker environment carries LOCAL_RANK, RANK, WORLD_SIZE, TORCHELASTIC_RESTART_COUNT) and prints
torchrun-style lines. Workers' own children inherit LOCAL_RANK and must not count as workers."""
import json
import os
import subprocess
import sys
from pathlib import Path

from chaosbench.checks.history import History

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = r'''
import os, subprocess, sys, time
print("I1123 00:06:31.717000 1 api.py:706] [default] Rendezvous'ing worker group", flush=True)
print("I1123 00:06:31.9 1 api.py:552] [default] Rendezvous complete for workers. Result:", flush=True)
for line in ("restart_count=1", "group_rank=0", "group_world_size=2", "global_world_sizes=[4, 4]"):
    print("I1123 00:06:31.9 1 api.py:552]   " + line, flush=True)
print("I1123 00:06:31.9 1 api.py:714] [default] Starting worker group", flush=True)
worker = ("import subprocess, sys, time, os; "
          "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1.5)']); time.sleep(0.5); "
          "print(f'[default{os.environ[\"LOCAL_RANK\"]}]:step 7 loss 0.25', flush=True); c.wait()")
procs = [subprocess.Popen([sys.executable, "-c", worker], env={**os.environ, "LOCAL_RANK": str(lr),
         "RANK": str(2 + lr), "WORLD_SIZE": "4", "TORCHELASTIC_RESTART_COUNT": "1"}) for lr in (0, 1)]
for p in procs:
    p.wait()
print("step 99 from the agent, not a worker", flush=True)
sys.exit(3)
'''


def test_watcher_records_workers_steps_and_rendezvous(tmp_path):
    ev = tmp_path / "events"
    env = {**os.environ, "CHAOSBENCH_EVENTS_DIR": str(ev), "CHAOSBENCH_NODE": "node-1", "CHAOSBENCH_RUN_ID": "r"}
    r = subprocess.run([sys.executable, "-m", "chaosbench.observer.node_watch", "--progress",
                        r"step (?P<step>\d+)( loss (?P<loss>[\d.]+))?", "--", sys.executable, "-c", LAUNCHER],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 3                                  # the launcher's exit code is ours
    assert "[default1]:step 7 loss 0.25" in r.stdout          # output passed through unchanged
    h = History.load(tmp_path)
    starts = h.of("worker_start")
    assert sorted((e["local_rank"], e["rank"], e["world_size"], e["restart_count"]) for e in starts) == \
        [(0, 2, 4, 1), (1, 3, 4, 1)]                          # the grandchildren are not workers
    steps = h.of("step")
    # the unprefixed "step 99" line is the agent's: under --tee only prefixed lines are worker progress
    assert sorted((e["local_rank"], e["step"], e.get("loss")) for e in steps) == [(0, 7, 0.25), (1, 7, 0.25)]
    by_pid = {e["local_rank"]: e["pid"] for e in starts}
    assert all(e["pid"] == by_pid[e["local_rank"]] for e in steps if e["step"] == 7)
    assert len(h.of("worker_exit")) == 2 and h.observed_only
    assert all(e["observed"] for e in h.events)
    assert sorted(p.name for p in ev.iterdir()) == ["agent-node-1.jsonl", "events-node-1-local0-observed.jsonl",
                                                    "events-node-1-local1-observed.jsonl"]
    agent = {e["event"]: e for e in h.agent_events}
    assert agent["rendezvous_done"]["restart_count"] == 1 and agent["rendezvous_done"]["world_size"] == 4
    assert agent["rendezvous_done"]["nodes"] == 2 and agent["launcher_exit"]["exit_code"] == 3
    assert "rendezvous_start" in agent


def test_without_events_dir_it_only_passes_output_through(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CHAOSBENCH_EVENTS_DIR"}
    r = subprocess.run([sys.executable, "-m", "chaosbench.observer.node_watch", "--", sys.executable, "-c",
                        "print('hello')"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout == "hello\n"


def test_a_restarted_container_worker_with_the_same_pid_is_a_new_incarnation():
    def e(ts, event, **kw):
        return {"ts": ts, "event": event, "node": "node-0", "local_rank": 0, "pid": 20, "restart_count": 0,
                "observed": True, **kw}
    h = History(events=[e(1, "worker_start"), e(2, "step", step=1), e(5, "worker_start"), e(6, "step", step=1),
                        # an instrumented trainer's own first line after its watcher's worker_start: same process
                        {**e(7, "phase", phase="config"), "observed": False}, e(8, "step", step=2)])
    incs = h.by_incarnation()
    assert sorted(len(v) for v in incs.values()) == [2, 4]


def test_steps_a_process_reports_itself_are_not_counted_twice(tmp_path):
    ev = tmp_path / "events"
    ev.mkdir()
    common = {"node": "node-0", "local_rank": 0, "rank": 0, "world_size": 1, "restart_count": 0}
    lines = {"events-node-0-local0.jsonl": [{"ts": 2, "event": "step", "step": 1, "pid": 5, **common}],
             "events-node-0-local0-observed.jsonl": [
                 {"ts": 1, "event": "worker_start", "pid": 5, "observed": True, **common},
                 {"ts": 2.1, "event": "step", "step": 1, "pid": 5, "observed": True, **common},
                 {"ts": 3, "event": "step", "step": 1, "pid": 6, "observed": True, **common}]}
    for name, evs in lines.items():
        (ev / name).write_text("".join(json.dumps(e) + "\n" for e in evs))
    h = History.load(tmp_path)
    assert sorted((e["pid"], bool(e.get("observed"))) for e in h.of("step")) == [(5, False), (6, True)]


def test_watcher_survives_any_progress_match_and_keeps_forwarding(tmp_path):
    """A regex whose `step` group matches a non-number, a negative one or one too large to be a step:
    the line is passed over (the watcher forwards the node's signals and output and must never die
    on a user's regex); a loss that is no finite number is left out; a repeated step is recorded
    (the checks judge repeats)."""
    from chaosbench.observer.node_watch import Watcher
    w = Watcher(os.getpid(), str(tmp_path), "node-0", r"step (?P<step>\S+)( loss (?P<loss>\S+))?")
    w.workers[4242] = {"node": "node-0", "rank": 0, "local_rank": 0, "world_size": 1, "restart_count": 0,
                       "pid": 4242, "run_id": "r"}
    for text in ("step abc", "step 1 loss 0.5", "step 9" * 2000, "step 1" + "0" * 40, "step -3",
                 "step 2 loss nan", "step 2 loss 0.4", "step 3 loss inf", "[default0]:step x.y"):
        w.line(text)
    rows = [json.loads(x) for x in (tmp_path / "events-node-0-local0-observed.jsonl").read_text().splitlines()]
    assert [(r["step"], r.get("loss")) for r in rows] == [(1, 0.5), (2, None), (2, 0.4), (3, None)]
