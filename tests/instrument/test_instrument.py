import json
import os
import subprocess
import sys

import pytest

from chaosbench import instrument as cb
from chaosbench.evidence.inventory import verify_dir
from chaosbench.jsonl import read_jsonl

COMMON = {"ts", "event", "node", "rank", "local_rank", "world_size", "restart_count", "pid", "run_id"}


@pytest.fixture
def events(tmp_path, monkeypatch):
    """Run as torchrun would start worker 1 of node-3 under chaosbench; returns a reader of its events."""
    for k, v in {"CHAOSBENCH_EVENTS_DIR": str(tmp_path / "ev"), "CHAOSBENCH_NODE": "node-3", "RANK": "4",
                 "LOCAL_RANK": "1", "WORLD_SIZE": "6", "TORCHELASTIC_RESTART_COUNT": "2",
                 "CHAOSBENCH_RUN_ID": "r9", "CHAOSBENCH_NVME_DIR": str(tmp_path / "nvme"),
                 "CHAOSBENCH_MEMORY_DIR": str(tmp_path / "shm")}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(cb, "_writer", None)
    return lambda: read_jsonl(tmp_path / "ev" / "events-node-3-local1.jsonl")


def test_outside_chaosbench_it_does_nothing_and_imports_no_torch(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAOSBENCH_")}
    code = ("import sys; from chaosbench import instrument as cb\n"
            "assert cb.step(1, loss=0.5) is None and cb.fresh_start() is None and not cb.enabled()\n"
            "with cb.run(): cb.saved(tier='nvme', step=1)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'yaml')))")
    out = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": os.getcwd()}, cwd=tmp_path,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]" and out.stderr == "" and list(tmp_path.iterdir()) == []


def test_event_lines_follow_the_contract(events):
    cb.phase("checkpoint_restore")
    cb.restored(tier="nvme", step=40, duration_s=0.5)
    cb.step(41, loss=1.25)
    cb.saved(step=45, path=os.path.join(os.environ["CHAOSBENCH_MEMORY_DIR"], "ck", "s.pt"), bytes=10)
    cb.fresh_start("nothing on disk")
    cb.done(50)
    got = events()
    assert [e["event"] for e in got] == ["phase", "checkpoint_loaded", "step", "checkpoint_saved",
                                         "checkpoint_fresh_start", "run_complete"]
    assert all(COMMON <= set(e) for e in got)
    assert {k: got[0][k] for k in COMMON - {"ts"}} == {
        "event": "phase", "node": "node-3", "rank": 4, "local_rank": 1, "world_size": 6, "restart_count": 2,
        "pid": os.getpid(), "run_id": "r9"}
    assert (got[1]["tier"], got[1]["step"], got[1]["source"]) == ("nvme", 40, "local")
    assert (got[2]["step"], got[2]["loss"]) == (41, 1.25)
    assert (got[3]["tier"], got[3]["step"], got[3]["bytes"]) == ("memory", 45, 10)
    assert got[4]["reason"] == "nothing on disk" and got[5]["step"] == 50


def test_run_context_emits_phases_and_fatal_then_reraises(events):
    with cb.run():
        pass
    with pytest.raises(ZeroDivisionError):
        with cb.run():
            1 / 0
    got = events()
    assert [(e["event"], e.get("phase")) for e in got] == [("phase", "training"), ("phase", "shutdown"),
                                                           ("phase", "training"), ("fatal", None)]
    assert got[-1]["error_type"] == "ZeroDivisionError" and got[-1]["error"] == "division by zero"


def test_tier_is_derived_from_where_the_path_lives(events, tmp_path):
    assert cb.tier_of(tmp_path / "nvme" / "checkpoints" / "a.pt") == ("nvme", None)
    assert cb.tier_of(tmp_path / "shm" / "a.pt", "nvme") == ("memory", "path is on memory, not the given tier 'nvme'")
    assert cb.tier_of("s3://bucket/ckpt/step-4") == ("s3", None)
    assert cb.tier_of(tmp_path / "nvme-other" / "a.pt", "nvme") == ("nvme", None)   # sibling name is not under
    tier, note = cb.tier_of("/elsewhere/a.pt")
    assert tier is None and "under neither $CHAOSBENCH_NVME_DIR nor $CHAOSBENCH_MEMORY_DIR" in note
    cb.saved(step=3, path="/elsewhere/a.pt")
    assert events()[0]["tier"] is None and "pass tier=" in events()[0]["tier_note"]


def test_unwritable_events_dir_warns_once_and_never_raises(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("CHAOSBENCH_EVENTS_DIR", str(blocker / "ev"))   # a path under a file
    monkeypatch.setattr(cb, "_writer", None)
    for i in range(3):
        cb.step(i)
    cb.fatal(RuntimeError("x"))
    assert capsys.readouterr().err.count("cannot write events") == 1
    assert not cb.enabled()


def test_torch_save_and_load_emit_events_and_verify_the_checksum(events, tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "nvme" / "checkpoints" / "snapshot.pt"
    cb.save({"w": torch.arange(4.0), "step": 7}, path, step=7)
    assert verify_dir(path.parent) == (True, "crc32 checksum ok")          # the harness's inventory agrees
    snap = cb.load(path, weights_only=True)
    assert snap["step"] == 7 and torch.equal(snap["w"], torch.arange(4.0))
    saved, loaded = events()
    assert (saved["event"], saved["tier"], saved["step"], saved["bytes"]) == \
        ("checkpoint_saved", "nvme", 7, path.stat().st_size)
    assert saved["total_s"] >= 0 and saved["checksum"].startswith("crc32:")
    assert (loaded["event"], loaded["tier"], loaded["step"], loaded["checksum_ok"], loaded["checksum"]) == \
        ("checkpoint_loaded", "nvme", 7, True, saved["checksum"])
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(cb.ChecksumError, match="manifest says crc32:"):
        cb.load(path, weights_only=True)
    assert events()[-1]["event"] == "checkpoint_invalid" and events()[-1]["step"] == 7
    assert not list(path.parent.glob("*.tmp*"))


def test_failed_save_emits_checkpoint_failed_and_reraises(events, tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "shm").mkdir()
    (tmp_path / "shm" / "taken").write_text("")
    with pytest.raises(OSError):
        cb.save({"x": 1}, tmp_path / "shm" / "taken" / "a.pt", step=2)
    ev = events()[-1]
    assert (ev["event"], ev["tier"], ev["step"]) == ("checkpoint_failed", "memory", 2) and ev["error"]


def test_dcp_save_and_load_round_trip_with_events(events, tmp_path):
    torch = pytest.importorskip("torch")
    d = tmp_path / "nvme" / "dcp" / "step-5"
    cb.dcp_save({"w": torch.arange(6.0)}, d, step=5)
    assert verify_dir(d)[0] is True
    target = {"w": torch.zeros(6)}
    cb.dcp_load(target, d)
    assert torch.equal(target["w"], torch.arange(6.0))
    saved, loaded = events()
    assert (saved["event"], saved["tier"], saved["step"]) == ("checkpoint_saved", "nvme", 5) and saved["bytes"] > 0
    assert (loaded["event"], loaded["tier"], loaded["step"], loaded["checksum_ok"]) == \
        ("checkpoint_loaded", "nvme", 5, True)
    data = json.loads((d / "manifest.json").read_text())
    victim = next(n for n in data["files"] if n != ".metadata")
    (d / victim).write_bytes(b"garbage")
    with pytest.raises(cb.ChecksumError, match=victim):
        cb.dcp_load({"w": torch.zeros(6)}, d)
