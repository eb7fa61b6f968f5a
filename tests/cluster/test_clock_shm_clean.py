"""libfaketime's /dev/shm files of a local cluster's preloaded trees (clean.py: note_clock_root,
clock_leftovers): the sweep of a dead harness's shm dir removes those of the roots it lists, and keeps a
file whose pid now belongs to another process. The SIGKILLed-harness run is in test_clock_fault_local.py."""
import os
import subprocess
import sys

from chaosbench.cluster import clean


def _files(root, pid):
    return [root / f"faketime_shm_{pid}", root / f"sem.faketime_sem_{pid}"]


def test_the_files_of_a_listed_root_go_with_the_dead_owners_shm_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(clean, "SHM_ROOT", tmp_path)
    d = tmp_path / "chaosbench-cbclk1"
    d.mkdir()
    (d / "owner").write_text(f"{os.uname().nodename}:999999999:1")   # this host, a pid that is gone
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    clean.note_clock_root(d, gone.pid)
    gone.wait()
    with open(d / clean.CLOCK_ROOTS, "a") as f:   # a root whose pid is now this process (another start time)
        f.write(f"{os.getpid()} 1\n")
    for f in _files(tmp_path, gone.pid) + _files(tmp_path, os.getpid()):
        f.write_text("")
    unrelated = tmp_path / "faketime_shm_1"
    unrelated.write_text("")
    monkeypatch.setattr(clean.proctree, "find_with_key", lambda key: {})   # no process of this host is touched
    removed = {}
    clean.sweep_local(removed=removed)
    assert not d.exists()
    assert sorted(removed["faketime shm files"]) == sorted(str(f) for f in _files(tmp_path, gone.pid))
    assert all(f.exists() for f in _files(tmp_path, os.getpid())), "a file of a reused pid was removed"
    assert unrelated.exists(), "a file no cluster of ours listed was removed"
