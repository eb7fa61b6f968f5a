"""A published checkpoint always has its checkpoint_saved logged: the store calls back while it holds
local_store.PUBLISHING, and the worker's exit paths take that lock before os._exit, so a fatal exit a
moment after a rename cannot cut the log line off (the harness would read the restore from it as an
invented claim: checks/restore_evidence.py)."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from trainer.checkpoint import local_store
from trainer.checkpoint.local_store import LocalStore

REPO = Path(__file__).resolve().parents[2]


def test_the_callback_runs_with_the_checkpoint_in_place_and_the_lock_held(tmp_path):
    store = LocalStore("memory", str(tmp_path / "mem"), keep_last=2, fsync=False)
    seen = []

    def published(where):
        seen.append((where, os.path.isdir(where), local_store.PUBLISHING.locked()))
    where = store.save(5, b"x" * 100, {"step": 5}, on_published=published)
    assert seen == [(where, True, True)]
    assert not local_store.PUBLISHING.locked()


def test_a_failed_callback_is_not_a_failed_save(tmp_path):
    store = LocalStore("memory", str(tmp_path / "mem"), keep_last=2, fsync=False)

    def broken(where):
        raise OSError("events disk full")
    where = store.save(7, b"y" * 10, {"step": 7}, on_published=broken)
    assert os.path.isdir(where) and not local_store.PUBLISHING.locked()


def test_a_fatal_exit_waits_for_a_publish_in_flight_to_be_logged(tmp_path):
    """A writer thread is between its rename and its log line when the worker dies: the line is
    written before the process exits, and before the fatal."""
    log = tmp_path / "events.jsonl"
    script = textwrap.dedent(f"""
        import json, threading, time
        from trainer.checkpoint import local_store
        from trainer import train
        log = open({str(log)!r}, "a", buffering=1)
        worker = train.Worker()
        worker.events.emit = lambda ev, fields: log.write(json.dumps({{"event": ev}}) + "\\n")
        inside = threading.Event()
        def writer():
            with local_store.PUBLISHING:        # renamed; its checkpoint_saved still to come
                inside.set()
                time.sleep(0.4)
                log.write(json.dumps({{"event": "checkpoint_saved"}}) + "\\n")
        threading.Thread(target=writer).start()
        inside.wait()
        worker.die(RuntimeError("peer gone"))
    """)
    p = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 1, p.stderr
    events = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    assert events == ["checkpoint_saved", "fatal"], (events, p.stderr[-2000:])
