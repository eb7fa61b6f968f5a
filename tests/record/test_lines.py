"""A line that does not parse is reported with its file:line and first 80 chars, unless it is the
file's torn last line (no newline after it: a writer killed mid-line)."""
import pytest

from chaosbench.jsonl import SNIPPET

from .stored import copy_run, events_file, judged, parts


def _garble(path, line_no: int, text: str) -> None:
    lines = path.read_text().split("\n")
    lines[line_no - 1] = text
    path.write_text("\n".join(lines))


@pytest.mark.parametrize("text", ['{"ts": 1795475280.1, "event": "fatal", "node": "node-0", "err',
                                  "garbage", "[1, 2]", '{"ts": 1795475280.1, "node": "node-0"}'])
def test_a_garbled_line_in_the_middle_of_an_events_file(tmp_path, text):
    run = copy_run(tmp_path)
    _garble(events_file(run), 5, text)
    h, res = judged(run)
    assert parts(h) == [f"events/{events_file(run).name}:5"]
    assert text[:SNIPPET] in h.integrity[0].problem
    assert res["record_integrity"].status == "failed"


def test_a_torn_last_line_is_no_problem(tmp_path):
    run = copy_run(tmp_path)
    with open(events_file(run), "a") as f:
        f.write('{"ts": 1795475280.1, "event": "st')   # killed mid-write: no newline
    h, _ = judged(run)
    assert h.integrity == []


def test_a_garbled_last_line_with_its_newline_is_not_torn(tmp_path):
    run = copy_run(tmp_path)
    with open(events_file(run), "a") as f:
        f.write('{"ts": 1795475280.1, "event": "st\n')
    h, _ = judged(run)
    assert len(h.integrity) == 1 and h.integrity[0].part.startswith("events/events-node-0")


def test_a_garbled_torchrun_agent_line(tmp_path):
    run = copy_run(tmp_path)
    _garble(run / "events" / "agent-node-1.jsonl", 2, "not json")
    h, _ = judged(run)
    assert parts(h) == ["events/agent-node-1.jsonl:2"]


@pytest.mark.parametrize("text, what", [("nonsense", "not JSON"), ('{"id": "f1", "action": "inject"}', "no ts"),
                                        ('{"ts": "soon", "id": "f1", "action": "heal"}', "field 'ts' is str")])
def test_a_garbled_fault_log_line(tmp_path, text, what):
    run = copy_run(tmp_path)
    with open(run / "faults.jsonl", "a") as f:
        f.write(text + "\n")
    h, _ = judged(run)
    assert parts(h) == ["faults.jsonl:2"] and what in h.integrity[0].problem
