"""The live event tail: only complete lines, across polls and files, in time order."""
import json

from chaosbench.observer import EventTail, Progress


def line(**kw):
    return json.dumps(kw) + "\n"


def test_tail_reads_complete_lines_incrementally(tmp_path):
    tail = EventTail(tmp_path / "events")
    assert tail.poll() == []                       # directory not there yet
    (tmp_path / "events").mkdir()
    a = tmp_path / "events" / "events-node-0-local0.jsonl"
    b = tmp_path / "events" / "events-node-1-local0.jsonl"
    a.write_text(line(ts=2.0, event="step", step=1) + '{"ts": 3.0, "event": "st')
    b.write_text(line(ts=1.0, event="phase", phase="training"))
    assert [e["ts"] for e in tail.poll()] == [1.0, 2.0]
    with open(a, "a") as f:
        f.write('ep", "step": 2}\n' + "garbage\n")
    assert [(e["ts"], e["step"]) for e in tail.poll()] == [(3.0, 2)]
    assert tail.poll() == []


def test_progress_counts_steps_not_phases_as_progress():
    p = Progress()
    before = p.last_progress_at
    p.update({"event": "phase", "node": "node-0", "phase": "rendezvous", "restart_count": 2})
    assert p.last_progress_at == before and p.trainer_phases == {"node-0": "rendezvous (restart 2)"}
    p.update({"event": "step", "node": "node-0", "step": 5, "world_size": 2})
    assert p.step == 5 and p.world_size == 2 and p.last_progress_at >= before
    p.update({"event": "step", "node": "node-1", "step": 3, "world_size": 2})
    assert p.step == 5
