"""The timeline under clock skew: events re-timed by when the harness received them (observer/received.py).

A synthetic run (tests/checks/synth.node_loss) is written out as a real run directory would be: each
node's events file with the node's own stamps, and received.jsonl as the live tail writes it (a poll
every 0.2 s). One survivor's clock is skewed by 30 s through the fault and its recovery."""
import json

import pytest

from chaosbench.checks.history import History
from chaosbench.checks.recovery import recoveries
from chaosbench.observer.received import RECEIPTS, THRESHOLD_S, corrected_ts

from .synth import T0, node_loss

POLL_S, SKEWED = 0.2, "node-1"


def write_run(tmp_path, skew_s: float, skew_from: float = 3.0, skew_to: float = 8.05, h=None, skewed=SKEWED):
    """The run directory of `h` (synth.node_loss) with `skewed`'s clock off by skew_s for true times in
    [skew_from, skew_to): what its files say, and when a 0.2-s poll would have read each line."""
    h = h or node_loss()
    (tmp_path / "events").mkdir()
    per_file: dict[str, list[tuple[float, bytes]]] = {}
    for e in h.events:
        true = e["ts"] - T0
        stamped = dict(e, ts=e["ts"] + (skew_s if e["node"] == skewed and skew_from <= true < skew_to else 0.0))
        per_file.setdefault(f"events-{e['node']}-local0.jsonl", []).append((true, (json.dumps(stamped) + "\n").encode()))
    receipts = []
    for name, lines in per_file.items():
        (tmp_path / "events" / name).write_bytes(b"".join(b for _, b in lines))
        end, i, poll = 0, 0, 0.0
        while i < len(lines):
            poll += POLL_S
            before = end
            while i < len(lines) and lines[i][0] <= poll - 0.01:   # written before this poll
                end += len(lines[i][1])
                i += 1
            if end != before:
                receipts.append({"rx": T0 + poll, "file": name, "end": end})
    (tmp_path / RECEIPTS).write_text("".join(json.dumps(r) + "\n" for r in sorted(receipts, key=lambda r: r["rx"])))
    (tmp_path / "faults.jsonl").write_text(json.dumps(
        {"ts": T0 + 4.0, "id": "f1", "fault": "kill_node", "action": "inject", "target": "node-2",
         "params": {"node": "node-2"}, "took_s": 0.1}) + "\n")
    (tmp_path / "harness.json").write_text(json.dumps(h.harness))
    return tmp_path


def fields(rec):
    return (rec.total_s, rec.rendezvous_s, rec.first_step_s, rec.lost_steps, rec.world_size_after)


def test_without_skew_every_timestamp_stays_as_written(tmp_path):
    h = History.load(write_run(tmp_path, 0.0))
    assert all("ts_node" not in e for e in h.events)
    assert [e["ts"] for e in h.events] == [e["ts"] for e in node_loss().events]
    assert all(abs(v["max_s"]) <= POLL_S and abs(v["min_s"]) <= POLL_S and v["corrected"] == 0
               for v in h.clock_skew.values())
    assert [fields(r) for r in recoveries(h)] == [fields(r) for r in recoveries(node_loss())]


def without_then_with_receipts(run, truth):
    """Judged on the nodes' own stamps (receipts removed) the recoveries differ from the truth; the
    History loaded with the receipts back in place is returned."""
    kept = (run / RECEIPTS).read_bytes()
    (run / RECEIPTS).unlink()
    assert [fields(r) for r in recoveries(History.load(run))] != truth   # uncorrected: fooled
    (run / RECEIPTS).write_bytes(kept)
    return History.load(run)


@pytest.mark.parametrize("skew_s", [30.0, -30.0])
def test_a_skewed_survivor_would_fool_the_recovery_check_and_does_not(tmp_path, skew_s):
    truth = [fields(r) for r in recoveries(node_loss())]
    run = write_run(tmp_path, skew_s)
    # the node's own stamps, uncorrected: the check is fooled (a 30-s recovery, or none at all)
    h = without_then_with_receipts(run, truth)
    got = recoveries(h)
    assert len(got) == len(truth) and all(a == pytest.approx(b, abs=POLL_S + 0.05) for a, b in zip(map(fields, got), truth))
    # every event of the skewed node is back at its true time (within a poll): so in its true order too
    key = lambda e: (e["event"], e.get("step"), e.get("phase"), e["restart_count"], e.get("tier"))
    true_ts = {key(e): e["ts"] for e in node_loss().events if e["node"] == SKEWED}
    mine = [e for e in h.events if e["node"] == SKEWED]
    assert all(abs(e["ts"] - true_ts[key(e)]) <= POLL_S + 0.05 for e in mine)
    steps = [(e["restart_count"], e["step"]) for e in mine if e["event"] == "step"]
    assert steps == sorted(steps), "the clock stepped back inside a poll: its lines must keep their order"
    s = h.clock_skew[SKEWED]
    assert s["corrected"] > 0 and (s["max_s"] if skew_s > 0 else s["min_s"]) == pytest.approx(skew_s, abs=POLL_S + 0.05)
    assert h.clock_skew["node-0"]["corrected"] == 0


def test_the_rule():
    assert corrected_ts(-0.1, -0.05) is None                     # read late, no skew
    assert corrected_ts(-8.0, -0.05) is None                     # an old line in a backlog
    assert corrected_ts(29.9, 29.95) == 29.95                    # same regime as the batch's freshest line
    assert corrected_ts(29.9, -0.05) == 29.9                     # ahead of the harness: only a clock does that
    assert corrected_ts(-0.1, 29.95) is None                     # before the jump, in the jump's batch
    assert corrected_ts(-30.1, -30.0) == -30.0                   # behind, consistently
    assert corrected_ts(29.9, -0.05, 29.95) == 29.95             # read with the first lines after the step back
    assert corrected_ts(-30.1, -0.05, -30.0) == -30.0            # the same, for a clock that was behind
    assert corrected_ts(-0.1, -0.05, 29.95) is None              # after the step back
    assert THRESHOLD_S >= 1.0


def test_the_report_shows_the_measured_skew_only_where_a_node_was_skewed(tmp_path):
    from chaosbench.analyse import shown_skew   # what result.json's clock_skew holds for the report

    def clock_skew_of(run):
        return shown_skew(History.load(run))
    (tmp_path / "a").mkdir(); (tmp_path / "b").mkdir()
    skewed = clock_skew_of(write_run(tmp_path / "a", 30.0))
    assert skewed[SKEWED]["max_s"] == pytest.approx(30.0, abs=POLL_S + 0.05) and skewed[SKEWED]["corrected"] > 0
    assert skewed[SKEWED]["skewed_s"] == pytest.approx(5.0, abs=0.5)     # skewed from t=3.0 to 8.05
    assert clock_skew_of(write_run(tmp_path / "b", 0.0)) == {}


def test_a_lone_survivor_30_s_ahead_is_no_30_s_recovery(tmp_path):
    """Two nodes; node-1 is killed and node-0, the survivor, whose clock is 30 s ahead from just before the
    fault on, trains alone: its own stamps say a 33-s recovery."""
    h = node_loss()
    h.events = [dict(e, world_size=1) if e["restart_count"] else e for e in h.events
                if e["node"] != "node-1" or not e["restart_count"]]
    h.events = [dict(e, node={"node-1": "node-2", "node-2": "node-1"}.get(e["node"], e["node"])) for e in h.events]
    run = write_run(tmp_path, 30.0, skew_from=3.5, skew_to=1e9, h=h, skewed="node-0")
    (run / "faults.jsonl").write_text((run / "faults.jsonl").read_text().replace("node-2", "node-1"))
    (run / "received.raw").write_bytes((run / RECEIPTS).read_bytes())
    (run / RECEIPTS).unlink()
    (fooled,) = recoveries(History.load(run))
    assert fooled.total_s > 30
    (run / RECEIPTS).write_bytes((run / "received.raw").read_bytes())
    (rec,) = recoveries(History.load(run))
    assert rec.total_s == pytest.approx(3.0, abs=POLL_S + 0.05) and rec.lost_steps == 2
