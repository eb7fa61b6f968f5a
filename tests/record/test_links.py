"""A link planted in a run directory fails record_integrity, and the record never reads through it:
not an events file, a log, an inventory, checkpoints.json or exits.json (rundir.py's rule)."""
import json

from .stored import copy_run, judged


def _plant(run, rel, outside, text):
    target = outside / rel.replace("/", "_")
    target.write_text(text)
    (run / rel).unlink(missing_ok=True)
    (run / rel).symlink_to(target)


def test_the_record_reads_nothing_through_planted_links(tmp_path):
    run = copy_run(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    step = {"ts": 1.0, "node": "node-9", "rank": 9, "local_rank": 0, "world_size": 1, "restart_count": 0,
            "event": "step", "step": 99999, "loss": 1.0}
    _plant(run, "events/events-node-9-local0.jsonl", outside, json.dumps(step) + "\n")
    _plant(run, "logs/node-0.log", outside, "SECRET-LOG-LINE\n")
    _plant(run, "checkpoints.json", outside, json.dumps({"planted": True}))
    _plant(run, "exits.json", outside, json.dumps({"node-9": [0]}))
    h, res = judged(run)
    assert all(e.get("node") != "node-9" for e in h.events)
    assert "node-0.log" not in h.logs and all("SECRET" not in t for t in h.logs.values())
    assert h.inventory is None and "node-9" not in h.exits
    assert res["record_integrity"].status == "failed"
    for rel in ("events/events-node-9-local0.jsonl", "logs/node-0.log", "checkpoints.json", "exits.json"):
        assert rel in res["record_integrity"].reason


def test_a_linked_events_folder_is_not_read(tmp_path):
    run = copy_run(tmp_path)
    real = tmp_path / "elsewhere"
    (run / "events").rename(real)
    (run / "events").symlink_to(real)
    h, res = judged(run)
    assert h.events == [] and res["record_integrity"].status == "failed"
