"""Event and log lines written after collection are set aside whole, at line boundaries, and counted."""
from chaosbench.evidence.late_writes import LATE_DIR, mark, set_aside


def test_lines_after_the_mark_move_aside_and_a_half_written_line_goes_with_them(tmp_path):
    ev, logs = tmp_path / "events", tmp_path / "logs"
    ev.mkdir()
    logs.mkdir()
    a, b = ev / "events-node-0-local0.jsonl", ev / "events-node-1-local0.jsonl"
    a.write_text('{"n": 1}\n{"n": 2}\n{"half": ')      # collected mid-line
    b.write_text('{"n": 1}\n')
    (logs / "node-1.log").write_text("step 10\n")
    marks = mark(tmp_path)
    assert set(marks) == {"events/" + a.name, "events/" + b.name, "logs/node-1.log"}
    with open(a, "a") as f:
        f.write('true}\n{"event": "fatal"}\n')
    with open(logs / "node-1.log", "a") as f:
        f.write("RuntimeError: Connection reset by peer\n")
    (ev / "events-node-2-local0.jsonl").write_text('{"late": 1}\n')   # a file begun after collection
    assert set_aside(tmp_path, marks) == 4
    assert a.read_text() == '{"n": 1}\n{"n": 2}\n' and b.read_text() == '{"n": 1}\n'
    assert (logs / "node-1.log").read_text() == "step 10\n"
    assert (tmp_path / LATE_DIR / "events" / a.name).read_text() == '{"half": true}\n{"event": "fatal"}\n'
    assert "Connection reset" in (tmp_path / LATE_DIR / "logs" / "node-1.log").read_text()
    assert not (ev / "events-node-2-local0.jsonl").exists()
    assert (tmp_path / LATE_DIR / "events" / "events-node-2-local0.jsonl").is_file()
    assert not (tmp_path / LATE_DIR / "events" / b.name).exists()


def test_nothing_written_after_the_mark_moves_nothing(tmp_path):
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "events-node-0-local0.jsonl").write_text('{"n": 1}\n')
    assert set_aside(tmp_path, mark(tmp_path)) == 0 and not (tmp_path / LATE_DIR).exists()
