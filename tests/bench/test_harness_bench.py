"""bench/harness.py's bookkeeping: phase spans from events, medians with spread per tree and scenario,
a JUnit file's times. No cluster, no timing."""
import json

import pytest

from .loader import import_bench


@pytest.fixture(scope="module")
def harness():
    yield from import_bench("harness")


def test_first_event_and_step_span_over_every_rank(harness, tmp_path):
    ev = tmp_path / "events"
    ev.mkdir()
    lines = [{"ts": 10.0, "event": "phase"}, {"ts": 11.0, "event": "step"}, {"ts": 19.0, "event": "step"}]
    (ev / "events-node-0.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    (ev / "events-node-1.jsonl").write_text(json.dumps({"ts": 20.5, "event": "step"}) + "\n")
    assert harness.steps_span(tmp_path) == (10.0, (11.0, 20.5))
    (ev / "events-node-0.jsonl").write_text(json.dumps({"ts": 3.0, "event": "phase"}) + "\n")
    (ev / "events-node-1.jsonl").unlink()
    assert harness.steps_span(tmp_path) == (3.0, None)   # no step: no training span, never 0


def test_step_span_is_on_the_harness_timeline_when_a_node_clock_is_skewed(harness, tmp_path):
    """clock_jump and skewed_checkpoint_stamps stamp a node's events in its own (wrong) time: the span
    must come from the corrected timeline, not from an hour-long 'training' (a negative overhead)."""
    ev = tmp_path / "events"
    ev.mkdir()
    files = {"events-node-0.jsonl": [{"ts": 11.0, "event": "step", "node": "node-0"},
                                     {"ts": 19.0, "event": "step", "node": "node-0"}],
             "events-node-1.jsonl": [{"ts": 3620.5, "event": "step", "node": "node-1"}]}   # an hour ahead
    receipts = []
    for name, lines in files.items():
        data = "".join(json.dumps(x) + "\n" for x in lines)
        (ev / name).write_text(data)
        receipts.append({"rx": lines[-1]["ts"] % 3600 + 0.1, "file": name, "end": len(data.encode())})
    (tmp_path / "received.jsonl").write_text("".join(json.dumps(r) + "\n" for r in receipts))
    first, (lo, hi) = harness.steps_span(tmp_path)
    assert (first, lo) == (11.0, 11.0) and abs(hi - 20.6) < 1e-6, (first, lo, hi)


def test_summary_keeps_trees_apart_with_median_and_range(harness):
    def row(tree, wall, up):
        return {"tree": tree, "scenario": "node_loss", "verdict": "passed", "wall_s": wall, "overhead_s": wall - 16,
                "phases_s": {"cluster_up": up, "teardown": None}}
    rows = [row("/base", 30.0, 2.0), row("/new", 26.0, 3.5), row("/base", 32.0, 2.2), row("/new", 25.0, 3.0),
            row("/base", 29.0, 1.9)]
    text = "\n".join(harness.summary(rows))
    assert "node_loss [/base] x3" in text and "node_loss [/new] x2" in text
    base, new = text.split("node_loss [/new]")
    assert "30.0 (29.0-32.0)" in base and "2.0 (1.9-2.2)" in base
    assert "25.5 (25.0-26.0)" in new
    assert "teardown               -" in new   # a phase never seen is said, not zero


def test_junit_times_slowest_first(harness, tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text('<testsuites><testsuite><testcase classname="t.lib" name="a" time="35.5"/>'
                   '<testcase classname="t.lib" name="b" time="71.0"/><testcase classname="t.lib" name="c"/>'
                   '</testsuite></testsuites>')
    assert harness.junit_times(xml) == [("t.lib::b", 71.0), ("t.lib::a", 35.5), ("t.lib::c", 0.0)]


def test_against_with_keep_keeps_each_trees_runs_apart(harness, tmp_path, monkeypatch):
    """--keep with --against: each tree's child run is told where to keep its run directories."""
    calls = []

    def fake_run(argv, **kw):
        calls.append(argv)
        row = {"scenario": "s", "backend": "docker", "verdict": "passed", "wall_s": 1.0, "overhead_s": 0.5,
               "overhead_share": 0.5, "phases_s": {}}
        return type("R", (), {"stdout": json.dumps([row]), "stderr": "", "returncode": 0})()
    monkeypatch.setattr(harness.subprocess, "run", fake_run)
    other = tmp_path / "base"
    monkeypatch.setattr(harness.sys, "argv", ["harness.py", "s.yaml", "--against", str(other),
                                              "--keep", str(tmp_path / "runs"), "--json"])
    assert harness.main() == 0
    keeps = [argv[argv.index("--keep") + 1] for argv in calls]
    assert keeps == [str(tmp_path / "runs" / "against"), str(tmp_path / "runs" / "this")]
    assert calls[0][1] == str(other.resolve() / "bench" / "harness.py")
