"""Events of another run, and events stamped after the evidence was collected, are integrity
failures; what after-collection/ holds is set aside on purpose and not judged."""
import json

from chaosbench.checks.record import LATE_ALLOWANCE_S

from .stored import BYO_HUNG, copy_run, events_file, harness, judged, parts


def _append(path, **fields):
    last = json.loads(path.read_text().splitlines()[-1])
    with open(path, "a") as f:
        f.write(json.dumps({**last, **fields}) + "\n")


def test_events_carry_the_run_id():
    """The record can hold events to their run: every writer stamps CHAOSBENCH_RUN_ID (trainer,
    instrument, node watcher)."""
    assert all(json.loads(line).get("run_id") for line in events_file(BYO_HUNG).read_text().splitlines())


def test_an_event_of_another_run(tmp_path):
    run = copy_run(tmp_path)
    _append(events_file(run), run_id="node_loss-20261101-000000-dead", step=81)
    h, res = judged(run)
    n = len(events_file(run).read_text().splitlines())
    assert parts(h) == [f"events/{events_file(run).name}:{n}"] and "dead" in h.integrity[0].problem
    assert res["record_integrity"].status == "failed"


def test_without_the_runs_own_id_the_events_ids_must_agree(tmp_path):
    run = copy_run(tmp_path, BYO_HUNG)   # no result.json, no run_id in harness.json
    h, _ = judged(run)
    assert h.integrity == [] and h.run_id is None
    _append(events_file(run), run_id="other-run")
    h, _ = judged(run)
    assert len(h.integrity) == 1 and "other-run" in h.integrity[0].problem


def test_the_harness_records_run_id_wins(tmp_path):
    run = copy_run(tmp_path)
    harness(run, run_id="someone-else")
    h, _ = judged(run)
    assert h.integrity and all("someone-else" in p.problem for p in h.integrity)


def test_an_event_after_the_collection(tmp_path):
    run = copy_run(tmp_path)
    stopped = json.loads((run / "harness.json").read_text())["stopped_at"]
    harness(run, collected_at=stopped + 0.5)
    h, _ = judged(run)
    assert h.integrity == []
    _append(events_file(run), ts=stopped + 0.5 + LATE_ALLOWANCE_S + 0.1, step=81)
    h, res = judged(run)
    assert len(h.integrity) == 1 and "after the evidence was collected" in h.integrity[0].problem
    assert res["record_integrity"].status == "failed"


def test_an_old_record_is_held_to_its_finish(tmp_path):
    """Before collected_at, result.json's finished_at (after teardown) bounds the events."""
    run = copy_run(tmp_path)
    finished = json.loads((run / "result.json").read_text())["finished_at"]
    _append(events_file(run), ts=finished + 60, step=81)
    h, _ = judged(run)
    assert len(h.integrity) == 1 and "after the run finished" in h.integrity[0].problem


def test_what_was_set_aside_after_collection_is_not_judged(tmp_path):
    run = copy_run(tmp_path)
    late = run / "after-collection" / "events"
    late.mkdir(parents=True)
    last = json.loads(events_file(run).read_text().splitlines()[-1])
    (late / events_file(run).name).write_text(json.dumps({**last, "ts": last["ts"] + 600, "run_id": "x"}) + "\ngarbage\n")
    h, _ = judged(run)
    assert h.integrity == []
