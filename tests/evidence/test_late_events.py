"""Event lines written after collection are set aside whole, at line boundaries, and counted."""
from chaosbench.evidence.late_events import LATE_DIR, mark, set_aside


def test_lines_after_the_mark_move_aside_and_a_half_written_line_goes_with_them(tmp_path):
    ev = tmp_path / "events"
    ev.mkdir()
    a, b = ev / "events-node-0-local0.jsonl", ev / "events-node-1-local0.jsonl"
    a.write_text('{"n": 1}\n{"n": 2}\n{"half": ')      # collected mid-line
    b.write_text('{"n": 1}\n')
    marks = mark(ev)
    with open(a, "a") as f:
        f.write('true}\n{"event": "fatal"}\n')
    (ev / "events-node-2-local0.jsonl").write_text('{"late": 1}\n')   # a file begun after collection
    assert set_aside(tmp_path, marks) == 3
    assert a.read_text() == '{"n": 1}\n{"n": 2}\n' and b.read_text() == '{"n": 1}\n'
    assert (tmp_path / LATE_DIR / a.name).read_text() == '{"half": true}\n{"event": "fatal"}\n'
    assert not (ev / "events-node-2-local0.jsonl").exists() and (tmp_path / LATE_DIR / "events-node-2-local0.jsonl").is_file()
    assert not (tmp_path / LATE_DIR / b.name).exists()


def test_nothing_written_after_the_mark_moves_nothing(tmp_path):
    ev = tmp_path / "events"
    ev.mkdir()
    (ev / "events-node-0-local0.jsonl").write_text('{"n": 1}\n')
    assert set_aside(tmp_path, mark(ev)) == 0 and not (tmp_path / LATE_DIR).exists()
